package causal

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tailcause/tailcause/causal/sqlgen"
	"github.com/tailcause/tailcause/causal/stats"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// sampleScenario is fixedScenario at seven times its rate: 403,200
// requests over two hours, above the sampling threshold of the test.
var sampleScenario = func() synthScenario {
	s := fixedScenario
	s.RatePerS = 56
	return s
}()

// sampledAFTolerance is how far a culprit's attributable fraction through
// a sampled frame may be from the exact one (absolute; DESIGN.md
// "Sampling the rows below the tail").
const sampledAFTolerance = 0.02

// TestSampledMatchesExact: on a fixed dataset of 403,200 requests (a KV
// fault, a thermal throttle and a degraded engine in the second hour), the
// analyses with the frame's rows below the tail sampled (Config.SampleRows
// 100,000: one in 8 kept, weight 8) and with every row name the same
// culprits in the same order on the same entities with the same
// exemplars, each attributable fraction within sampledAFTolerance; the
// counts, P99s, breach verdict and tail count are the exact ones, and
// every test's checkSharedSQL finds the sampled frame's quantile grids,
// placement and tail counts equal to their queries bit for bit.
func TestSampledMatchesExact(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a := synthAnalyzer(ctx, t, sampleScenario)
	exact := twinAnalyzer(t, a, func(c *Config) { c.SampleRows = 0 })
	sampled := twinAnalyzer(t, a, func(c *Config) { c.SampleRows = 100_000 })
	// The same sample read in several reads of at most 1M values (~72k
	// rows of ~27 atoms: three reads): the frame's rows are counted first
	// (by the placement groups' scan), so that they take as few reads as
	// they need, and the answers are the one read's.
	sampledReads := twinAnalyzer(t, a, func(c *Config) { c.SampleRows, c.frameReadValues = 100_000, 1_000_000 })
	for i, req := range fixedQuestions[:2] {
		what := "window " + fmtInterval(req.Window)
		if req.SLO.ThresholdMS > 0 {
			what += ", SLO threshold"
		}
		ex, err := exact.Analyze(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		sa, err := sampled.Analyze(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if ex.Fits.SampleEvery != 0 || sa.Fits.SampleEvery != 8 || sa.Fits.FrameRows >= ex.Fits.FrameRows/2 {
			t.Errorf("%s: exact fits %+v, sampled %+v: want one in 8 of the rows below the tail", what, ex.Fits, sa.Fits)
		}
		t.Logf("%s: frame of %d rows, sampled %d (one in %d below the tail), Go fits %v / %v, shared aggregates by query %d",
			what, ex.Fits.FrameRows, sa.Fits.FrameRows, sa.Fits.SampleEvery, ex.Fits.Go, sa.Fits.Go, sa.Fits.SharedSQL)
		if len(ex.Incident.Culprits) < 2 {
			t.Fatalf("%s: %d culprits exactly: the test needs at least two", what, len(ex.Incident.Culprits))
		}
		sameSampled(t, what, ex, sa)
		if i > 0 {
			continue
		}
		sr, err := sampledReads.Analyze(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if sr.Fits.FrameRows != sa.Fits.FrameRows || sr.Queries <= sa.Queries || sr.Queries > sa.Queries+4 {
			t.Errorf("%s: frame of %d rows in %d queries read in reads of 1M values, %d rows in %d queries in one", what, sr.Fits.FrameRows, sr.Queries, sa.Fits.FrameRows, sa.Queries)
		}
		for j := range min(len(sr.Incident.Culprits), len(sa.Incident.Culprits)) {
			if x, y := sr.Incident.Culprits[j], sa.Incident.Culprits[j]; x.Cause != y.Cause || x.AttributableFraction != y.AttributableFraction {
				t.Errorf("%s: culprit %d %s AF %v read in reads of 1M values, %s AF %v in one", what, j+1, x.Cause, x.AttributableFraction, y.Cause, y.AttributableFraction)
			}
		}
	}
}

// sameSampled checks that a sampled analysis answers as the exact one:
// the same status, counts and P99s (exact either way), the same culprits
// in the same order on the same entities with the same exemplars, AF
// within sampledAFTolerance.
func sameSampled(t *testing.T, what string, ex, sa *Analysis) {
	t.Helper()
	d, s := ex.Incident, sa.Incident
	if d.Status != s.Status || ex.Breach.Breached != sa.Breach.Breached || d.Requests != s.Requests || d.TailRequests != s.TailRequests ||
		d.ObservedP99MS != s.ObservedP99MS || d.BaselineP99MS != s.BaselineP99MS {
		t.Errorf("%s: status %s/%s, breached %v/%v, requests %d/%d, tail %d/%d, P99 %v/%v, baseline P99 %v/%v (exact/sampled)", what,
			d.Status, s.Status, ex.Breach.Breached, sa.Breach.Breached, d.Requests, s.Requests, d.TailRequests, s.TailRequests,
			d.ObservedP99MS, s.ObservedP99MS, d.BaselineP99MS, s.BaselineP99MS)
	}
	if len(d.Culprits) != len(s.Culprits) {
		t.Fatalf("%s: %d culprits exactly, %d sampled:\n%s\n%s", what, len(d.Culprits), len(s.Culprits), culpritList(d.Culprits), culpritList(s.Culprits))
	}
	for i := range d.Culprits {
		a, b := d.Culprits[i], s.Culprits[i]
		t.Logf("%s: culprit %d %s %s: AF %.4f / %.4f, effect %.1f / %.1f ms, counterfactual %.1f / %.1f ms, health %.3f / %.3f (exact/sampled)",
			what, i+1, a.Cause, EntityString(a.Entity), a.AttributableFraction, b.AttributableFraction, a.EffectMS, b.EffectMS,
			a.CounterfactualP99MS, b.CounterfactualP99MS, a.Health, b.Health)
		if a.Cause != b.Cause || a.Entity != b.Entity {
			t.Errorf("%s: culprit %d is %s %s exactly, %s %s sampled", what, i+1, a.Cause, EntityString(a.Entity), b.Cause, EntityString(b.Entity))
			continue
		}
		if math.Abs(a.AttributableFraction-b.AttributableFraction) > sampledAFTolerance {
			t.Errorf("%s: culprit %d %s: AF %v exactly, %v sampled", what, i+1, a.Cause, a.AttributableFraction, b.AttributableFraction)
		}
	}
}

// weightedFrame is benchFrame(n) with a weight of 1 or 4 for each row
// (as a sampled frame weighs its tail and its other rows), and the frame
// that holds each row as many times as it weighs, with weight 1.
func weightedFrame(n int) (weighted, dup *colFrame) {
	f := benchFrame(n)
	rng := rand.New(rand.NewPCG(5, 6))
	dup = &colFrame{nums: map[string][]colPart{}, labels: map[string]*labelCol{}}
	eng := f.labels["toString(engine)"]
	deng := &labelCol{dict: eng.dict, code: eng.code}
	dup.labels["toString(engine)"] = deng
	for ci, m := range f.chunks {
		w := make([]float64, m)
		for i := range w {
			w[i] = 1
			if rng.IntN(3) > 0 {
				w[i] = 4
			}
		}
		f.w = append(f.w, w)
		var rows []int
		for i := range m {
			for range int(w[i]) {
				rows = append(rows, i)
			}
		}
		dup.chunks = append(dup.chunks, len(rows))
		for a, parts := range f.nums {
			p := parts[ci]
			var q colPart
			for _, i := range rows {
				if p.u8 != nil {
					q.u8 = append(q.u8, p.u8[i])
				} else {
					q.f64 = append(q.f64, p.f64[i])
				}
			}
			dup.nums[a] = append(dup.nums[a], q)
		}
		var codes []uint32
		for _, i := range rows {
			codes = append(codes, eng.parts[ci][i])
		}
		deng.parts = append(deng.parts, codes)
	}
	return f, dup
}

// compiled is d compiled against f (as the Go passes see it).
func compiled(t testing.TB, f *colFrame, d sqlgen.Design) *goDesign {
	t.Helper()
	tc := termCompiler{labels: map[string]bool{"engine": true}}
	g := &goDesign{d: d, c: len(d.Regressors), k: len(d.Outcomes), m: len(d.Sums)}
	for _, x := range slices.Concat(d.Regressors, d.Outcomes, d.Sums) {
		g.cols = append(g.cols, tc.compile(x))
	}
	g, err := f.bind(g)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// fitsOf runs the first Go pass of g over f and fits every outcome.
func fitsOf(t testing.TB, f *colFrame, g *goDesign) ([]*stats.OLS, []float64) {
	t.Helper()
	suff, sums, err := g.d.AssembleSuffStats(f.suffStats(g))
	if err != nil {
		t.Fatal(err)
	}
	var fits []*stats.OLS
	for _, s := range suff {
		fit, err := stats.FitOLS(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		fits = append(fits, fit)
	}
	return fits, sums
}

// TestWeightedPasses: the Go passes over a weighted frame (rows of weight
// 1 and 4, as a sampled frame's) fit what they fit over the frame that
// holds each row as many times as it weighs — the same rows counted, the
// same extra sums, the same coefficients, with and without a factor —
// and their meats are the weighted sandwich's, computed here row by row:
// Σ w²·e²·u² and Σ w²·e²·u²/(1 − h)², u = a·x (a the treatment's row of
// (X'WX)⁻¹), h = w·x'(X'WX)⁻¹x.
func TestWeightedPasses(t *testing.T) {
	wf, dup := weightedFrame(20_000)
	regs := []string{"1", "toFloat64(t)"}
	for j := range 3 {
		regs = append(regs, sqlgen.Hinges(fmt.Sprintf("x%d", j), []float64{-0.5, 0.5})...)
	}
	for _, d := range []sqlgen.Design{
		{Table: snapshotTable, Regressors: regs, Outcomes: []string{"toFloat64(tail)", "toFloat64(lg)"}, Sums: []string{"toFloat64(w)", "toFloat64(w) * toFloat64(tail)"}},
		{Table: snapshotTable, Regressors: regs, Factors: []sqlgen.Factor{{Name: "engine", Expr: "engine", Levels: []string{"e1", "e2", "e3", "e4", "e5", "e6", "e7"}}},
			Outcomes: []string{"toFloat64(tail)", "toFloat64(lg)"}, Sums: []string{"toFloat64(w)", "toFloat64(w) * toFloat64(tail)"}},
	} {
		what := fmt.Sprintf("%d factors", len(d.Factors))
		gw, gd := compiled(t, wf, d), compiled(t, dup, d)
		fw, sw := fitsOf(t, wf, gw)
		fd, sd := fitsOf(t, dup, gd)
		near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(b), 1) }
		if fw[0].N != fd[0].N || !slices.EqualFunc(sw, sd, near) {
			t.Errorf("%s: %v rows, sums %v weighted; %v rows, sums %v duplicated", what, fw[0].N, sw, fd[0].N, sd)
		}
		for k := range fw {
			if !slices.EqualFunc(fw[k].Coef, fd[k].Coef, near) {
				t.Errorf("%s: outcome %d: β %v weighted, %v duplicated", what, k, fw[k].Coef, fd[k].Coef)
			}
		}
		if len(d.Factors) > 0 {
			continue // the reference below has no factor columns
		}
		row := wf.meats(gw, fw, 1)
		inv := fw[0].XtXInv
		p := len(regs)
		var want [6]float64 // n, h max, v0 and v3 of each outcome
		want[1] = math.Inf(-1)
		x := make([]float64, p)
		for ci, m := range wf.chunks {
			for i := range m {
				w := wf.w[ci][i]
				for j := range regs {
					x[j] = wf.termAt(gw.cols[j], ci, i)
				}
				var u, h float64
				for j := range p {
					u += inv.At(1, j) * x[j]
					for l := range p {
						h += x[j] * inv.At(j, l) * x[l]
					}
				}
				h *= w
				want[0] += w
				want[1] = math.Max(want[1], h)
				for k := range 2 {
					e := wf.termAt(gw.cols[p+k], ci, i)
					for j := range p {
						e -= fw[k].Coef[j] * x[j]
					}
					v := w * w * e * e * u * u
					want[2+2*k] += v
					want[3+2*k] += v / ((1 - h) * (1 - h))
				}
			}
		}
		for j := range row {
			if !near(row[j], want[j]) {
				t.Errorf("%s: meats %v, want %v", what, row, want)
				break
			}
		}
	}
}

// TestSamplerHashSQL: the frame's sampling condition computes in
// ClickHouse the hash the quantile grids' sampler uses (intHash64), so
// that a sampled frame holds every row the grids sample.
func TestSamplerHashSQL(t *testing.T) {
	st := chstoretest.Fresh(t)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, x := range []uint64{0, 1, 2, 1 << 33, math.MaxUint64, rng.Uint64(), rng.Uint64(), rng.Uint64()} {
		var got uint64
		var kept uint8
		q := "SELECT " + samplerHashSQL("toUInt64("+strconv.FormatUint(x, 10)+")") + ", " + samplerKeeps("toUInt64("+strconv.FormatUint(x, 10)+")", 3)
		if err := st.Conn().QueryRow(context.Background(), q).Scan(&got, &kept); err != nil {
			t.Fatal(err)
		}
		if want := intHash64(x); got != want || (kept == 1) != (want&7 == 0) {
			t.Errorf("intHash64(%d) in SQL: %d (kept with 3 bits: %d), want %d", x, got, kept, want)
		}
	}
}
