package enrich

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/tailcause/tailcause/enrich/normalize"
	"github.com/tailcause/tailcause/internal/kafkax"
)

// runSamples writes every engine and GPU sample of the metric topic to
// ClickHouse once (its own consumer group), with counter deltas and rates,
// and dead-letters undecodable metric records.
func (p *Pipeline) runSamples(ctx context.Context) error {
	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers: p.cfg.Brokers, Dialer: p.cfg.Kafka.Dialer("tailcause-samples", 10*time.Second),
		GroupID: p.cfg.SamplesGroupID, Topic: p.cfg.MetricsTopic,
		MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 250 * time.Millisecond, StartOffset: kafka.FirstOffset,
		CommitInterval: 0, ReadBackoffMin: 50 * time.Millisecond, ReadBackoffMax: time.Second,
		SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second,
	})
	defer reader.Close()
	dlq, err := p.deadLetterProducer()
	if err != nil {
		return err
	}
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
		var gpuFrom, engFrom []origin
		var dlqRecs []kafkax.Record
		bounds := p.bounds()
		for _, m := range msgs {
			p.C.SampleRecords.Add(1)
			from := origin{topic: m.Topic, partition: m.Partition, offset: m.Offset}
			b, err := p.decodeMetrics(m.Value)
			if err != nil {
				rejRows = append(rejRows, p.rejectRow("metrics", "decode", err.Error(), m))
				dlqRecs = append(dlqRecs, p.deadLetter(m, "decode", err.Error()))
				continue
			}
			for _, rj := range b.Rejects {
				rejRows = append(rejRows, p.rejectRow(rj.Signal, rj.Reason, rj.Detail, m))
			}
			var out int
			var why string
			if b.Samples, out, why = bounds.samples(b.Samples); out > 0 {
				p.C.OutOfBounds.Add(int64(out))
				rejRows = append(rejRows, p.rejectRow("metrics", "event_time", why, m))
				dlqRecs = append(dlqRecs, p.deadLetter(m, "event_time", why))
			}
			p.C.UnknownMetrics.Add(int64(b.Ignored["unknown_metric"]))
			for i := range b.Samples {
				s := &b.Samples[i]
				if s.Family == normalize.FamilyGPU {
					gpuRows = append(gpuRows, gpuSampleValues(make([]any, 0, len(gpuSamplesTable.Columns)), s))
					gpuFrom = append(gpuFrom, from)
					continue
				}
				delta, rate := nan(), nan()
				if s.Kind == normalize.Cumulative {
					if d, r, ok := counters.Observe(*s); ok {
						delta, rate = d, r
					}
				}
				engRows = append(engRows, engineSampleValues(make([]any, 0, len(engineSamplesTable.Columns)), s, delta, rate))
				engFrom = append(engFrom, from)
			}
		}
		// Samples first, then the dead letters and rejected_input rows of
		// what was refused on the way (see sink).
		refused, err := p.insertRows(ctx, gpuSamplesTable, gpuRows)
		if err != nil {
			return p.abandon(err)
		}
		p.refuse(&rejRows, &dlqRecs, "metrics", gpuSamplesTable, gpuRows, gpuFrom, refused)
		written := len(gpuRows) - len(refused)
		if refused, err = p.insertRows(ctx, engineSamplesTable, engRows); err != nil {
			return p.abandon(err)
		}
		p.refuse(&rejRows, &dlqRecs, "metrics", engineSamplesTable, engRows, engFrom, refused)
		written += len(engRows) - len(refused)
		if err := p.writeDeadLetters(ctx, dlq, dlqRecs); err != nil {
			return p.abandon(err)
		}
		if err := p.writeRejects(ctx, rejRows); err != nil {
			return p.abandon(err)
		}
		p.C.Samples.Add(int64(written))
		if err := reader.CommitMessages(ctx, msgs...); err != nil && ctx.Err() == nil {
			p.log.Warn("commit metric offsets", "err", fmt.Errorf("commit %d records: %w", len(msgs), err))
		}
	}
}
