package enrich

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/tailcause/tailcause/enrich/join"
	"github.com/tailcause/tailcause/enrich/normalize"
	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/kafkax"
)

// RowWriter writes rows durably; chstore.Store is the real one (its
// InsertBlock).
type RowWriter interface {
	// InsertBlock writes the block's rows. The block is the caller's again
	// when it returns (its buffers are reused).
	InsertBlock(ctx context.Context, t chstore.Table, b chstore.Block) error
}

// Counters are the enricher's cumulative counts (exposed as metrics).
type Counters struct {
	SpanRecords, MetricRecords, SampleRecords atomic.Int64
	Requests, Stalls, Samples                 atomic.Int64
	Rejected, DeadLettered                    atomic.Int64
	// InsertRetries counts retried writes (ClickHouse or the dead-letter
	// topic); InsertFailures the rows ClickHouse refused for good (each sent
	// to rejected_input and the dead-letter topic).
	InsertRetries, InsertFailures atomic.Int64
	// DeadLetterDropped counts dead letters the dead-letter topic refused
	// GiveUpAfter times, RejectedDropped the rejected_input rows the table
	// refused: each skipped, so nothing stalls.
	DeadLetterDropped, RejectedDropped atomic.Int64
	Commits                            atomic.Int64
	UnknownMetrics, IgnoredSpans       atomic.Int64
	// OutOfBounds counts the requests, steps and samples dropped for an
	// event time outside [now − MaxEventAge, now + MaxEventSkew] (their
	// records are rejected and dead-lettered).
	OutOfBounds atomic.Int64
	// SharedDecodes counts metric records one reader took decoded from
	// the other (samples group, broadcast readers: metricDecodes).
	SharedDecodes atomic.Int64
}

// Pipeline is the enricher.
type Pipeline struct {
	cfg    Config
	store  RowWriter
	log    *slog.Logger
	now    func() time.Time
	C      Counters
	joinMu sync.Mutex // guards joinStats snapshot
	jstats join.Stats
	// decodes hands metric records decoded by one reader of the metric
	// topic to the other.
	decodes *metricDecodes
}

// New builds a pipeline.
func New(cfg Config, store RowWriter, log *slog.Logger) (*Pipeline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDerived()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pipeline{cfg: cfg, store: store, log: log, now: time.Now}
	p.decodes = newMetricDecodes(maxSharedSamples, func() { p.C.SharedDecodes.Add(1) })
	// A broadcast reader held longer could set off the idle flush.
	p.decodes.paceFresh = min(paceFresh, cfg.IdleFlush/4)
	return p, nil
}

// JoinStats is the latest snapshot of the join's counters.
func (p *Pipeline) JoinStats() join.Stats {
	p.joinMu.Lock()
	defer p.joinMu.Unlock()
	return p.jstats
}

type spanRec struct {
	msg   kafka.Message
	batch normalize.Batch
	err   error
	// outOfBounds spans were dropped from batch for their event time.
	outOfBounds int
	boundsWhy   string
}

type sinkItem struct {
	outs    []join.Output
	rejects [][]any
	dlq     []kafkax.Record
	done    []join.Ref
}

// Run consumes until ctx is cancelled. On return everything written has
// been committed; what was pending is re-read by the next run.
func (p *Pipeline) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	wg.Add(2)
	go func() { defer wg.Done(); errc <- p.runSpans(ctx) }()
	go func() { defer wg.Done(); errc <- p.runSamples(ctx) }()
	var first error
	go func() { wg.Wait(); close(errc) }()
	for err := range errc {
		if err != nil && first == nil {
			first = err
			cancel()
		}
	}
	return first
}

// runSpans is the join path: span consumer group, broadcast metric readers,
// the join, the ClickHouse sink and the committer.
func (p *Pipeline) runSpans(ctx context.Context) error {
	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers:          p.cfg.Brokers,
		Dialer:           p.cfg.Kafka.Dialer("tailcause-enrich", 10*time.Second),
		GroupID:          p.cfg.GroupID,
		Topic:            p.cfg.SpansTopic,
		MinBytes:         1,
		MaxBytes:         16 << 20,
		MaxWait:          250 * time.Millisecond,
		StartOffset:      kafka.FirstOffset,
		CommitInterval:   0, // synchronous commits of what the tracker allows
		ReadBackoffMin:   50 * time.Millisecond,
		ReadBackoffMax:   time.Second,
		SessionTimeout:   10 * time.Second,
		RebalanceTimeout: 10 * time.Second,
		ErrorLogger:      kafka.LoggerFunc(func(f string, a ...any) { p.log.Debug("kafka reader: " + fmt.Sprintf(f, a...)) }),
	})
	defer reader.Close()
	dlq, err := p.deadLetterProducer()
	if err != nil {
		return err
	}
	defer dlq.Close()

	spanIn := make(chan spanRec, 64)
	metricIn := make(chan metricRec, 64)
	var spanTime atomic.Uint64 // the join's span time, for the metric readers' pause
	sinkIn := make(chan sinkItem, 16)
	tracker := &lockedTracker{t: newOffsetTracker()}

	var wg sync.WaitGroup
	fetchCtx, stopFetch := context.WithCancel(ctx)
	defer stopFetch()
	startMetrics := make(chan time.Time, 1)

	wg.Add(1)
	go func() { // span fetcher: decode in parallel with the join
		defer wg.Done()
		var dec normalize.TracesDecoder
		for {
			m, err := reader.FetchMessage(fetchCtx)
			if err != nil {
				if fetchCtx.Err() != nil {
					return
				}
				p.log.Warn("fetch span record", "err", err)
				sleepCtx(fetchCtx, time.Second)
				continue
			}
			p.C.SpanRecords.Add(1)
			rec := spanRec{msg: m}
			rec.batch, rec.err = dec.Record(m.Value, normalize.Encoding(p.cfg.Encoding))
			if rec.err == nil {
				rec.outOfBounds, rec.boundsWhy = p.bounds().spans(&rec.batch)
			}
			select {
			case spanIn <- rec:
			case <-fetchCtx.Done():
				return
			}
			select {
			case startMetrics <- m.Time:
			default:
			}
		}
	}()
	wg.Add(1)
	go func() { // broadcast metric readers, started at the first span's time
		defer wg.Done()
		var t0 time.Time
		select {
		case t0 = <-startMetrics:
		case <-fetchCtx.Done():
			return
		}
		p.broadcastMetrics(fetchCtx, t0.Add(-p.cfg.MetricsLookback), &spanTime, metricIn)
	}()

	sinkDone := make(chan error, 1)
	go func() { sinkDone <- p.sink(ctx, sinkIn, dlq, tracker, reader) }()

	joinErr := p.joinLoop(ctx, spanIn, metricIn, &spanTime, sinkIn, tracker)
	stopFetch()
	close(sinkIn)
	wg.Wait()
	serr := <-sinkDone
	if joinErr != nil {
		return joinErr
	}
	return serr
}

// joinLoop owns the joiner.
func (p *Pipeline) joinLoop(ctx context.Context, spanIn <-chan spanRec, metricIn <-chan metricRec, spanTime *atomic.Uint64, sinkIn chan<- sinkItem, tracker *lockedTracker) error {
	j, err := join.New(p.cfg.Join)
	if err != nil {
		return err
	}
	defer j.Close()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	lastInput := p.now()
	var marks partitionMarks
	j.SetMetricHold(marks.hold()) // nothing is complete before the readers report
	var pendingItem sinkItem
	send := func() bool {
		if len(pendingItem.outs) == 0 && len(pendingItem.done) == 0 && len(pendingItem.rejects) == 0 {
			return true
		}
		select {
		case sinkIn <- pendingItem:
			pendingItem = sinkItem{}
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		spanC := spanIn
		if j.Pending() >= p.cfg.Join.MaxPending {
			spanC = nil // backpressure: the join must drain first
		}
		select {
		case <-ctx.Done():
			return nil
		case rec := <-spanC:
			ref := join.Ref{Partition: rec.msg.Partition, Offset: rec.msg.Offset}
			tracker.fetched(ref)
			lastInput = p.now()
			if rec.err != nil {
				pendingItem.rejects = append(pendingItem.rejects, p.rejectRow("traces", "decode", rec.err.Error(), rec.msg))
				pendingItem.dlq = append(pendingItem.dlq, p.deadLetter(rec.msg, "decode", rec.err.Error()))
				pendingItem.done = append(pendingItem.done, ref)
				continue
			}
			for _, rj := range rec.batch.Rejects {
				pendingItem.rejects = append(pendingItem.rejects, p.rejectRow(rj.Signal, rj.Reason, rj.Detail, rec.msg))
			}
			if rec.outOfBounds > 0 {
				// The rest of the record is joined; the record goes to the
				// dead-letter topic whole, for a replay with other bounds.
				p.C.OutOfBounds.Add(int64(rec.outOfBounds))
				pendingItem.rejects = append(pendingItem.rejects, p.rejectRow("traces", "event_time", rec.boundsWhy, rec.msg))
				pendingItem.dlq = append(pendingItem.dlq, p.deadLetter(rec.msg, "event_time", rec.boundsWhy))
			}
			p.C.IgnoredSpans.Add(int64(sumIgnored(rec.batch.Ignored)))
			j.AddSpans(&rec.batch, ref)
			spanTime.Store(j.SpanTime())
		case m := <-metricIn:
			if len(m.samples) > 0 {
				// A record without samples (a scrape's own up/duration
				// series) is progress, not input: the idle flush still fires.
				lastInput = p.now()
			}
			j.AddSamples(m.samples)
			marks.update(m)
			j.SetMetricHold(marks.hold())
		case <-tick.C:
			idle := p.now().Sub(lastInput) >= p.cfg.IdleFlush
			if outs := j.Emit(idle); len(pendingItem.outs) == 0 {
				pendingItem.outs = outs // Emit's slice is the caller's: no copy
			} else {
				pendingItem.outs = append(pendingItem.outs, outs...)
			}
			pendingItem.done = append(pendingItem.done, j.Released()...)
			p.joinMu.Lock()
			p.jstats = j.Stats()
			p.joinMu.Unlock()
			if !send() {
				return nil
			}
		}
	}
}

func sumIgnored(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func (p *Pipeline) rejectRow(signal, reason, detail string, m kafka.Message) []any {
	p.C.Rejected.Add(1)
	prefix := m.Value
	if len(prefix) > 256 {
		prefix = prefix[:256]
	}
	if len(detail) > 1024 {
		detail = detail[:1024]
	}
	return []any{p.now().UTC().Truncate(time.Second), signal, reason, detail, m.Topic, int32(m.Partition), m.Offset, uint64(len(m.Value)), hex.EncodeToString(prefix)}
}

// sink batches joined rows into ClickHouse and commits what is complete.
// A flush writes the stalls, then the requests (a reader that sees a request
// finds its stalls), then the dead letters and rejected_input rows of the
// records and rows refused on the way, and only then marks the records
// complete.
func (p *Pipeline) sink(ctx context.Context, in <-chan sinkItem, dlq *kafkax.Producer, tracker *lockedTracker, reader *kafka.Reader) error {
	var rejRows [][]any
	var reqFrom, stallFrom []origin
	var dlqRecs []kafkax.Record
	var done []join.Ref
	var oldest time.Time
	// The encoders' buffers are reused from one flush to the next.
	reqEnc, stallEnc := newBlockEncoder(requestCols), newBlockEncoder(stallCols)
	var in1 requestIn
	now := p.now()
	flush := func(fctx context.Context) error {
		if reqEnc.len()+stallEnc.len()+len(rejRows)+len(dlqRecs)+len(done) == 0 {
			return nil
		}
		stalls, reqs := stallEnc.block(), reqEnc.block()
		refused, err := p.insertRows(fctx, stallsTable, stalls)
		if err != nil {
			return err
		}
		p.refuse(&rejRows, &dlqRecs, "traces", stallsTable, stalls, stallFrom, refused)
		p.C.Stalls.Add(int64(stalls.Len() - len(refused)))
		if refused, err = p.insertRows(fctx, requestsTable, reqs); err != nil {
			return err
		}
		p.refuse(&rejRows, &dlqRecs, "traces", requestsTable, reqs, reqFrom, refused)
		p.C.Requests.Add(int64(reqs.Len() - len(refused)))
		if err := p.writeDeadLetters(fctx, dlq, dlqRecs); err != nil {
			return err
		}
		if err := p.writeRejects(fctx, rejRows); err != nil {
			return err
		}
		tracker.complete(done...)
		reqEnc.reset()
		stallEnc.reset()
		rejRows, reqFrom, stallFrom, dlqRecs, done = nil, reqFrom[:0], stallFrom[:0], nil, nil
		oldest = time.Time{}
		return nil
	}
	commit := func(cctx context.Context) {
		for part, off := range tracker.committable() {
			err := reader.CommitMessages(cctx, kafka.Message{Topic: p.cfg.SpansTopic, Partition: part, Offset: off})
			if err != nil {
				// A rebalance took the partition: its records are re-read
				// elsewhere (at least once; rows are idempotent by uid).
				p.log.Warn("commit span offsets", "partition", part, "offset", off, "err", err)
				continue
			}
			p.C.Commits.Add(1)
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastCommit := now
	final := func() error {
		fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := flush(fctx)
		commit(fctx)
		return err
	}
	for {
		select {
		case it, ok := <-in:
			if !ok {
				return final()
			}
			now := p.now()
			in1.enrichedAt = now.UTC().Truncate(time.Second)
			for i := range it.outs {
				o := &it.outs[i]
				from := origin{topic: p.cfg.SpansTopic, partition: int(o.Row.KafkaPartition), offset: o.Row.KafkaOffset}
				in1.Row = &o.Row
				reqEnc.add(&in1)
				reqFrom = append(reqFrom, from)
				for k := range o.Stalls {
					stallEnc.add(&o.Stalls[k])
					stallFrom = append(stallFrom, from)
				}
				done = append(done, o.Done...)
			}
			in1.Row = nil
			rejRows = append(rejRows, it.rejects...)
			dlqRecs = append(dlqRecs, it.dlq...)
			done = append(done, it.done...)
			if oldest.IsZero() {
				oldest = now
			}
			if reqEnc.len() >= p.cfg.BatchRows || len(dlqRecs) > 0 {
				if err := flush(ctx); err != nil {
					return p.abandon(err)
				}
			}
		case <-tick.C:
			now := p.now()
			if !oldest.IsZero() && now.Sub(oldest) >= p.cfg.BatchWait {
				if err := flush(ctx); err != nil {
					return p.abandon(err)
				}
			}
			if now.Sub(lastCommit) >= p.cfg.CommitInterval {
				commit(ctx)
				lastCommit = now
			}
		}
	}
}

// abandon turns a cancelled flush into a clean stop: what was not written
// is not committed and is read again by the next run.
func (p *Pipeline) abandon(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

type lockedTracker struct {
	mu sync.Mutex
	t  *offsetTracker
}

func (l *lockedTracker) fetched(r join.Ref) {
	l.mu.Lock()
	l.t.fetched(r.Partition, r.Offset)
	l.mu.Unlock()
}

func (l *lockedTracker) complete(refs ...join.Ref) {
	l.mu.Lock()
	for _, r := range refs {
		l.t.complete(r.Partition, r.Offset)
	}
	l.mu.Unlock()
}

func (l *lockedTracker) committable() map[int]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.t.committable()
}

func nan() float64 { return math.NaN() }
