package enrich

import (
	"bytes"
	"sync"

	"github.com/segmentio/kafka-go"

	"github.com/tailcause/tailcause/enrich/normalize"
)

// metricDecodes hands a metric record's decode from whichever of the two
// readers of the metric topic in this process — the samples group and
// the broadcast readers — decodes it first to the other, so that a record
// read by both is decoded once (decoding was ~19% of the points path's CPU,
// done twice). It couples the two only through immutable data: the other
// reader takes the entry only for a record of the same partition and
// offset whose bytes are equal (a re-created topic reuses offsets), and the
// Batch is read-only to both (eventBounds.samples copies what it filters).
// A reader that finds nothing decodes the record itself, so neither waits
// for the other, and what each sees is what its own decode would give.
//
// Entries are taken once; what the other reader never takes (a partition
// another instance's samples group owns, a reader far behind) is evicted
// oldest first once the entries hold maxSharedSamples samples.
type metricDecodes struct {
	mu      sync.Mutex
	m       map[metricKey]*metricDecode
	order   []metricKey // insertion order, for eviction
	samples int         // held by the entries
	max     int
	hits    func() // counts a decode taken from the other reader
}

type metricKey struct {
	partition int
	offset    int64
}

type metricDecode struct {
	value []byte
	batch normalize.Batch
	err   error
}

// maxSharedSamples bounds the samples held for the other reader (~10 MB).
const maxSharedSamples = 1 << 16

func newMetricDecodes(max int, hit func()) *metricDecodes {
	return &metricDecodes{m: make(map[metricKey]*metricDecode), max: max, hits: hit}
}

// decode is dec.Record(m.Value, enc), or the other reader's decode of the
// same record. dec must not reuse its Samples (ReuseSamples false): the
// Batch may go to the other reader.
func (d *metricDecodes) decode(dec *normalize.MetricsDecoder, m kafka.Message, enc normalize.Encoding) (normalize.Batch, error) {
	key := metricKey{m.Partition, m.Offset}
	d.mu.Lock()
	if e, ok := d.m[key]; ok {
		delete(d.m, key)
		d.samples -= len(e.batch.Samples)
		d.mu.Unlock()
		if bytes.Equal(e.value, m.Value) {
			d.hits()
			return e.batch, e.err
		}
	} else {
		d.mu.Unlock()
	}
	b, err := dec.Record(m.Value, enc)
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.m[key]; ok {
		// Both decoded it at once: neither will ask again.
		delete(d.m, key)
		d.samples -= len(e.batch.Samples)
		return b, err
	}
	d.m[key] = &metricDecode{value: m.Value, batch: b, err: err}
	d.order = append(d.order, key)
	d.samples += len(b.Samples)
	for d.samples > d.max || len(d.order) > 2*len(d.m)+64 {
		k := d.order[0]
		d.order = d.order[1:]
		if e, ok := d.m[k]; ok {
			delete(d.m, k)
			d.samples -= len(e.batch.Samples)
		}
	}
	return b, err
}
