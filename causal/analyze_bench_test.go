package causal

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// benchData inserts n synthetic requests over two hours into a fresh
// database (a KV fault on one engine and a thermal throttle on one GPU in
// the second hour) and returns an analyzer over it and the request for the
// second hour (the first is the baseline).
func benchData(b *testing.B, n int) (*Analyzer, Request) {
	b.Helper()
	st := chstoretest.Fresh(b)
	ctx := context.Background()
	s := synthScenario{Seed: 42, Start: synthStart, Duration: 2 * time.Hour, RatePerS: float64(n) / 7200, FaultFrom: time.Hour,
		Faults: []synthFault{{Kind: "kv", Host: 1, GPU: 1}, {Kind: "thermal", Host: 2, GPU: 0}}}
	t0 := time.Now()
	got, err := insertSynth(ctx, st.Conn(), s, 100_000)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("inserted %d requests in %v (%.0f rows/s, batches of 100k)", got, time.Since(t0).Round(time.Millisecond), float64(got)/time.Since(t0).Seconds())
	a, err := NewAnalyzer(&loggedDB{DB: StoreDB(st), st: st}, DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	return a, Request{SLO: SLO{Scope: llama}, Window: window(time.Hour, 2*time.Hour)}
}

// loggedDB runs every query with log_queries and its own query id, so the
// server's memory per query can be read back from system.query_log.
type loggedDB struct {
	DB
	st     *chstore.Store
	prefix string
	n      int
}

func (l *loggedDB) Query(ctx context.Context, q string) (Rows, error) {
	l.n++
	ctx = clickhouse.Context(ctx, clickhouse.WithQueryID(fmt.Sprintf("%s-%d", l.prefix, l.n)),
		clickhouse.WithSettings(clickhouse.Settings{"log_queries": 1}))
	return l.DB.Query(ctx, q)
}

// serverCost is the peak memory of one query and the rows read, over the
// queries run since prefix was set.
func (l *loggedDB) serverCost(ctx context.Context) (peakBytes, readRows uint64, err error) {
	if err := l.st.Conn().Exec(ctx, "SYSTEM FLUSH LOGS"); err != nil {
		return 0, 0, err
	}
	err = l.st.Conn().QueryRow(ctx, "SELECT toUInt64(max(memory_usage)), toUInt64(sum(read_rows)) FROM system.query_log WHERE type = 2 AND startsWith(query_id, ?)",
		l.prefix+"-").Scan(&peakBytes, &readRows)
	return peakBytes, readRows, err
}

func runBench(b *testing.B, a *Analyzer, req Request) {
	b.Helper()
	b.ReportAllocs()
	var an *Analysis
	var err error
	ldb, _ := a.db.(*loggedDB)
	if ldb != nil {
		ldb.prefix, ldb.n = fmt.Sprintf("bench-%d", time.Now().UnixNano()), 0
	}
	for b.Loop() {
		if an, err = a.Analyze(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	estimated := 0
	for _, c := range an.Candidates {
		if c.Skipped == "" && !c.Split {
			estimated++
		}
	}
	b.ReportMetric(float64(an.Queries), "queries/op")
	b.ReportMetric(float64(estimated), "causes/op")
	b.ReportMetric(float64(an.Incident.Requests), "window-requests")
	if ldb != nil {
		peak, read, err := ldb.serverCost(context.Background())
		if err != nil {
			b.Fatalf("read the query log: %v", err)
		}
		b.ReportMetric(float64(peak)/(1<<20), "server-peak-MiB")
		b.ReportMetric(float64(read)/float64(b.N), "server-rows-read/op")
	}
	if len(an.Incident.Culprits) > 0 {
		b.Logf("top culprit %s %s AF %.2f; %d queries, %v in ClickHouse", an.Incident.Culprits[0].Cause, EntityString(an.Incident.Culprits[0].Entity), an.Incident.Culprits[0].AttributableFraction, an.Queries, an.QueryTime.Round(time.Millisecond))
	}
}

// BenchmarkAnalyze measures one attribution (every candidate cause of the
// default DAG) over 100k and 1M requests (10M with
// TAILCAUSE_BENCH_10M=1): wall time per analysis, ClickHouse queries, and
// Go-side allocations. Run with -benchtime=1x: one analysis of 1M rows
// takes tens of seconds on a small server.
func BenchmarkAnalyze(b *testing.B) {
	sizes := []int{100_000, 1_000_000}
	if os.Getenv("TAILCAUSE_BENCH_10M") != "" {
		sizes = append(sizes, 10_000_000)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("requests=%d", n), func(b *testing.B) {
			a, req := benchData(b, n)
			runBench(b, a, req)
		})
	}
}

// BenchmarkAnalyzeCauses measures how the cost grows with the number of
// candidate causes, over 1M requests.
func BenchmarkAnalyzeCauses(b *testing.B) {
	a, req := benchData(b, 1_000_000)
	for _, causes := range [][]Cause{
		{CauseKVPreemption},
		{CauseKVPreemption, CauseLongPrompts, CauseThermalThrottle, CauseQueueSaturation},
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
