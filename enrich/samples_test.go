package enrich

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/segmentio/kafka-go"
)

// TestLastPerPartition: the samples group commits, for each partition of
// a batch, its record with the highest offset, as the reader would of the
// whole batch; and reusing a batch's arrays keeps no record.
func TestLastPerPartition(t *testing.T) {
	msgs := []kafka.Message{
		{Topic: "m", Partition: 0, Offset: 4}, {Topic: "m", Partition: 1, Offset: 9},
		{Topic: "m", Partition: 0, Offset: 5}, {Topic: "m", Partition: 0, Offset: 2}, // re-read after a rebalance
		{Topic: "m", Partition: 2, Offset: 0}, {Topic: "m", Partition: 1, Offset: 10},
	}
	want := []kafka.Message{{Topic: "m", Partition: 0, Offset: 5}, {Topic: "m", Partition: 1, Offset: 10}, {Topic: "m", Partition: 2, Offset: 0}}
	if diff := cmp.Diff(want, lastPerPartition(msgs)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := lastPerPartition(nil); len(got) != 0 {
		t.Errorf("no records: %v", got)
	}

	b := newSampleBlocks()
	sb := b.batch()
	sb.msgs = append(sb.msgs, kafka.Message{Value: []byte("x")})
	sb.gpuFrom = append(sb.gpuFrom, origin{topic: "m", offset: 1})
	b.reset(&sb)
	next := b.batch()
	if len(next.msgs) != 0 || len(next.gpuFrom) != 0 || cap(next.msgs) == 0 {
		t.Fatalf("the next batch starts with %d records (capacity %d), %d origins", len(next.msgs), cap(next.msgs), len(next.gpuFrom))
	}
	if m := next.msgs[:1][0]; m.Value != nil {
		t.Error("the reused array still holds a record's bytes")
	}
}
