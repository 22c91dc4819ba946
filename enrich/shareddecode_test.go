package enrich

import (
	"sync"
	"sync/atomic"
	"testing"

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
		a, aErr := d.decode(&first, m, normalize.EncodingProto)
		b, bErr := d.decode(&second, m, normalize.EncodingProto)
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
	m := msgs[0]
	if _, err := d.decode(&first, m, normalize.EncodingProto); err != nil {
		t.Fatal(err)
	}
	other := msgs[1]
	other.Partition, other.Offset = m.Partition, m.Offset
	want, _ := (&normalize.MetricsDecoder{}).Record(other.Value, normalize.EncodingProto)
	got, err := d.decode(&second, other, normalize.EncodingProto)
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
		if _, err := d.decode(&dec, m, normalize.EncodingProto); err != nil {
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
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dec normalize.MetricsDecoder
			for _, m := range msgs {
				want, wantErr := (&normalize.MetricsDecoder{}).Record(m.Value, normalize.EncodingProto)
				got, err := d.decode(&dec, m, normalize.EncodingProto)
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
