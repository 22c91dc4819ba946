package causal

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// sweepDoc is everything a sweep answers, as JSON: the answer, every scope
// analysis, the scopes, notes and the queries of each analysis and of the
// sweep (without the statements that made the workers' copies), not
// their timings.
func sweepDoc(t *testing.T, res *SweepResult) string {
	t.Helper()
	type analysis struct {
		Incident   Incident
		Candidates []Candidate
		Notes      []string
		Queries    int
		Reads      Reads
	}
	untimed := func(r Reads) Reads { r.SnapshotTime = 0; return r }
	conv := func(as []*Analysis) []analysis {
		var out []analysis
		for _, an := range as {
			if an.Reads != res.Reads {
				t.Errorf("an analysis reads %+v, the sweep %+v", an.Reads, res.Reads)
			}
			out = append(out, analysis{an.Incident, an.Candidates, an.Notes, an.Queries, untimed(an.Reads)})
		}
		return out
	}
	b, err := json.MarshalIndent(map[string]any{
		"answer": conv(res.Answer()), "examined": conv(res.Examined), "scopes": res.Scopes, "insufficient": res.Insufficient,
		"notes": res.Notes, "queries": res.Queries - res.CopyQueries, "reads": untimed(res.Reads),
	}, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSweepParallelMatchesSequential: a sweep over six models with four
// workers (three of them reading copies of the snapshot) gives the answer
// of the sequential sweep — the same breaches in the same order with the
// same culprits and notes, every scope analysis alike, the same queries —
// through a snapshot and with direct reads. Run with -race.
func TestSweepParallelMatchesSequential(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	st := chstoretest.Fresh(t)
	for _, s := range sweepFleet() {
		if _, err := insertSynth(ctx, st.Conn(), s, 100_000); err != nil {
			t.Fatal(err)
		}
	}
	req := SweepRequest{Window: window(30*time.Minute, time.Hour)}
	for _, direct := range []bool{false, true} {
		sweep := func(parallel int) *SweepResult {
			t.Helper()
			cfg := DefaultConfig()
			cfg.Version, cfg.SweepParallel, cfg.DirectReads = "test", parallel, direct
			a, err := NewAnalyzer(StoreDB(st), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			res, err := a.Sweep(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("direct=%v parallel %d: %d workers, %d breaches, %d queries (%d for copies), %v", direct, parallel, res.Workers, len(res.Breaches), res.Queries, res.CopyQueries, time.Since(t0).Round(time.Millisecond))
			return res
		}
		seq, par := sweep(1), sweep(4)
		if seq.Workers != 1 || seq.CopyQueries != 0 {
			t.Errorf("direct=%v: the sequential sweep ran %d workers, %d copy statements", direct, seq.Workers, seq.CopyQueries)
		}
		if par.Workers != 4 {
			t.Errorf("direct=%v: the parallel sweep ran %d workers, want 4", direct, par.Workers)
		}
		if want := map[bool]int{false: 1 + 3*(snapshotStatements+1), true: 0}[direct]; par.CopyQueries != want {
			t.Errorf("direct=%v: %d statements for copies, want %d", direct, par.CopyQueries, want)
		}
		var levels []string
		for _, an := range seq.Breaches {
			levels = append(levels, an.Incident.Breach.Level+" "+an.Incident.SLO.Scope["model"])
		}
		if len(seq.Breaches) < 3 || len(seq.Scopes) != 6 {
			t.Fatalf("direct=%v: breaches %v over %d scopes: want the three faults' among six", direct, levels, len(seq.Scopes))
		}
		// The documents alike to the digit; the candidates' raw estimates
		// to 1e-9 relative: a snapshot (the sweep's, or a copy) holds its
		// rows in the order the parallel read of its CREATE wrote them,
		// and the Go fits add the rows of each engine in that order, so
		// two sequential sweeps differ in the last bits too (seen:
		// 5857.253830849188 and …849522).
		s, p := sweepDoc(t, seq), sweepDoc(t, par)
		if msg := sameJSON(s, p, 1e-9); msg != "" {
			t.Errorf("direct=%v: the parallel sweep differs from the sequential one: %s", direct, msg)
		}
		for i := range seq.Answer() {
			a, _ := json.Marshal(seq.Answer()[i].Incident)
			b, _ := json.Marshal(par.Answer()[i].Incident)
			if string(a) != string(b) {
				t.Logf("direct=%v: document %d not byte-identical (within 1e-9): %s", direct, i, firstDiff(string(a), string(b)))
			}
		}
	}
}

// sameJSON compares two JSON documents: the same structure, strings and
// order, numbers within tol relative; "" when alike, else the first
// difference.
func sameJSON(a, b string, tol float64) string {
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		return err.Error()
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		return err.Error()
	}
	var walk func(path string, x, y any) string
	walk = func(path string, x, y any) string {
		switch x := x.(type) {
		case map[string]any:
			ym, ok := y.(map[string]any)
			if !ok || len(ym) != len(x) {
				return fmt.Sprintf("%s: %v vs %v", path, x, y)
			}
			for k, v := range x {
				if msg := walk(path+"."+k, v, ym[k]); msg != "" {
					return msg
				}
			}
		case []any:
			ys, ok := y.([]any)
			if !ok || len(ys) != len(x) {
				return fmt.Sprintf("%s: %d vs %v", path, len(x), y)
			}
			for i := range x {
				if msg := walk(fmt.Sprintf("%s[%d]", path, i), x[i], ys[i]); msg != "" {
					return msg
				}
			}
		case float64:
			yf, ok := y.(float64)
			if !ok || math.Abs(x-yf) > tol*math.Max(math.Abs(x), math.Abs(yf)) {
				return fmt.Sprintf("%s: %v vs %v", path, x, y)
			}
		default:
			if x != y {
				return fmt.Sprintf("%s: %v vs %v", path, x, y)
			}
		}
		return ""
	}
	return walk("", x, y)
}

// A copy whose rows differ from the sweep's snapshot (here: a checksum
// that cannot match) leaves its worker out; the jobs all run on the
// sweep's own session.
func TestSweepPoolCopyMismatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st := chstoretest.Fresh(t)
	s := synthScenario{Seed: 4, Start: synthStart, Duration: 10 * time.Minute, RatePerS: 5, Hosts: 2, Model: "m"}
	if _, err := insertSynth(ctx, st.Conn(), s, 100_000); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.SweepParallel = 4
	store, err := NewAnalyzer(StoreDB(st), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cov := store.coverage(window(0, 10*time.Minute), nil)
	main, made, release, err := store.withSnapshot(ctx, nil, "e2e_ms", true, cov)
	if err != nil || !made {
		t.Fatalf("no snapshot: %v", err)
	}
	defer release()
	pool := newSweepPool(store, main, nil, "e2e_ms", cov)
	defer pool.close()
	pool.mainSum = &snapshotSum{rows: -1}
	ran := make([]*Analyzer, 8)
	if err := pool.run(ctx, len(ran), func(ctx context.Context, a *Analyzer, i int) error {
		ran[i] = a
		_, err := queryFloats(ctx, a.db, "rows", "SELECT toFloat64(count()) FROM "+a.table(), 1)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for i, a := range ran {
		if a != main {
			t.Errorf("job %d ran on another analyzer than the sweep's", i)
		}
	}
	if pool.workers != 1 || pool.queries != 3*(snapshotStatements+1) {
		t.Errorf("%d workers, %d statements: want 1 worker, and three copies made, checked and dropped", pool.workers, pool.queries)
	}
}

// BenchmarkSweepParallel measures one fleet sweep over 80 small models
// (two hosts of two engines each, 3 requests per second, 20 minutes: a
// 10-minute window and its preceding baseline; 288k rows in all), with
// one worker (the sequential sweep) and with four, on the same data in
// the same run; parallel=4 reports its wall time over parallel=1's
// (x-sequential). Run with -benchtime=1x (or a few).
func BenchmarkSweepParallel(b *testing.B) {
	st := chstoretest.Fresh(b)
	ctx := context.Background()
	const models = 80
	for i := range models {
		s := synthScenario{Seed: uint64(100 + i), Start: synthStart, Duration: 20 * time.Minute, Hosts: 2, GPUs: 2, RatePerS: 3, Model: fmt.Sprintf("m-%03d", i)}
		if _, err := insertSynth(ctx, st.Conn(), s, 100_000); err != nil {
			b.Fatal(err)
		}
	}
	req := SweepRequest{Window: window(10*time.Minute, 20*time.Minute)}
	var seq time.Duration
	for _, parallel := range []int{1, 4} {
		b.Run(fmt.Sprintf("parallel=%d", parallel), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.SweepParallel = parallel
			a, err := NewAnalyzer(StoreDB(st), cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var res *SweepResult
			for b.Loop() {
				if res, err = a.Sweep(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			perOp := b.Elapsed() / time.Duration(b.N)
			b.ReportMetric(float64(res.Queries), "queries/op")
			b.ReportMetric(float64(res.CopyQueries), "copy-queries/op")
			b.ReportMetric(float64(res.Workers), "workers")
			b.ReportMetric(float64(len(res.Scopes)), "scopes")
			if parallel == 1 {
				seq = perOp
			} else if seq > 0 {
				b.ReportMetric(float64(perOp)/float64(seq), "x-sequential")
			}
		})
	}
}
