package enrich

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/tailcause/tailcause/enrich/normalize"
	"github.com/tailcause/tailcause/internal/kafkax"
)

// metricRec is what the broadcast metric readers hand the join: the samples
// of one record of one partition, and that partition's progress. The first
// rec (partitions set) announces the partitions to expect.
type metricRec struct {
	partitions []int // the announcement: every partition of the topic
	partition  int
	samples    []normalize.Sample
	time       uint64 // the partition has delivered samples up to here
	behind     bool   // its log holds records past this one
}

// partitionMarks is the join's view of the metric partitions' progress.
type partitionMarks struct {
	parts map[int]*partitionMark // nil before the announcement
}

type partitionMark struct {
	time   uint64
	behind bool
}

func (pm *partitionMarks) update(m metricRec) {
	if m.partitions != nil {
		pm.parts = make(map[int]*partitionMark, len(m.partitions))
		for _, id := range m.partitions {
			pm.parts[id] = &partitionMark{behind: true} // nothing read yet
		}
		return
	}
	mk := pm.parts[m.partition]
	if mk == nil {
		return // a partition added after the announcement: not tracked
	}
	mk.behind = m.behind
	mk.time = max(mk.time, m.time)
	for i := range m.samples {
		mk.time = max(mk.time, m.samples[i].TimeNs)
	}
}

// hold is the time up to which every partition that still holds unread
// records has delivered (math.MaxUint64 when none does; 0 before the
// announcement). See join.Joiner.SetMetricHold.
func (pm *partitionMarks) hold() uint64 {
	if pm.parts == nil {
		return 0
	}
	h := uint64(math.MaxUint64)
	for _, mk := range pm.parts {
		if mk.behind {
			h = min(h, mk.time)
		}
	}
	return h
}

// broadcastMetrics reads every partition of the metric topic (no group:
// every enricher instance sees every sample) from time `from`. Each
// partition reports its progress with its samples (metricRec), so the join
// waits for a partition that still holds records rather than joining a
// request with another partition's metrics alone; and each pauses on its
// own when its samples run MetricsAhead past the span stream (spanTime),
// which bounds the join's state on replays without one partition's pause
// holding back another.
func (p *Pipeline) broadcastMetrics(ctx context.Context, from time.Time, spanTime *atomic.Uint64, out chan<- metricRec) {
	var parts []kafka.Partition
	for {
		var err error
		parts, err = lookupPartitions(ctx, p.cfg.Brokers, p.cfg.Kafka, p.cfg.MetricsTopic)
		if err == nil && len(parts) > 0 {
			break
		}
		if ctx.Err() != nil {
			return
		}
		p.log.Warn("look up metric partitions", "topic", p.cfg.MetricsTopic, "err", err)
		sleepCtx(ctx, time.Second)
	}
	ids := make([]int, len(parts))
	for i, part := range parts {
		ids[i] = part.ID
	}
	select {
	case out <- metricRec{partitions: ids}:
	case <-ctx.Done():
		return
	}
	budget := p.decodes.paceBudget(len(ids))
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.readMetricPartition(ctx, id, from, budget, spanTime, out)
		}()
	}
	wg.Wait()
}

func lookupPartitions(ctx context.Context, brokers []string, sec kafkax.Security, topic string) ([]kafka.Partition, error) {
	var last error
	for _, b := range brokers {
		parts, err := sec.Dialer("tailcause-enrich", 5*time.Second).LookupPartitions(ctx, "tcp", b, topic)
		if err == nil {
			return parts, nil
		}
		last = err
	}
	return nil, fmt.Errorf("look up partitions of %s: %w", topic, last)
}

// readMetricPartition reads one partition from time `from`, handing the
// join every record's samples with the partition's progress: first whether
// it holds anything to read at all, then with each record whether the log
// holds more (its high watermark). It keeps at most paceBudget samples
// decoded ahead of this process's samples group (metricDecodes.pace).
func (p *Pipeline) readMetricPartition(ctx context.Context, part int, from time.Time, paceBudget int, spanTime *atomic.Uint64, out chan<- metricRec) {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: p.cfg.Brokers, Dialer: p.cfg.Kafka.Dialer("tailcause-enrich-broadcast", 10*time.Second),
		Topic: p.cfg.MetricsTopic, Partition: part,
		MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 250 * time.Millisecond,
		ReadBackoffMin: 50 * time.Millisecond, ReadBackoffMax: time.Second,
	})
	defer r.Close()
	send := func(m metricRec) bool {
		select {
		case out <- m:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		err := r.SetOffsetAt(ctx, from)
		var lag int64
		if err == nil {
			lag, err = r.ReadLag(ctx)
		}
		if err == nil {
			if lag == 0 && !send(metricRec{partition: part}) { // nothing to read: not behind
				return
			}
			break
		}
		if ctx.Err() != nil {
			return
		}
		p.log.Warn("seek metric partition", "partition", part, "err", err)
		sleepCtx(ctx, time.Second)
	}
	ahead := uint64(p.cfg.MetricsAhead)
	var dec normalize.MetricsDecoder
	// The join cannot miss what pace holds back while this partition has
	// delivered up to the span time (no request it holds waits for it), or
	// while the span time stands still (no request is forced by MaxWait,
	// which only the span time passing a request's end does). The span
	// time is looked at with every record and while held: spanSince is
	// at or after its last move.
	var delivered, lastSpan uint64
	spanSince := time.Now()
	spans := func() uint64 {
		st := spanTime.Load()
		if st != lastSpan {
			lastSpan, spanSince = st, time.Now()
		}
		return st
	}
	idle := func() bool {
		return delivered >= spans() || time.Since(spanSince) >= spansStill
	}
	for {
		spans()
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.log.Warn("fetch metric record", "partition", part, "err", err)
			sleepCtx(ctx, time.Second)
			continue
		}
		if !p.decodes.pace(ctx, part, m.Offset, paceBudget, idle) {
			return
		}
		p.C.MetricRecords.Add(1)
		rec := metricRec{partition: part, behind: m.HighWaterMark > m.Offset+1}
		if b, err := p.decodes.decode(&dec, m, normalize.Encoding(p.cfg.Encoding), joinReader); err == nil {
			// Rejects, out-of-bounds samples included, are recorded once,
			// by the samples group; here such a sample must neither move
			// the join's clock nor pause this reader.
			rec.samples, _, _ = p.bounds().samples(b.Samples)
		}
		first, last, ok := sampleSpan(rec.samples)
		if ok {
			delivered = max(delivered, last)
		}
		if ok && last > spanTime.Load()+ahead {
			// Too far ahead of the spans: say the partition is complete up
			// to this record's start, and wait for the spans to catch up.
			if !send(metricRec{partition: part, time: first, behind: true}) {
				return
			}
			for last > spanTime.Load()+ahead {
				if sleepCtx(ctx, 50*time.Millisecond); ctx.Err() != nil {
					return
				}
			}
		}
		if !send(rec) {
			return
		}
	}
}

// spansStill is how long the span time must have stood still for a
// broadcast reader to be held behind it (readMetricPartition): no span
// record moved it for that long, so none is being read.
const spansStill = 100 * time.Millisecond

// sampleSpan is the earliest and latest sample time.
func sampleSpan(s []normalize.Sample) (first, last uint64, ok bool) {
	for i := range s {
		if !ok || s[i].TimeNs < first {
			first = s[i].TimeNs
		}
		last = max(last, s[i].TimeNs)
		ok = true
	}
	return first, last, ok
}
