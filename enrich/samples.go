package enrich

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/tailcause/tailcause/enrich/normalize"
	"github.com/tailcause/tailcause/internal/chstore"
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
	// Two stages, so that decoding the next batch overlaps writing this
	// one: the fetcher decodes records into rows (counter deltas in record
	// order), the writer inserts them and commits, batch after batch in
	// order. One batch waits between them: memory stays bounded.
	// The written batches' encoders go back to the fetcher (free), so that
	// their column buffers are reused: one batch is filled, one waits, one
	// is written.
	batches := make(chan sampleBatch, 1)
	free := make(chan *sampleBlocks, 3)
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	fetched := make(chan struct{})
	go func() {
		defer close(fetched)
		defer close(batches)
		p.fetchSamples(fctx, reader, batches, free)
	}()
	defer func() { stop(); <-fetched }()
	for sb := range batches {
		if err := p.writeSamples(ctx, dlq, sb); err != nil {
			return p.abandon(err)
		}
		// The reader commits each partition's highest offset of those it
		// is given: the batch's highest of each partition is enough.
		commits, n := lastPerPartition(sb.msgs), len(sb.msgs)
		sb.blocks.reset(&sb)
		select {
		case free <- sb.blocks:
		default:
		}
		if err := reader.CommitMessages(ctx, commits...); err != nil && ctx.Err() == nil {
			p.log.Warn("commit metric offsets", "err", fmt.Errorf("commit %d records: %w", n, err))
		}
	}
	return nil // uncommitted records are read again by the next run
}

// sampleBatch is what the samples fetcher hands the writer: the records
// and the rows decoded from them.
type sampleBatch struct {
	msgs             []kafka.Message
	blocks           *sampleBlocks
	rejRows          [][]any
	gpuFrom, engFrom []origin
	dlqRecs          []kafkax.Record
}

// maxSampleMsgs bounds the records of one batch. A batch also ends when
// each of its tables has Config.BatchRows rows, when one has
// maxBatchBlocks times that (a fleet without GPUs, or without engines), or
// after Config.BatchWait. Each table is written in blocks of at most
// Config.BatchRows rows: ending a batch when the first table was full left
// the other's block a fraction of that (a scrape mix of ~3 engine points
// per GPU point: ~1,500-row gpu_samples blocks), and each small block
// costs an insert's fixed price, in the enricher and in ClickHouse.
const (
	maxSampleMsgs  = 5000
	maxBatchBlocks = 4
)

// full reports whether sb is a whole batch.
func (p *Pipeline) full(sb *sampleBatch) bool {
	g, e, n := sb.blocks.gpu.len(), sb.blocks.eng.len(), p.cfg.BatchRows
	return len(sb.msgs) >= maxSampleMsgs || g >= n && e >= n || g >= maxBatchBlocks*n || e >= maxBatchBlocks*n
}

// fetchSamples reads batches of metric records and turns them into rows,
// until ctx ends.
func (p *Pipeline) fetchSamples(ctx context.Context, reader *kafka.Reader, out chan<- sampleBatch, free <-chan *sampleBlocks) {
	st := &sampleState{
		// Not ReuseSamples: a record's Batch may go to the broadcast
		// readers (metricDecodes).
		counters: normalize.NewCounters(p.cfg.Join.MaxCounterSeries),
	}
	var blocks *sampleBlocks
	for {
		if blocks == nil {
			select {
			case blocks = <-free:
			default:
				blocks = newSampleBlocks()
			}
		}
		sb := blocks.batch()
		bctx, cancel := context.WithTimeout(ctx, p.cfg.BatchWait)
		bounds := p.bounds()
		for !p.full(&sb) {
			m, err := reader.FetchMessage(bctx)
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
					p.log.Warn("fetch metric record", "err", err)
					sleepCtx(ctx, time.Second)
				}
				break
			}
			sb.msgs = append(sb.msgs, m)
			p.sampleRows(&sb, m, bounds, st)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if len(sb.msgs) == 0 {
			continue
		}
		blocks = nil // the writer's until it hands it back
		select {
		case out <- sb:
		case <-ctx.Done():
			return
		}
	}
}

// sampleState is what the samples fetcher keeps from one record to the
// next.
type sampleState struct {
	dec      normalize.MetricsDecoder
	counters *normalize.Counters
	eng      engineIn
}

// sampleBlocks are a batch's gpu_samples and engine_samples rows, and the
// arrays of its records and of its rows' origins (reused from batch to
// batch with the blocks: appending to new ones was a tenth of the
// samples group's garbage).
type sampleBlocks struct {
	gpu              *blockEncoder[normalize.Sample]
	eng              *blockEncoder[engineIn]
	msgs             []kafka.Message
	gpuFrom, engFrom []origin
}

func newSampleBlocks() *sampleBlocks {
	return &sampleBlocks{gpu: newBlockEncoder(gpuSampleCols), eng: newBlockEncoder(engineSampleCols)}
}

// batch is an empty batch filling b.
func (b *sampleBlocks) batch() sampleBatch {
	return sampleBatch{blocks: b, msgs: b.msgs[:0], gpuFrom: b.gpuFrom[:0], engFrom: b.engFrom[:0]}
}

// reset empties b, keeping the arrays sb (filled from b) grew, cleared so
// that they hold no record's bytes.
func (b *sampleBlocks) reset(sb *sampleBatch) {
	b.gpu.reset()
	b.eng.reset()
	clear(sb.msgs)
	clear(sb.gpuFrom)
	clear(sb.engFrom)
	b.msgs, b.gpuFrom, b.engFrom = sb.msgs[:0], sb.gpuFrom[:0], sb.engFrom[:0]
}

// lastPerPartition is the message of each partition of msgs with the
// highest offset.
func lastPerPartition(msgs []kafka.Message) []kafka.Message {
	var last []kafka.Message
	for _, m := range msgs {
		i := slices.IndexFunc(last, func(l kafka.Message) bool { return l.Topic == m.Topic && l.Partition == m.Partition })
		switch {
		case i < 0:
			last = append(last, m)
		case m.Offset > last[i].Offset:
			last[i] = m
		}
	}
	return last
}

// sampleRows decodes one metric record into sb's rows.
func (p *Pipeline) sampleRows(sb *sampleBatch, m kafka.Message, bounds eventBounds, st *sampleState) {
	p.C.SampleRecords.Add(1)
	from := origin{topic: m.Topic, partition: m.Partition, offset: m.Offset}
	b, err := p.decodes.decode(&st.dec, m, normalize.Encoding(p.cfg.Encoding), samplesReader)
	if err != nil {
		sb.rejRows = append(sb.rejRows, p.rejectRow("metrics", "decode", err.Error(), m))
		sb.dlqRecs = append(sb.dlqRecs, p.deadLetter(m, "decode", err.Error()))
		return
	}
	for _, rj := range b.Rejects {
		sb.rejRows = append(sb.rejRows, p.rejectRow(rj.Signal, rj.Reason, rj.Detail, m))
	}
	var out int
	var why string
	if b.Samples, out, why = bounds.samples(b.Samples); out > 0 {
		p.C.OutOfBounds.Add(int64(out))
		sb.rejRows = append(sb.rejRows, p.rejectRow("metrics", "event_time", why, m))
		sb.dlqRecs = append(sb.dlqRecs, p.deadLetter(m, "event_time", why))
	}
	p.C.UnknownMetrics.Add(int64(b.Ignored["unknown_metric"]))
	for i := range b.Samples {
		s := &b.Samples[i]
		if s.Family == normalize.FamilyGPU {
			sb.blocks.gpu.add(s)
			sb.gpuFrom = append(sb.gpuFrom, from)
			continue
		}
		delta, rate := nan(), nan()
		if s.Kind == normalize.Cumulative {
			if d, r, ok := st.counters.Observe(*s); ok {
				delta, rate = d, r
			}
		}
		st.eng = engineIn{Sample: s, delta: delta, rate: rate}
		sb.blocks.eng.add(&st.eng)
		sb.engFrom = append(sb.engFrom, from)
	}
}

// writeSamples writes a batch's samples, then the dead letters and
// rejected_input rows of what was refused on the way (see sink). The only
// error is ctx's end. The two tables are written concurrently, each in
// blocks of at most Config.BatchRows rows.
func (p *Pipeline) writeSamples(ctx context.Context, dlq *kafkax.Producer, sb sampleBatch) error {
	gpuRows, engRows := sb.blocks.gpu.block(), sb.blocks.eng.block()
	var gpuRefused []refusal
	var gpuErr error
	gpuDone := make(chan struct{})
	go func() {
		defer close(gpuDone)
		gpuRefused, gpuErr = p.insertBlocks(ctx, gpuSamplesTable, gpuRows)
	}()
	engRefused, engErr := p.insertBlocks(ctx, engineSamplesTable, engRows)
	<-gpuDone
	if err := cmp.Or(gpuErr, engErr); err != nil {
		return err
	}
	p.refuse(&sb.rejRows, &sb.dlqRecs, "metrics", gpuSamplesTable, gpuRows, sb.gpuFrom, gpuRefused)
	p.refuse(&sb.rejRows, &sb.dlqRecs, "metrics", engineSamplesTable, engRows, sb.engFrom, engRefused)
	written := gpuRows.Len() - len(gpuRefused) + engRows.Len() - len(engRefused)
	if err := p.writeDeadLetters(ctx, dlq, sb.dlqRecs); err != nil {
		return err
	}
	if err := p.writeRejects(ctx, sb.rejRows); err != nil {
		return err
	}
	p.C.Samples.Add(int64(written))
	return nil
}

// insertBlocks is insertRows in blocks of at most Config.BatchRows rows,
// in order; the refusals index rows.
func (p *Pipeline) insertBlocks(ctx context.Context, t chstore.Table, rows chstore.Block) ([]refusal, error) {
	var all []refusal
	for base := 0; base < rows.Len(); base += p.cfg.BatchRows {
		refused, err := p.insertRows(ctx, t, rows.Slice(base, min(base+p.cfg.BatchRows, rows.Len())))
		if err != nil {
			return nil, err
		}
		for _, r := range refused {
			r.index += base
			all = append(all, r)
		}
	}
	return all, nil
}
