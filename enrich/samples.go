package enrich

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/tailcause/tailcause/enrich/normalize"
)

// runSamples writes every engine and GPU sample of the metric topic to
// ClickHouse once (its own consumer group), with counter deltas and rates,
// and dead-letters undecodable metric records.
func (p *Pipeline) runSamples(ctx context.Context) error {
	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers: p.cfg.Brokers, GroupID: p.cfg.SamplesGroupID, Topic: p.cfg.MetricsTopic,
		MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 250 * time.Millisecond, StartOffset: kafka.FirstOffset,
		CommitInterval: 0, ReadBackoffMin: 50 * time.Millisecond, ReadBackoffMax: time.Second,
		SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second,
	})
	defer reader.Close()
	dlq := p.dlqWriter()
	defer dlq.Close()
	counters := normalize.NewCounters(p.cfg.Join.MaxCounterSeries)
	const maxMsgs = 500
	for {
		var msgs []kafka.Message
		bctx, cancel := context.WithTimeout(ctx, p.cfg.BatchWait)
		for len(msgs) < maxMsgs {
			m, err := reader.FetchMessage(bctx)
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
					p.log.Warn("fetch metric record", "err", err)
					sleepCtx(ctx, time.Second)
				}
				break
			}
			msgs = append(msgs, m)
		}
		cancel()
		if ctx.Err() != nil {
			return nil // uncommitted records are read again by the next run
		}
		if len(msgs) == 0 {
			continue
		}
		var gpuRows, engRows, rejRows [][]any
		var dlqMsgs []kafka.Message
		for _, m := range msgs {
			p.C.SampleRecords.Add(1)
			b, err := p.decodeMetrics(m.Value)
			if err != nil {
				rejRows = append(rejRows, p.rejectRow("metrics", "decode", err.Error(), m))
				dlqMsgs = append(dlqMsgs, p.dlqMessage(m, "decode", err.Error()))
				continue
			}
			for _, rj := range b.Rejects {
				rejRows = append(rejRows, p.rejectRow(rj.Signal, rj.Reason, rj.Detail, m))
			}
			p.C.UnknownMetrics.Add(int64(b.Ignored["unknown_metric"]))
			for i := range b.Samples {
				s := &b.Samples[i]
				if s.Family == normalize.FamilyGPU {
					gpuRows = append(gpuRows, gpuSampleValues(make([]any, 0, len(gpuSamplesTable.Columns)), s))
					continue
				}
				delta, rate := nan(), nan()
				if s.Kind == normalize.Cumulative {
					if d, r, ok := counters.Observe(*s); ok {
						delta, rate = d, r
					}
				}
				engRows = append(engRows, engineSampleValues(make([]any, 0, len(engineSamplesTable.Columns)), s, delta, rate))
			}
		}
		if len(dlqMsgs) > 0 {
			if err := p.retry(ctx, "write dead letters", func(c context.Context) error { return dlq.WriteMessages(c, dlqMsgs...) }); err != nil {
				return p.abandon(err)
			}
			p.C.DeadLettered.Add(int64(len(dlqMsgs)))
		}
		if err := p.retry(ctx, "insert into rejected_input", func(c context.Context) error { return p.store.Insert(c, rejectedTable, rejRows) }); err != nil {
			return p.abandon(err)
		}
		if err := p.retry(ctx, "insert into gpu_samples", func(c context.Context) error { return p.store.Insert(c, gpuSamplesTable, gpuRows) }); err != nil {
			return p.abandon(err)
		}
		if err := p.retry(ctx, "insert into engine_samples", func(c context.Context) error { return p.store.Insert(c, engineSamplesTable, engRows) }); err != nil {
			return p.abandon(err)
		}
		p.C.Samples.Add(int64(len(gpuRows) + len(engRows)))
		if err := reader.CommitMessages(ctx, msgs...); err != nil && ctx.Err() == nil {
			p.log.Warn("commit metric offsets", "err", fmt.Errorf("commit %d records: %w", len(msgs), err))
		}
	}
}
