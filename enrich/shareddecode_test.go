package enrich

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/tailcause/tailcause/enrich/normalize"
	"github.com/tailcause/tailcause/internal/otlpfixture"
)

func fixtureMetricRecords(t *testing.T) []kafka.Message {
	t.Helper()
	var msgs []kafka.Message
	var m pmetric.ProtoMarshaler
	for i, md := range otlpfixture.Metrics() {
		pb, err := m.MarshalMetrics(md)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Partition: i % 2, Offset: int64(i), Value: pb})
	}
	msgs = append(msgs, kafka.Message{Partition: 0, Offset: 99, Value: []byte{0x0a, 0x7f}}) // malformed
	return msgs
}

// TestMetricDecodesShared: what one reader decoded, the other takes once,
// equal to its own decode (errors included); a record with other bytes at
// the same partition and offset is decoded afresh.
func TestMetricDecodesShared(t *testing.T) {
	var hits atomic.Int64
	d := newMetricDecodes(maxSharedSamples, func() { hits.Add(1) })
	var first, second normalize.MetricsDecoder
	msgs := fixtureMetricRecords(t)
	for _, m := range msgs {
		want, wantErr := (&normalize.MetricsDecoder{}).Record(m.Value, normalize.EncodingProto)
		a, aErr := d.decode(&first, m, normalize.EncodingProto, joinReader)
		b, bErr := d.decode(&second, m, normalize.EncodingProto, samplesReader)
		for _, got := range []struct {
			b   normalize.Batch
			err error
		}{{a, aErr}, {b, bErr}} {
			if (got.err == nil) != (wantErr == nil) || got.err != nil && got.err.Error() != wantErr.Error() {
				t.Fatalf("offset %d: error %v, want %v", m.Offset, got.err, wantErr)
			}
			if diff := cmp.Diff(want, got.b, cmpopts.EquateNaNs()); diff != "" {
				t.Fatalf("offset %d (-own decode +shared):\n%s", m.Offset, diff)
			}
		}
	}
	if got := hits.Load(); got != int64(len(msgs)) {
		t.Errorf("%d decodes shared, want %d (one per record)", got, len(msgs))
	}
	if len(d.m) != 0 || d.samples != 0 {
		t.Errorf("%d entries holding %d samples left after both took every record", len(d.m), d.samples)
	}

	// Same key, other bytes (a re-created topic): not taken.
	d = newMetricDecodes(maxSharedSamples, func() { hits.Add(1) })
	m := msgs[0]
	if _, err := d.decode(&first, m, normalize.EncodingProto, joinReader); err != nil {
		t.Fatal(err)
	}
	if len(d.m) != 1 {
		t.Fatalf("%d entries held after one decode, want 1", len(d.m))
	}
	other := msgs[1]
	other.Partition, other.Offset = m.Partition, m.Offset
	want, _ := (&normalize.MetricsDecoder{}).Record(other.Value, normalize.EncodingProto)
	got, err := d.decode(&second, other, normalize.EncodingProto, samplesReader)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateNaNs()); diff != "" {
		t.Fatalf("other bytes at the same offset (-own decode +got):\n%s", diff)
	}
}

// TestMetricDecodesBound: entries no reader takes are evicted, oldest
// first, at the bound; readers decoding at once stay correct (run with
// -race).
func TestMetricDecodesBound(t *testing.T) {
	msgs := fixtureMetricRecords(t)
	var dec normalize.MetricsDecoder
	b0, err := dec.Record(msgs[0].Value, normalize.EncodingProto)
	if err != nil || len(b0.Samples) == 0 {
		t.Fatalf("fixture record: %d samples, err %v", len(b0.Samples), err)
	}
	bound := 3 * len(b0.Samples)
	d := newMetricDecodes(bound, func() {})
	most := 0
	for i := range 200 {
		m := msgs[i%(len(msgs)-1)]
		m.Offset = int64(1000 + i)
		if _, err := d.decode(&dec, m, normalize.EncodingProto, joinReader); err != nil {
			t.Fatal(err)
		}
		if d.samples > bound {
			t.Fatalf("after %d records: %d entries hold %d samples, bound %d", i+1, len(d.m), d.samples, bound)
		}
		most = max(most, len(d.m))
		if len(d.order) > 2*len(d.m)+64+1 {
			t.Fatalf("eviction order holds %d keys for %d entries", len(d.order), len(d.m))
		}
	}
	if most < 2 {
		t.Fatalf("at most %d entries held: the bound test tests nothing", most)
	}
	var wg sync.WaitGroup
	for _, r := range []metricReader{samplesReader, joinReader} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dec normalize.MetricsDecoder
			for _, m := range msgs {
				want, wantErr := (&normalize.MetricsDecoder{}).Record(m.Value, normalize.EncodingProto)
				got, err := d.decode(&dec, m, normalize.EncodingProto, r)
				if (err == nil) != (wantErr == nil) {
					t.Errorf("offset %d: error %v, want %v", m.Offset, err, wantErr)
					return
				}
				if diff := cmp.Diff(want, got, cmpopts.EquateNaNs()); diff != "" {
					t.Errorf("offset %d (-own decode +shared):\n%s", m.Offset, diff)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestMetricDecodesPace: a broadcast reader holding its budget of decodes
// the samples group has not taken waits while the group reads the
// partition close behind it, goes on once the group has taken enough, and
// does not wait when the join could miss what it holds back, for a group
// far behind, for one that stopped reading, nor for longer than paceFresh
// at once. A decode the other reader has read past is not kept, and the
// counts of what the broadcast reader holds return to zero as its entries
// are taken or evicted.
func TestMetricDecodesPace(t *testing.T) {
	msgs := fixtureMetricRecords(t)
	var dec, other normalize.MetricsDecoder
	b0, err := dec.Record(msgs[0].Value, normalize.EncodingProto)
	if err != nil || len(b0.Samples) == 0 {
		t.Fatalf("fixture record: %d samples, err %v", len(b0.Samples), err)
	}
	n := len(b0.Samples)
	d := newMetricDecodes(maxSharedSamples, func() {})
	d.paceFresh = time.Hour
	ctx := context.Background()
	budget := 2 * n
	rec := func(off int64) kafka.Message { m := msgs[0]; m.Partition, m.Offset = 0, off; return m }
	read := func(off int64, r metricReader) {
		t.Helper()
		dd := &dec
		if r == samplesReader {
			dd = &other
		}
		if _, err := d.decode(dd, rec(off), normalize.EncodingProto, r); err != nil {
			t.Fatal(err)
		}
	}
	idle := true
	paced := func(off int64) bool {
		// pace returns at once unless it waits; a waiting pace is
		// cancelled after a while.
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		d.pace(cctx, 0, off, budget, func() bool { return idle })
		return time.Since(start) >= 40*time.Millisecond
	}
	// The broadcast reader decodes records 10 to 12 before the group
	// read anything: no wait.
	for off := int64(10); off < 13; off++ {
		if paced(off) {
			t.Fatalf("record %d: paced before the group read the partition", off)
		}
		read(off, joinReader)
	}
	if got := d.parts[0].ahead; got != 3*n {
		t.Fatalf("the broadcast reader holds %d samples for the group, want %d", got, 3*n)
	}
	// The group reads record 9 (not held) and takes 10: the broadcast
	// reader, 2n ahead of a group close behind, waits.
	read(9, samplesReader)
	read(10, samplesReader)
	if d.parts[0].ahead != 2*n || len(d.m) != 2 {
		t.Fatalf("after the group's reads: %d samples held for it in %d entries, want %d in 2", d.parts[0].ahead, len(d.m), 2*n)
	}
	if !paced(13) {
		t.Fatal("the broadcast reader, its budget held for a group close behind, did not wait")
	}
	// Unless the join could miss what it holds back.
	idle = false
	if paced(13) {
		t.Fatal("the broadcast reader waited while the join could miss its records")
	}
	idle = true
	// Nor for a group far behind.
	if paced(11 + paceWindow + 1) {
		t.Fatal("the broadcast reader waited for a group far behind")
	}
	// Nor for longer than paceFresh at once.
	d.paceFresh = 10 * time.Millisecond
	d.parts[0].groupAt = time.Now().Add(time.Hour)
	if paced(13) {
		t.Fatal("the broadcast reader waited longer than paceFresh")
	}
	// Nor for a group that stopped reading.
	d.parts[0].groupAt = time.Now().Add(-time.Second)
	if paced(13) {
		t.Fatal("the broadcast reader waited for a group that stopped reading")
	}
	d.paceFresh = time.Hour
	// The group takes record 11: under the budget, the reader goes on.
	read(11, samplesReader)
	if paced(13) {
		t.Fatal("the broadcast reader waited under its budget")
	}
	// A waiting pace ends with its context.
	read(13, joinReader)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if d.pace(cctx, 0, 14, budget, func() bool { return true }) {
		t.Fatal("pace returned true after its context ended")
	}
	// A record the other reader has read past is not kept: the group
	// re-reads record 5 after the broadcast reader passed it.
	read(5, samplesReader)
	if _, ok := d.m[metricKey{0, 5}]; ok {
		t.Fatal("kept a decode the broadcast reader had read past")
	}
	// The group's entries are not the broadcast reader's budget, and
	// eviction gives back what it drops.
	read(20, samplesReader)
	if got := d.parts[0].ahead; got != 2*n {
		t.Fatalf("the broadcast reader holds %d samples for the group, want %d", got, 2*n)
	}
	d.max = 0 // the next entry evicts everything
	read(21, samplesReader)
	if len(d.m) != 0 || d.samples != 0 || d.parts[0].ahead != 0 || d.parts[0].aheadRecs != 0 {
		t.Fatalf("after eviction: %d entries, %d samples, broadcast reader holds %d samples in %d records",
			len(d.m), d.samples, d.parts[0].ahead, d.parts[0].aheadRecs)
	}
}
