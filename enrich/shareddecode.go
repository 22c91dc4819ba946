package enrich

import (
	"bytes"
	"context"
	"sync"
	"time"

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
// A reader that finds nothing decodes the record itself, and what each
// sees is what its own decode would give.
//
// The samples group never waits. A broadcast reader that has run ahead of
// the samples group close behind it waits for it (pace), when the join
// cannot miss what it holds back: left alone, the two drift apart in a
// replay of a backlog — the broadcast readers feed the join, which is
// cheap, the samples group ClickHouse — and the entries were evicted
// before the other reader came (17–49% of the reads shared).
//
// Entries are taken once. A decode the other reader has read past already
// is not kept; what the other never takes (a partition another
// instance's samples group owns, a reader far behind) is evicted oldest
// first once the entries hold maxSharedSamples samples.
type metricDecodes struct {
	mu      sync.Mutex
	m       map[metricKey]*metricDecode
	order   []metricKey // insertion order, for eviction
	samples int         // held by the entries
	max     int
	hits    func() // counts a decode taken from the other reader
	parts   map[int]*sharedPartition
	// paceFresh: a broadcast reader waits only for a samples group that
	// read its partition this recently, and for at most this long at once.
	paceFresh time.Duration
}

// metricReader says which reader of the metric topic decodes.
type metricReader uint8

const (
	samplesReader metricReader = iota // the samples group
	joinReader                        // a broadcast reader (the join's)
)

type metricKey struct {
	partition int
	offset    int64
}

type metricDecode struct {
	value []byte
	batch normalize.Batch
	err   error
	by    metricReader
}

// sharedPartition is where the two readers are in one partition.
type sharedPartition struct {
	// next is the offset after each reader's latest record (0: none; the
	// samples group's moves back when it re-reads after a rebalance).
	next [2]int64
	// groupAt is when the samples group read its latest record.
	groupAt time.Time
	// ahead and aheadRecs are the samples and records of the broadcast
	// reader's entries that the samples group has not taken.
	ahead, aheadRecs int
}

// maxSharedSamples bounds the samples held for the other reader (~10 MB).
const maxSharedSamples = 1 << 16

// paceFresh is metricDecodes.paceFresh's default: about the samples
// group's pause while a batch is written (it fetches one batch ahead).
// New lowers it to a quarter of Config.IdleFlush (5 s; 1 s in the
// benchmarks), which a reader held for longer could set off.
const paceFresh = 250 * time.Millisecond

func newMetricDecodes(max int, hit func()) *metricDecodes {
	return &metricDecodes{m: make(map[metricKey]*metricDecode), max: max, hits: hit, parts: map[int]*sharedPartition{}, paceFresh: paceFresh}
}

// part is partition p's state; d.mu held.
func (d *metricDecodes) part(p int) *sharedPartition {
	sp := d.parts[p]
	if sp == nil {
		sp = &sharedPartition{}
		d.parts[p] = sp
	}
	return sp
}

// drop removes an entry's samples from the counts; d.mu held.
func (d *metricDecodes) drop(k metricKey, e *metricDecode) {
	d.samples -= len(e.batch.Samples)
	if e.by == joinReader {
		sp := d.part(k.partition)
		sp.ahead -= len(e.batch.Samples)
		sp.aheadRecs--
	}
}

// decode is dec.Record(m.Value, enc), or the other reader's decode of the
// same record; r is the reader asking. dec must not reuse its Samples
// (ReuseSamples false): the Batch may go to the other reader.
func (d *metricDecodes) decode(dec *normalize.MetricsDecoder, m kafka.Message, enc normalize.Encoding, r metricReader) (normalize.Batch, error) {
	key := metricKey{m.Partition, m.Offset}
	d.mu.Lock()
	sp := d.part(key.partition)
	sp.next[r] = m.Offset + 1
	if r == samplesReader {
		sp.groupAt = time.Now()
	}
	if e, ok := d.m[key]; ok {
		delete(d.m, key)
		d.drop(key, e)
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
		d.drop(key, e)
		return b, err
	}
	if sp.next[1-r] > m.Offset {
		return b, err // the other has read past it
	}
	d.m[key] = &metricDecode{value: m.Value, batch: b, err: err, by: r}
	d.order = append(d.order, key)
	d.samples += len(b.Samples)
	if r == joinReader {
		sp.ahead += len(b.Samples)
		sp.aheadRecs++
	}
	for d.samples > d.max || len(d.order) > 2*len(d.m)+64 {
		k := d.order[0]
		d.order = d.order[1:]
		if e, ok := d.m[k]; ok {
			delete(d.m, k)
			d.drop(k, e)
		}
	}
	return b, err
}

// paceBudget is the samples a broadcast reader of one of n partitions may
// hold decoded ahead of the samples group: half the bound over the n, so
// that its entries are not evicted before the group takes them.
func (d *metricDecodes) paceBudget(n int) int {
	return max(1, d.max/(2*max(n, 1)))
}

// pace holds a broadcast reader of partition p about to decode the
// record at offset, for at most paceFresh, while
//   - its entries the samples group has not taken hold budget samples or
//     more,
//   - the samples group reads the partition (it read a record within
//     paceFresh) close behind: within twice the records those entries
//     cover, and at least paceWindow records,
//   - and idle says the join would not miss the record (see
//     readMetricPartition).
//
// A samples group that does not read the partition, reads it far behind
// or stalls lets the reader go on at once or within paceFresh. It returns
// false when ctx ends.
func (d *metricDecodes) pace(ctx context.Context, p int, offset int64, budget int, idle func() bool) bool {
	start := time.Now()
	for {
		d.mu.Lock()
		sp := d.part(p)
		window := int64(max(paceWindow, 2*sp.aheadRecs))
		wait := sp.ahead >= budget && sp.next[samplesReader] > 0 && sp.next[samplesReader] >= offset-window &&
			time.Since(sp.groupAt) < d.paceFresh
		d.mu.Unlock()
		if !wait || time.Since(start) >= d.paceFresh || !idle() {
			return true
		}
		if sleepCtx(ctx, 2*time.Millisecond); ctx.Err() != nil {
			return false
		}
	}
}

// paceWindow is the least distance in records behind a broadcast reader
// at which pace waits for the samples group.
const paceWindow = 4096
