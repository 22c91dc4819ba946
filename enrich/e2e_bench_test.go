package enrich

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/otlpfixture"
	"github.com/tailcause/tailcause/internal/otlpkafka"
	"github.com/tailcause/tailcause/internal/testkit"
)

// The end-to-end throughput benchmarks (BenchmarkEndToEnd,
// BenchmarkEndToEndMetrics) share this harness. One run of each:
//
//  1. encodes a synthetic fleet's spans and metrics as the Collector's kafka
//     exporter would (internal/otlpkafka) and produces them to fresh topics
//     on the real broker before the clock starts;
//  2. runs the enricher (both consumer groups, the broadcast readers, the
//     join, the sinks) into a fresh ClickHouse database and samples its
//     counters and the CPU time of this process (the enricher), ClickHouse
//     and Kafka every 10 ms; the rates are taken between the moments 10%
//     and 90% of the rows were written (sustained throughput: the consumer
//     groups' join at the start and the idle flush of the stream's last
//     requests at the end are not throughput);
//  3. inserts exactly the rows the enricher wrote (recorded on their way to
//     ClickHouse) with clickhouse-go alone, row by row (batch.Append of each
//     row's values) in blocks of Config.BatchRows, into a second fresh
//     database: the ceiling, measured in the same run; and then the same
//     blocks the enricher wrote through chstore's columnar insert alone
//     (Store.InsertBlock, the enricher's own insert), into a third: the
//     ceiling of the columnar path (the *-block figures).
//
// Figures per core are rows per CPU-second of the enricher process; the
// *-cores figures are each process's mean CPU use over the window (2 cores
// on the dev machine, shared by the enricher, ClickHouse and Kafka — and
// by whatever else runs there). ratio compares wall-clock rates, which
// that other load moves a lot; ratio-cpu compares rows per CPU-second of
// all the processes involved (enricher + ClickHouse + Kafka, against the
// inserting process + ClickHouse + Kafka), which it hardly moves.

// rowRecorder is the pipeline's RowWriter in the benchmarks: it writes
// through to the store and keeps a copy of the blocks of the tables the
// ceilings insert again (the sink reuses a block's buffers once written:
// the copy is a memmove of its columns, in the measured window).
type rowRecorder struct {
	w      RowWriter
	mu     sync.Mutex
	blocks map[string][]chstore.Block
}

func (r *rowRecorder) InsertBlock(ctx context.Context, t chstore.Table, b chstore.Block) error {
	if err := r.w.InsertBlock(ctx, t, b); err != nil {
		return err
	}
	if t.Name != rejectedTable.Name && b.Len() > 0 {
		c := b.Clone()
		r.mu.Lock()
		r.blocks[t.Name] = append(r.blocks[t.Name], c)
		r.mu.Unlock()
	}
	return nil
}

// e2eWorkload is what one run feeds the enricher.
type e2eWorkload struct {
	load           otlpfixture.Load
	spansPerExport int // spans per OTLP export (one Kafka record per trace regardless)
	spanPartitions int
	metricParts    int
}

// e2eSnapshot is the enricher's progress at one moment.
type e2eSnapshot struct {
	at                time.Time
	requests, samples int64
	cpu               testkit.CPUReading
	metered           bool // cpu was read at this snapshot
}

// e2eWindow is a sustained rate: rows written between the 10% and 90%
// marks, the wall time between them, and each process's CPU time.
type e2eWindow struct {
	rows int64
	wall time.Duration
	cpu  testkit.CPUReading
}

func (w e2eWindow) perSecond() float64 { return float64(w.rows) / w.wall.Seconds() }

// perCore is rows per CPU-second of the enricher (this process).
func (w e2eWindow) perCore() float64 { return float64(w.rows) / w.cpu["self"].Seconds() }

func (w e2eWindow) cores(proc string) float64 { return w.cpu[proc].Seconds() / w.wall.Seconds() }

// perCPU is rows per CPU-second of every metered process (the enricher,
// ClickHouse, Kafka): the rate the machine would reach with nothing else
// on it, whatever else was running.
func (w e2eWindow) perCPU() float64 { return float64(w.rows) / cpuTotal(w.cpu).Seconds() }

func cpuTotal(r testkit.CPUReading) time.Duration {
	var d time.Duration
	for _, v := range r {
		d += v
	}
	return d
}

// window finds the sustained rate of the counter picked by n between the
// first snapshots at which it reached 10% and 90% of want.
// Only a snapshot whose CPU was read can bound it (crossed picks those).
func window(snaps []e2eSnapshot, want int64, n func(e2eSnapshot) int64) (e2eWindow, bool) {
	from, to := windowMarks(want)
	lo, hi := -1, -1
	for i, s := range snaps {
		if lo < 0 && n(s) >= from {
			lo = i
		}
		if n(s) >= to {
			hi = i
			break
		}
	}
	if lo < 0 || hi <= lo || !snaps[lo].metered || !snaps[hi].metered {
		return e2eWindow{}, false
	}
	a, z := snaps[lo], snaps[hi]
	return e2eWindow{rows: n(z) - n(a), wall: z.at.Sub(a.at), cpu: z.cpu.Since(a.cpu)}, true
}

// windowMarks are the counts that bound a measured window: 10% and 90% of
// want.
func windowMarks(want int64) (from, to int64) { return want / 10, want * 9 / 10 }

// crossed reports whether a snapshot at these counts is the first at or
// past one of window's marks (10% and 90% of want, for the requests and
// for the samples) and records the marks it passed.
func crossed(marks *[4]bool, req, wantReq, smp, wantSmp int64) bool {
	rLo, rHi := windowMarks(wantReq)
	sLo, sHi := windowMarks(wantSmp)
	at := [4]bool{req >= rLo, req >= rHi, smp >= sLo, smp >= sHi}
	first := false
	for i, ok := range at {
		if ok && !marks[i] {
			marks[i], first = true, true
		}
	}
	return first
}

// e2eResult is one run: the enricher's sustained rates, the total time,
// and the ceiling's.
type e2eResult struct {
	requests, samples e2eWindow
	haveReq, haveSmp  bool
	total             time.Duration
	// rawWall is the plain insert's time for each table's rows, rawCPU
	// each process's CPU time during it; rows counts them. blockWall and
	// blockCPU are the same for the columnar insert alone.
	rawWall, blockWall map[string]time.Duration
	rawCPU, blockCPU   map[string]testkit.CPUReading
	rows               map[string]int
	// shared is the share of the metric records' reads (samples group
	// and broadcast readers) that took the other reader's decode.
	shared float64
}

// rawRate is the ceiling's rows per second over the given tables (wall:
// rawWall or blockWall).
func (r e2eResult) rawRate(wall map[string]time.Duration, tables ...chstore.Table) float64 {
	var n int
	var d time.Duration
	for _, t := range tables {
		n, d = n+r.rows[t.Name], d+wall[t.Name]
	}
	return float64(n) / d.Seconds()
}

// rawPerCPU is the ceiling's rows per CPU-second of every metered process
// (this one inserting, ClickHouse, Kafka) over the given tables (cpu:
// rawCPU or blockCPU).
func (r e2eResult) rawPerCPU(cpu map[string]testkit.CPUReading, tables ...chstore.Table) float64 {
	var n int
	var d time.Duration
	for _, t := range tables {
		n, d = n+r.rows[t.Name], d+cpuTotal(cpu[t.Name])
	}
	return float64(n) / d.Seconds()
}

// rawCores is process proc's mean CPU use during the ceiling's insert of
// the given tables.
func (r e2eResult) rawCores(proc string, tables ...chstore.Table) float64 {
	var cpu, d time.Duration
	for _, t := range tables {
		cpu, d = cpu+r.rawCPU[t.Name][proc], d+r.rawWall[t.Name]
	}
	return cpu.Seconds() / d.Seconds()
}

// runEndToEnd is one run of the harness (see above).
func runEndToEnd(b testing.TB, w e2eWorkload) e2eResult {
	b.Helper()
	kafkaAddr := testkit.Kafka(b)
	chAddr := testkit.ClickHouse(b)
	requests := int64(w.load.Requests)
	points := int64(w.load.MetricPoints())
	enc, err := otlpkafka.NewEncoder(otlpkafka.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	var spanRecs, metricRecs []kafkax.Record
	for _, md := range w.load.Metrics() {
		if metricRecs, _, err = enc.AppendMetrics(metricRecs, nil, md); err != nil {
			b.Fatal(err)
		}
	}
	for _, td := range w.load.Traces(w.spansPerExport) {
		if spanRecs, _, err = enc.AppendTraces(spanRecs, nil, td); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	open := func() *chstore.Store {
		cfg := chstore.DefaultConfig()
		// No TTL: the fault lab's rows are dated early 2026.
		cfg.Addr, cfg.Database, cfg.TTL = chAddr, testkit.FreshDatabase(b, chAddr), 0
		st, err := chstore.Open(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		if _, err := st.Migrate(ctx, nil); err != nil {
			b.Fatal(err)
		}
		return st
	}
	st := open()
	spans := testkit.FreshTopic(b, kafkaAddr, w.spanPartitions)
	metrics := testkit.FreshTopic(b, kafkaAddr, w.metricParts)
	dlq := testkit.FreshTopic(b, kafkaAddr, 1)
	pc := kafkax.DefaultConfig()
	pc.Brokers = []string{kafkaAddr}
	prod, err := kafkax.NewProducer(pc)
	if err != nil {
		b.Fatal(err)
	}
	if err := prod.WriteRecords(ctx, metrics, metricRecs); err != nil {
		b.Fatal(err)
	}
	if err := prod.WriteRecords(ctx, spans, spanRecs); err != nil {
		b.Fatal(err)
	}
	prod.Close()
	spanRecs, metricRecs = nil, nil

	ecfg := DefaultConfig()
	ecfg.Brokers = []string{kafkaAddr}
	ecfg.SpansTopic, ecfg.MetricsTopic, ecfg.DeadLetterTopic = spans, metrics, dlq
	ecfg.GroupID, ecfg.SamplesGroupID = "g-"+spans, "s-"+spans
	ecfg.IdleFlush = time.Second
	rec := &rowRecorder{w: st, blocks: map[string][]chstore.Block{}}
	p, err := New(ecfg, rec, nil)
	if err != nil {
		b.Fatal(err)
	}
	meter := testkit.NewCPUMeter(map[string]string{"clickhouse": chAddr, "kafka": kafkaAddr})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- p.Run(rctx) }()
	var snaps []e2eSnapshot
	// TAILCAUSE_BENCH_CPUPROFILE: a CPU profile of this process from 10% to
	// 90% of the rows (the measured window), for pprof.
	profile, profiling := os.Getenv("TAILCAUSE_BENCH_CPUPROFILE"), false
	var profOut *os.File
	// The CPU meter reads /proc in this process: it is read only at the
	// snapshots that can bound a window (the first at or past each 10% and
	// 90% mark, which window picks), not at every one, so that its cost is
	// not the enricher's (read every 10 ms it was 2-5% of the window's CPU;
	// the ceilings' windows read it twice each).
	var marks [4]bool
	for {
		s := e2eSnapshot{at: time.Now(), requests: p.C.Requests.Load(), samples: p.C.Samples.Load()}
		if crossed(&marks, s.requests, requests, s.samples, points) {
			s.cpu, s.metered = meter.Read(), true
		}
		snaps = append(snaps, s)
		if s.requests >= requests && s.samples >= points {
			break
		}
		if done := s.requests+s.samples >= (requests+points)*9/10; profile != "" && (profiling && done || !profiling && profOut == nil && s.requests+s.samples >= (requests+points)/10) {
			if profiling {
				pprof.StopCPUProfile()
				profOut.Close()
				profiling = false
			} else if profOut, err = os.Create(profile); err == nil && pprof.StartCPUProfile(profOut) == nil {
				profiling = true
			}
		}
		if time.Since(start) > 10*time.Minute {
			cancel()
			b.Fatalf("after 10 minutes: %d of %d requests, %d of %d samples", s.requests, requests, s.samples, points)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if profiling {
		pprof.StopCPUProfile()
		profOut.Close()
	}
	res := e2eResult{total: time.Since(start)}
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	if reads := p.C.MetricRecords.Load() + p.C.SampleRecords.Load(); reads > 0 {
		res.shared = float64(p.C.SharedDecodes.Load()) / float64(reads)
	}
	res.requests, res.haveReq = window(snaps, requests, func(s e2eSnapshot) int64 { return s.requests })
	res.samples, res.haveSmp = window(snaps, points, func(s e2eSnapshot) int64 { return s.samples })

	// The ceiling: the same rows, clickhouse-go alone, into a second
	// database. The enricher's is dropped first, so that its merges do not
	// run on the ceiling's time.
	if err := st.Conn().Exec(ctx, "DROP DATABASE "+st.Database()); err != nil {
		b.Fatal(err)
	}
	raw := open()
	res.rawWall, res.rawCPU, res.rows = map[string]time.Duration{}, map[string]testkit.CPUReading{}, map[string]int{}
	tables := []chstore.Table{stallsTable, requestsTable, gpuSamplesTable, engineSamplesTable}
	count := func(st *chstore.Store, t chstore.Table, what string) {
		var n uint64
		if err := st.Conn().QueryRow(ctx, "SELECT count() FROM "+t.Name).Scan(&n); err != nil || n != uint64(res.rows[t.Name]) {
			b.Fatalf("%s: %d rows in %s after inserting %d (err %v)", what, n, t.Name, res.rows[t.Name], err)
		}
	}
	for _, t := range tables {
		var rows [][]any
		for _, blk := range rec.blocks[t.Name] {
			rows = append(rows, blk.Rows()...)
		}
		res.rows[t.Name] = len(rows)
		if len(rows) == 0 {
			continue
		}
		c0, t0 := meter.Read(), time.Now()
		for len(rows) > 0 {
			n := min(len(rows), ecfg.BatchRows)
			if err := rawInsert(ctx, raw, t, rows[:n]); err != nil {
				b.Fatal(err)
			}
			rows = rows[n:]
		}
		res.rawWall[t.Name] = time.Since(t0)
		res.rawCPU[t.Name] = meter.Read().Since(c0)
		count(raw, t, "ceiling")
	}
	// The columnar ceiling: the enricher's blocks, as it wrote them.
	if err := raw.Conn().Exec(ctx, "DROP DATABASE "+raw.Database()); err != nil {
		b.Fatal(err)
	}
	col := open()
	res.blockWall, res.blockCPU = map[string]time.Duration{}, map[string]testkit.CPUReading{}
	for _, t := range tables {
		if res.rows[t.Name] == 0 {
			continue
		}
		c0, t0 := meter.Read(), time.Now()
		for _, blk := range rec.blocks[t.Name] {
			if err := col.InsertBlock(ctx, t, blk); err != nil {
				b.Fatal(err)
			}
		}
		res.blockWall[t.Name] = time.Since(t0)
		res.blockCPU[t.Name] = meter.Read().Since(c0)
		count(col, t, "columnar ceiling")
	}
	return res
}

// reportMedians reports each unit's median over the iterations' figures
// (b.ReportMetric keeps only the last value of a unit).
func reportMedians(b *testing.B, runs []map[string]float64) {
	b.Helper()
	if len(runs) == 0 {
		return
	}
	for unit := range runs[0] {
		v := make([]float64, 0, len(runs))
		for _, r := range runs {
			v = append(v, r[unit])
		}
		sort.Float64s(v)
		m := v[len(v)/2]
		if len(v)%2 == 0 {
			m = (v[len(v)/2-1] + m) / 2
		}
		b.ReportMetric(m, unit)
	}
	if len(runs) > 1 {
		for i, r := range runs {
			b.Logf("iteration %d: %.0f/s, ratio %.3f, ratio-cpu %.3f", i+1, r["spans/s"]+r["points/s"], r["ratio"], r["ratio-cpu"])
		}
	}
}

// rawInsert is one block through clickhouse-go: prepare, append, send.
func rawInsert(ctx context.Context, st *chstore.Store, t chstore.Table, rows [][]any) error {
	batch, err := st.Conn().PrepareBatch(ctx, t.InsertSQL())
	if err != nil {
		return fmt.Errorf("prepare insert into %s: %w", t.Name, err)
	}
	for _, r := range rows {
		if err := batch.Append(r...); err != nil {
			_ = batch.Abort()
			return fmt.Errorf("append to %s: %w", t.Name, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("send %d rows to %s: %w", len(rows), t.Name, err)
	}
	return nil
}

// TestEndToEndHarness checks the benchmarks' harness on a small fleet
// (no timing): every request and sample reaches ClickHouse, the recorder
// kept each row once, and the ceiling inserted them all again.
func TestEndToEndHarness(t *testing.T) {
	w := e2eWorkload{
		load:           otlpfixture.Load{Hosts: 4, Duration: time.Minute, Requests: 2000, Seed: 5},
		spansPerExport: 100, spanPartitions: 2, metricParts: 2,
	}
	r := runEndToEnd(t, w)
	if got := r.rows[requestsTable.Name]; got != w.load.Requests {
		t.Errorf("recorded %d request rows, want %d", got, w.load.Requests)
	}
	if got, want := r.rows[gpuSamplesTable.Name]+r.rows[engineSamplesTable.Name], w.load.MetricPoints(); got != want {
		t.Errorf("recorded %d sample rows, want %d (one per point)", got, want)
	}
}
