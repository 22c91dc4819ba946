package causal

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/causal/sqlgen"
)

func TestTermCompiler(t *testing.T) {
	tc := termCompiler{labels: map[string]bool{"host": true, "concat(host, '/', pod, '/', engine)": true}}
	n := dag.Node{Name: "kv", Expr: "kv_usage_max", Exposed: "kv_usage_max >= 0.9 OR preemptions_during > 0"}
	for _, c := range []struct {
		expr string
		want string // the term's shape
	}{
		{"1", "1"},
		{sqlgen.Hinges("kv_usage_max", nil)[0], "[toFloat64(kv_usage_max)]"},
		{sqlgen.Hinges("engine_prompt_tps / 1000", []float64{0.5})[1], "hinge([toFloat64(engine_prompt_tps / 1000)], 0.5)"},
		{sqlgen.Hinges("x", []float64{-2.5})[1], "hinge([toFloat64(x)], (-2.5))"},
		{n.Treatment(), "[toFloat64(kv_usage_max >= 0.9 OR preemptions_during > 0)]"},
		{guard(n.Treatment()), "guard([toFloat64(kv_usage_max >= 0.9 OR preemptions_during > 0)])"},
		{"toFloat64((start_ns >= 1 AND start_ns < 2)) * toFloat64(e2e_ms > 812.5)", "prod([toFloat64(start_ns >= 1 AND start_ns < 2)], [toFloat64(e2e_ms > 812.5)])"},
		{"(1 - toFloat64(w)) * toFloat64(x)", "prod(1-([toFloat64(w)]), [toFloat64(x)])"},
		{"1 - toFloat64(w)", "1-([toFloat64(w)])"},
		{"toFloat64(host = 'node-1')", "eq(toString(host), node-1)"},
		{dag.Node{Expr: "concat(host, '/', pod, '/', engine)"}.Indicator("a'b/c"), "eq(toString(concat(host, '/', pod, '/', engine)), a'b/c)"},
		{"toFloat64(gpu = 'g')", "[toFloat64(gpu = 'g')]"}, // gpu is not a known label here
		{"toFloat64(x) - 1 * y", "[toFloat64(toFloat64(x) - 1 * y)]"},
		{"log(greatest(toFloat64(e2e_ms), 0.001))", "[toFloat64(log(greatest(toFloat64(e2e_ms), 0.001)))]"},
		{"greatest(toFloat64(x) - 1 - 2, 0)", "[toFloat64(greatest(toFloat64(x) - 1 - 2, 0))]"},
		{"(a) + (b)", "[toFloat64((a) + (b))]"},
	} {
		if got := termString(tc.compile(c.expr)); got != c.want {
			t.Errorf("compile(%q) = %s, want %s", c.expr, got, c.want)
		}
	}
	where := "model = 'm' AND isFinite(toFloat64(e2e_ms)) AND (start_ns >= 1 OR start_ns < 0) AND host = 'h'"
	var got []string
	for _, s := range conjuncts(where) {
		got = append(got, termString(tc.condition(s)))
	}
	want := []string{"[toFloat64(model = 'm')]", "finite([toFloat64(e2e_ms)])", "[toFloat64(start_ns >= 1 OR start_ns < 0)]", "eq(toString(host), h)"}
	if !slices.Equal(got, want) {
		t.Errorf("conditions of %q:\n%q\nwant\n%q", where, got, want)
	}
	if got := conjuncts("a AND b OR c"); len(got) != 1 {
		t.Errorf("conjuncts with a top-level OR: %q", got)
	}
}

func termString(t *colTerm) string {
	args := func() string {
		var s []string
		for _, a := range t.args {
			s = append(s, termString(a))
		}
		return joinComma(s)
	}
	switch t.kind {
	case termConst:
		return dag.FormatFloat(t.v)
	case termAtom:
		return "[" + t.atom + "]"
	case termHinge:
		return "hinge(" + args() + ", " + dag.FormatFloat(t.v) + ")"
	case termGuard:
		return "guard(" + args() + ")"
	case termProd:
		return "prod(" + args() + ")"
	case termOneMinus:
		return "1-(" + args() + ")"
	case termEq:
		return "eq(" + t.atom + ", " + t.lit + ")"
	case termFinite:
		return "finite(" + args() + ")"
	}
	return "?"
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}

// estTolerance is how far an estimate of the Go fits may be from the SQL
// fits' (relative, or absolute below 1): the same rows, summed in
// another order.
const estTolerance = 1e-6

// sameFits checks that two analyses of one snapshot, one with the fits'
// sums in Go and one in SQL, agree: the attribution (sameAttribution), and
// every candidate's fitted rows, regressors, effects, standard errors,
// attributable fraction, effect and counterfactual within estTolerance.
// It returns the largest relative difference seen.
func sameFits(t *testing.T, what string, sql, gofit *Analysis) float64 {
	t.Helper()
	sameAttribution(t, what, sql, gofit)
	if gofit.Fits.Go == 0 || gofit.Fits.SQL != 0 {
		t.Errorf("%s: Go fits %+v", what, gofit.Fits)
	}
	if sql.Fits.Go != 0 || sql.Fits.SQL == 0 {
		t.Errorf("%s: SQL fits %+v", what, sql.Fits)
	}
	worst := 0.0
	for i := range min(len(sql.Candidates), len(gofit.Candidates)) {
		a, b := sql.Candidates[i], gofit.Candidates[i]
		if a.Regressors != b.Regressors || a.Rows != b.Rows || a.Entity != b.Entity || a.Split != b.Split {
			t.Errorf("%s: candidate %d %s: %d regressors, %v rows, %s in SQL; %d, %v, %s in Go", what, i, a.Cause,
				a.Regressors, a.Rows, EntityString(a.Entity), b.Regressors, b.Rows, EntityString(b.Entity))
		}
		ea, eb := a.Estimate, b.Estimate
		for _, v := range []struct {
			name string
			x, y float64
		}{
			{"LPM β", ea.LPM.Beta, eb.LPM.Beta}, {"LPM SE", ea.LPM.SE, eb.LPM.SE},
			{"log β", ea.Log.Beta, eb.Log.Beta}, {"log SE", ea.Log.SE, eb.Log.SE},
			{"AF", ea.Attributed.Value, eb.Attributed.Value}, {"AF low", ea.Attributed.CI[0], eb.Attributed.CI[0]},
			{"effect ms", ea.EffectMS, eb.EffectMS}, {"counterfactual ms", ea.CounterfactualMS, eb.CounterfactualMS},
			{"max leverage", a.MaxLeverage, b.MaxLeverage},
		} {
			d := math.Abs(v.x-v.y) / math.Max(math.Abs(v.x), 1)
			if math.IsNaN(v.x) && math.IsNaN(v.y) {
				d = 0
			}
			worst = math.Max(worst, d)
			if !(d <= estTolerance) {
				t.Errorf("%s: candidate %d %s %s: %v in SQL, %v in Go", what, i, a.Cause, v.name, v.x, v.y)
			}
		}
	}
	t.Logf("%s: %d candidates; largest relative difference %.2g; %d queries in SQL, %d with Go fits (%v in Go, %.1f MiB of columns)",
		what, len(sql.Candidates), worst, sql.Queries, gofit.Queries, gofit.Fits.Go.Round(time.Millisecond), float64(gofit.Fits.FrameBytes)/(1<<20))
	return worst
}

// TestGoFitsMatchSQL: on the fixed dataset of TestSnapshotMatchesDirect
// (a KV fault, a thermal throttle and a degraded engine), and the four
// questions asked there, the fits computed in Go from the columnar read
// of the snapshot give the SQL fits' answer: the same culprits in the same
// order, every candidate's estimates within estTolerance.
func TestGoFitsMatchSQL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a := synthAnalyzer(ctx, t, fixedScenario)
	as := twinAnalyzer(t, a, func(c *Config) { c.SQLFits = true })
	for _, req := range fixedQuestions {
		what := fmtInterval(req.Window)
		sql, err := as.Analyze(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		gofit, err := a.Analyze(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(gofit.Incident.Culprits) == 0 {
			t.Errorf("%s: no culprit", what)
		}
		sameFits(t, what, sql, gofit)
	}
	// The frame read one atom at a time: every read checks its rows'
	// order against the first, and the answer is the same.
	a1 := twinAnalyzer(t, a, func(c *Config) { c.frameReadValues = 1 })
	req := Request{SLO: SLO{Scope: llama}, Window: window(time.Hour, 2*time.Hour)}
	sql, err := as.Analyze(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	many, err := a1.Analyze(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if many.Queries < sql.Queries/2 {
		t.Errorf("%d queries with one atom per frame read", many.Queries)
	}
	sameFits(t, "one atom per frame read", sql, many)
}

// TestGoFitsSweepMatchSQL: a sweep's analyses (every scope of one
// snapshot, a degraded engine among 16) answer alike with either fits.
func TestGoFitsSweepMatchSQL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a := synthAnalyzer(ctx, t, sweepScenario16)
	as := twinAnalyzer(t, a, func(c *Config) { c.SQLFits = true })
	req := SweepRequest{Window: window(30*time.Minute, time.Hour)}
	sql, err := as.Sweep(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	gofit, err := a.Sweep(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(sql.Breaches) == 0 || len(sql.Breaches) != len(gofit.Breaches) {
		t.Fatalf("%d breaches with SQL fits, %d with Go fits", len(sql.Breaches), len(gofit.Breaches))
	}
	for i := range sql.Breaches {
		sameFits(t, "breach "+sql.Breaches[i].Incident.Breach.Level, sql.Breaches[i], gofit.Breaches[i])
	}
}

// benchFrame is an in-memory frame of n rows: five continuous covariates
// (x0..x4), an exposure, the tail and log outcomes, the window and an
// engine label of 8 levels.
func benchFrame(n int) *colFrame {
	rng := rand.New(rand.NewPCG(1, 2))
	f := &colFrame{nums: map[string][]colPart{}, labels: map[string]*labelCol{}}
	eng := &labelCol{code: map[string]uint32{}}
	for i := range 8 {
		l := fmt.Sprintf("e%d", i)
		eng.dict = append(eng.dict, l)
		eng.code[l] = uint32(i + 1)
	}
	f.labels["toString(engine)"] = eng
	for lo := 0; lo < n; lo += frameChunk {
		m := min(frameChunk, n-lo)
		f.chunks = append(f.chunks, m)
		for j := range 5 {
			v := make([]float64, m)
			for i := range v {
				v[i] = rng.NormFloat64()
			}
			f.nums[fmt.Sprintf("toFloat64(x%d)", j)] = append(f.nums[fmt.Sprintf("toFloat64(x%d)", j)], colPart{f64: v})
		}
		for _, a := range []string{"toFloat64(t)", "toFloat64(tail)", "toFloat64(w)"} {
			v := make([]uint8, m)
			for i := range v {
				v[i] = uint8(rng.IntN(2))
			}
			f.nums[a] = append(f.nums[a], colPart{u8: v})
		}
		lg := make([]float64, m)
		codes := make([]uint32, m)
		for i := range lg {
			lg[i] = rng.Float64()
			codes[i] = uint32(1 + i*8/m) // sorted, as the frame keeps a chunk (colFrame.sortBy)
		}
		f.nums["toFloat64(lg)"] = append(f.nums["toFloat64(lg)"], colPart{f64: lg})
		eng.parts = append(eng.parts, codes)
	}
	return f
}

// BenchmarkGoFits times the two Go passes of the widest design of the
// default DAG's causes (27 expression columns: intercept, treatment, five
// adjusters with four hinges each; an engine factor of 8 levels) over 1M
// rows.
func BenchmarkGoFits(b *testing.B) {
	const n = 1_000_000
	f := benchFrame(n)
	regs := []string{"1", "toFloat64(t)"}
	for j := range 5 {
		regs = append(regs, sqlgen.Hinges(fmt.Sprintf("x%d", j), []float64{-1, 0, 0.5, 1})...)
	}
	d := sqlgen.Design{Table: snapshotTable, Regressors: regs, Factors: []sqlgen.Factor{{Name: "engine", Expr: "engine", Levels: []string{"e1", "e2", "e3", "e4", "e5", "e6", "e7"}}},
		Outcomes: []string{"toFloat64(tail)", "toFloat64(lg)"}, Sums: []string{"toFloat64(w)", "toFloat64(w) * toFloat64(tail)", "toFloat64(w) * toFloat64(t)"}}
	g := compiled(b, f, d)
	fits, _ := fitsOf(b, f, g)
	b.Run("suffstats", func(b *testing.B) {
		for b.Loop() {
			f.suffStats(g)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n/float64(g.c*(g.c+3)/2), "ns/term")
	})
	b.Run("meats", func(b *testing.B) {
		for b.Loop() {
			f.meats(g, fits, 1)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n/float64(g.c*(g.c+1)/2), "ns/term")
	})
}

// TestKernels: dot, axpy and hinge (AVX2 with FMA where the CPU has it)
// agree with the plain loops at every length around the vector widths;
// hinge gives +0 for NaN, −0 and negative values, as ClickHouse's
// greatest(x − k, 0).
func TestKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	t.Logf("AVX2/FMA kernels: %v", hasFMA)
	for n := range 70 {
		x, y := make([]float64, n), make([]float64, n+3)
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		for i := range y {
			y[i] = rng.NormFloat64()
		}
		var want, scale float64
		for i := range x {
			want += x[i] * y[i]
			scale += math.Abs(x[i] * y[i])
		}
		if got := dot(x, y); math.Abs(got-want) > 1e-14*math.Max(scale, 1) {
			t.Errorf("dot of %d: %v, want %v", n, got, want)
		}
		h, hg := make([]float64, n), make([]float64, n)
		xs := slices.Clone(x)
		if n > 3 {
			xs[1], xs[2], xs[3] = math.NaN(), 0.25, math.Inf(-1)
		}
		hinge(h, 0.25, xs)
		hingeGo(hg, 0.25, xs)
		for i := range h {
			want := 0.0
			if xs[i]-0.25 > 0 {
				want = xs[i] - 0.25
			}
			if math.Float64bits(h[i]) != math.Float64bits(want) || math.Float64bits(hg[i]) != math.Float64bits(want) {
				t.Fatalf("hinge of %v at 0.25: %v (Go %v), want %v", xs[i], h[i], hg[i], want)
			}
		}
		// quad (the leverage's terms of one column) against quadGo, bit
		// for bit: the same products and sums, in registers or not.
		for m := 1; m <= 5; m++ {
			cols := make([][]float64, m)
			a := make([]float64, m)
			for l := range cols {
				cols[l] = make([]float64, n+2)
				for i := range cols[l] {
					cols[l][i] = rng.NormFloat64()
				}
				a[l] = rng.NormFloat64()
			}
			hq, hw := slices.Clone(y), slices.Clone(y)
			quad(hq, cols, a, 1, n, nil)
			quadGo(hw, cols, a, 1, n, nil)
			for i := range hq {
				if math.Float64bits(hq[i]) != math.Float64bits(hw[i]) {
					t.Fatalf("quad of %d rows, %d columns: element %d is %v, quadGo's %v", n, m, i, hq[i], hw[i])
				}
			}
		}
		z := slices.Clone(y)
		axpy(z, 0.75, x)
		for i := range z {
			w := y[i]
			if i < n {
				w += 0.75 * x[i]
			}
			if math.Abs(z[i]-w) > 1e-15*math.Max(math.Abs(w), 1) {
				t.Fatalf("axpy of %d: element %d is %v, want %v", n, i, z[i], w)
			}
		}
	}
}
