package causal

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/internal/testkit"
	"github.com/tailcause/tailcause/schemas"
)

// benchData inserts n synthetic requests over two hours into a fresh
// database (a KV fault on one engine and a thermal throttle on one GPU in
// the second hour) and returns an analyzer over it and the request for the
// second hour (the first is the baseline).
//
// With TAILCAUSE_BENCH_KEEP=prefix the data goes into database
// <prefix>_<n> instead, which is kept, and a later run that finds it
// filled reads it as it is: two binaries (before and after a change)
// measured on the same parts, without inserting 10M rows twice. Drop the
// databases by hand.
func benchData(b testing.TB, n int) (*Analyzer, Request) {
	b.Helper()
	ctx := context.Background()
	st, have := benchStore(b, n)
	// The engines export their step histogram (StepTokens), as vLLM's do:
	// the prefill_step candidate is fitted and judged, not skipped.
	s := synthScenario{Seed: 42, Start: synthStart, Duration: 2 * time.Hour, RatePerS: float64(n) / 7200, FaultFrom: time.Hour, StepTokens: true,
		Faults: []synthFault{{Kind: "kv", Host: 1, GPU: 1}, {Kind: "thermal", Host: 2, GPU: 0}}}
	if have == 0 {
		t0 := time.Now()
		got, err := insertSynth(ctx, st.Conn(), s, 100_000)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("inserted %d requests in %v (%.0f rows/s, batches of 100k)", got, time.Since(t0).Round(time.Millisecond), float64(got)/time.Since(t0).Seconds())
	} else {
		b.Logf("reading the %d requests kept in %s", have, st.Database())
	}
	a, err := NewAnalyzer(&loggedDB{DB: StoreDB(st), st: st}, DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	return a, Request{SLO: SLO{Scope: llama}, Window: window(time.Hour, 2*time.Hour)}
}

// benchStore is a fresh database, or with TAILCAUSE_BENCH_KEEP the kept
// one for n requests, with the rows it already holds.
func benchStore(b testing.TB, n int) (*chstore.Store, uint64) {
	b.Helper()
	prefix := os.Getenv("TAILCAUSE_BENCH_KEEP")
	if prefix == "" {
		return chstoretest.Fresh(b), 0
	}
	ctx := context.Background()
	cfg := chstore.DefaultConfig()
	cfg.Addr, cfg.Database, cfg.TTL = testkit.ClickHouse(b), fmt.Sprintf("%s_%d", prefix, n), 0
	st, err := chstore.Open(ctx, cfg)
	if err != nil {
		b.Fatalf("open store: %v", err)
	}
	b.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx, nil); err != nil {
		b.Fatalf("migrate %s: %v", cfg.Database, err)
	}
	var have uint64
	if err := st.Conn().QueryRow(ctx, "SELECT count() FROM requests").Scan(&have); err != nil {
		b.Fatal(err)
	}
	if have != 0 && have != uint64(n) {
		b.Fatalf("%s holds %d requests, not %d: drop it", cfg.Database, have, n)
	}
	return st, have
}

// loggedDB runs every query with log_queries and its own query id, so the
// server's memory and rows read per query can be read back from
// system.query_log. Its sessions (the snapshots) are logged the same way.
type loggedDB struct {
	DB
	st     *chstore.Store
	prefix string
	n      int
}

func (l *loggedDB) next(ctx context.Context) context.Context {
	l.n++
	return clickhouse.Context(ctx, clickhouse.WithQueryID(fmt.Sprintf("%s-%d", l.prefix, l.n)),
		clickhouse.WithSettings(clickhouse.Settings{"log_queries": 1}))
}

func (l *loggedDB) Query(ctx context.Context, q string) (Rows, error) {
	return l.DB.Query(l.next(ctx), q)
}

func (l *loggedDB) Session(ctx context.Context) (Session, error) {
	s, err := l.DB.(Sessioner).Session(ctx)
	if err != nil {
		return nil, err
	}
	return loggedSession{s, l}, nil
}

type loggedSession struct {
	Session
	l *loggedDB
}

func (s loggedSession) Query(ctx context.Context, q string) (Rows, error) {
	return s.Session.Query(s.l.next(ctx), q)
}

func (s loggedSession) Exec(ctx context.Context, stmt string) error {
	return s.Session.Exec(s.l.next(ctx), stmt)
}

// serverCost is what the server logged for the queries run since prefix
// was set: the peak memory of one query, the rows read, the number of
// queries, the CPU time they used (user + system) and the time they
// waited for a CPU (high on a busy machine, where wall time says little).
type serverCost struct {
	peakBytes, readRows, queries uint64
	cpu, cpuWait                 float64 // seconds
}

func (l *loggedDB) serverCost(ctx context.Context) (c serverCost, err error) {
	if err := l.st.Conn().Exec(ctx, "SYSTEM FLUSH LOGS"); err != nil {
		return c, err
	}
	err = l.st.Conn().QueryRow(ctx, `SELECT toUInt64(max(memory_usage)), toUInt64(sum(read_rows)), count(),
	toFloat64(sum(ProfileEvents['UserTimeMicroseconds'] + ProfileEvents['SystemTimeMicroseconds'])) / 1e6,
	toFloat64(sum(ProfileEvents['OSCPUWaitMicroseconds'])) / 1e6
FROM system.query_log WHERE type = 2 AND startsWith(query_id, ?)`,
		l.prefix+"-").Scan(&c.peakBytes, &c.readRows, &c.queries, &c.cpu, &c.cpuWait)
	return c, err
}

// plainScan times one plain scan of the analysis's window and baseline
// rows: count() and the P99 of e2e_ms from the table with FINAL. It is the
// yardstick the analysis's time is reported against (x-plain-scan; the
// fastest of three runs, and the server CPU of the scans: x-plain-scan-cpu).
func plainScan(b *testing.B, a *Analyzer, req Request) time.Duration {
	b.Helper()
	base := Interval{Start: req.Window.Start.Add(-time.Hour), End: req.Window.Start}
	q := fmt.Sprintf("SELECT toFloat64(count()), toFloat64(quantile(0.99)(e2e_ms)) FROM %s FINAL WHERE %s AND %s AND (%s OR %s)",
		a.cfg.Table, scopeWhere(req.SLO.Scope), prune(base, req.Window), inInterval(base), inInterval(req.Window))
	best := time.Duration(0)
	for range 3 { // the fastest of three: the scan's own cost, not the noise of a shared machine
		t0 := time.Now()
		v, err := queryFloats(context.Background(), a.db, "plain scan", q, 2)
		if err != nil {
			b.Fatal(err)
		}
		if d := time.Since(t0); best == 0 || d < best {
			best = d
		}
		if v[0] == 0 {
			b.Fatal("the plain scan found no rows")
		}
	}
	return best
}

func runBench(b *testing.B, a *Analyzer, req Request) {
	b.Helper()
	// The tests compare the frame's shared aggregates with their queries;
	// a benchmark measures the analysis alone.
	defer func(c bool) { checkSharedSQL = c }(checkSharedSQL)
	checkSharedSQL = false
	ldb, _ := a.db.(*loggedDB)
	if ldb != nil {
		ldb.prefix, ldb.n = fmt.Sprintf("scan-%d", time.Now().UnixNano()), 0
	}
	scan := plainScan(b, a, req)
	var scanCPU float64 // server CPU seconds of one plain scan
	if ldb != nil {
		c, err := ldb.serverCost(context.Background())
		if err != nil {
			b.Fatalf("read the query log: %v", err)
		}
		scanCPU = c.cpu / float64(c.queries)
		ldb.prefix, ldb.n = fmt.Sprintf("bench-%d", time.Now().UnixNano()), 0
	}
	b.ReportAllocs()
	var an *Analysis
	var err error
	// TAILCAUSE_BENCH_CPUPROFILE=file profiles the analyses alone (not
	// the data's insertion, as -cpuprofile would).
	if path := os.Getenv("TAILCAUSE_BENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(fmt.Sprintf("%s.%s", path, strings.NewReplacer("/", "_", "=", "").Replace(b.Name())))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	cpu0 := processCPU()
	b.ResetTimer()
	for b.Loop() {
		if an, err = a.Analyze(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if os.Getenv("TAILCAUSE_BENCH_CPUPROFILE") != "" {
		pprof.StopCPUProfile()
	}
	b.ReportMetric((processCPU()-cpu0).Seconds()/float64(b.N), "go-cpu-s/op")
	b.ReportMetric(an.Fits.Go.Seconds(), "go-fits-s")
	b.ReportMetric(float64(an.Fits.FrameBytes)/(1<<20), "go-frame-MiB")
	b.ReportMetric(float64(an.Fits.FrameRows), "go-frame-rows")
	b.ReportMetric(float64(max(an.Fits.SampleEvery, 1)), "sample-every")
	estimated := 0
	for _, c := range an.Candidates {
		if c.Skipped == "" && !c.Split {
			estimated++
		}
	}
	perOp := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(an.Queries), "queries/op")
	b.ReportMetric(float64(estimated), "causes/op")
	b.ReportMetric(float64(an.Incident.Requests), "window-requests")
	b.ReportMetric(float64(an.Reads.SnapshotRows), "snapshot-rows")
	b.ReportMetric(scan.Seconds(), "plain-scan-s")
	b.ReportMetric(float64(perOp)/float64(scan), "x-plain-scan")
	if ldb != nil {
		c, err := ldb.serverCost(context.Background())
		if err != nil {
			b.Fatalf("read the query log: %v", err)
		}
		b.ReportMetric(float64(c.peakBytes)/(1<<20), "server-peak-MiB")
		b.ReportMetric(float64(c.readRows)/float64(b.N), "server-rows-read/op")
		b.ReportMetric(float64(c.queries)/float64(b.N), "server-queries/op")
		b.ReportMetric(c.cpu/float64(b.N), "server-cpu-s/op")
		b.ReportMetric(c.cpuWait/float64(b.N), "server-cpu-wait-s/op")
		if scanCPU > 0 {
			b.ReportMetric(scanCPU, "plain-scan-cpu-s")
			b.ReportMetric(c.cpu/float64(b.N)/scanCPU, "x-plain-scan-cpu")
		}
	}
	if an.Reads.Direct != "" {
		b.Logf("direct reads: %s", an.Reads.Direct)
	}
	for i, c := range an.Incident.Culprits {
		b.Logf("culprit %d: %s %s AF %.4f effect %.1f ms counterfactual %.1f ms", i+1, c.Cause, EntityString(c.Entity), c.AttributableFraction, c.EffectMS, c.CounterfactualP99MS)
	}
	if len(an.Incident.Culprits) > 0 {
		b.Logf("top culprit %s %s AF %.4f; %d queries, %v in ClickHouse, snapshot %d rows in %v; one plain scan %v",
			an.Incident.Culprits[0].Cause, EntityString(an.Incident.Culprits[0].Entity), an.Incident.Culprits[0].AttributableFraction,
			an.Queries, an.QueryTime.Round(time.Millisecond), an.Reads.SnapshotRows, an.Reads.SnapshotTime.Round(time.Millisecond), scan.Round(time.Millisecond))
	}
}

// BenchmarkAnalyze measures one attribution (every candidate cause of the
// default DAG, the degraded checks, health, counterfactuals) over 100k and
// 1M window+baseline requests (10M with TAILCAUSE_BENCH_10M=1), next to
// one plain scan of the same rows measured in the same run
// (x-plain-scan): wall time per analysis, ClickHouse queries, rows read,
// peak memory and CPU (system.query_log), the Go process's CPU and
// allocations. requests=N reads through a snapshot and computes the fits'
// sums in Go (the defaults: above Config.SampleRows pooled rows, from a
// frame that samples the rows below the tail, sample-every); exact,requests=N
// the same with every row in the frame (SampleRows 0); sql,requests=N through a snapshot with the
// fits in SQL (Config.SQLFits: the figures before the Go fits);
// direct,requests=N reads the table with FINAL in every query
// (Config.DirectReads: the read-only user's path, fits in SQL; not at 10M,
// where it takes ten minutes), on the same data: each size is inserted
// once, before its sub-benchmarks (also when a -bench pattern selects only
// one of them). Run with -benchtime=1x.
func BenchmarkAnalyze(b *testing.B) {
	sizes := []int{100_000, 1_000_000}
	if os.Getenv("TAILCAUSE_BENCH_10M") != "" {
		sizes = append(sizes, 10_000_000)
	}
	for _, n := range sizes {
		// One dataset for all: its database lives until the parent ends.
		a, req := benchData(b, n)
		b.Run(fmt.Sprintf("requests=%d", n), func(b *testing.B) { runBench(b, a, req) })
		b.Run(fmt.Sprintf("exact,requests=%d", n), func(b *testing.B) {
			cfg := a.Config()
			cfg.SampleRows = 0
			ae, err := NewAnalyzer(a.db, cfg)
			if err != nil {
				b.Fatal(err)
			}
			runBench(b, ae, req)
		})
		b.Run(fmt.Sprintf("sql,requests=%d", n), func(b *testing.B) {
			cfg := a.Config()
			cfg.SQLFits = true
			as, err := NewAnalyzer(a.db, cfg)
			if err != nil {
				b.Fatal(err)
			}
			runBench(b, as, req)
		})
		if n > 1_000_000 {
			continue
		}
		b.Run(fmt.Sprintf("direct,requests=%d", n), func(b *testing.B) {
			cfg := a.Config()
			cfg.DirectReads = true
			ad, err := NewAnalyzer(a.db, cfg)
			if err != nil {
				b.Fatal(err)
			}
			runBench(b, ad, req)
		})
	}
}

// BenchmarkAnalyzeCauses measures how the cost grows with the number of
// candidate causes, over 1M requests.
func BenchmarkAnalyzeCauses(b *testing.B) {
	a, req := benchData(b, 1_000_000)
	for _, causes := range [][]Cause{
		{schemas.CauseKVPreemption},
		{schemas.CauseKVPreemption, schemas.CauseLongPrompts, schemas.CauseThermalThrottle, schemas.CauseQueueSaturation},
		nil,
	} {
		name := fmt.Sprint(len(causes))
		if causes == nil {
			name = "all"
		}
		b.Run("causes="+name, func(b *testing.B) {
			cfg := a.Config()
			cfg.Causes = causes
			ac, err := NewAnalyzer(a.db, cfg)
			if err != nil {
				b.Fatal(err)
			}
			runBench(b, ac, req)
		})
	}
}

// processCPU is the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
