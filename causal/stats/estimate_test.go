package stats

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/causal/stats/statstest"
)

func TestEffectMS(t *testing.T) {
	ms, ci := EffectMS(Effect{Beta: 0.5, SE: 0.1}, 1, 1000)
	statstest.Near(t, "effect", ms, math.Expm1(0.5)*1000, 1e-12)
	statstest.Near(t, "lo", ci[0], math.Expm1(0.5-Z95*0.1)*1000, 1e-12)
	statstest.Near(t, "hi", ci[1], math.Expm1(0.5+Z95*0.1)*1000, 1e-12)
	// Observed latency L with the cause: ref = L·exp(−βΔ) gives L(1−e^{−βΔ}).
	L := 3000.0
	ms, _ = EffectMS(Effect{Beta: 0.7}, 2, L*math.Exp(-1.4))
	statstest.Near(t, "effect from observed", ms, L*(1-math.Exp(-1.4)), 1e-12)
}

func TestAttributableFraction(t *testing.T) {
	af := AttributableFraction(Effect{Beta: 0.2, SE: 0.02}, 0.15, 0.05, 1e5)
	statstest.Near(t, "af", af.Value, 0.6, 1e-12)
	if !(af.CI[0] < 0.6 && af.CI[1] > 0.6) {
		t.Errorf("ci %v does not cover 0.6", af.CI)
	}
	// Delta method by hand.
	se := math.Sqrt(math.Pow(0.15/0.05*0.02, 2) + math.Pow(0.6/0.05, 2)*0.05*0.95/1e5)
	statstest.Near(t, "ci lo", af.CI[0], 0.6-Z95*se, 1e-12)
	if got := AttributableFraction(Effect{Beta: 0.9, SE: 0.01}, 0.5, 0.1, 1e4); got.Value != 1 || got.CI[1] != 1 {
		t.Errorf("not clipped at 1: %+v", got)
	}
	if got := AttributableFraction(Effect{Beta: -0.1, SE: 0.01}, 0.5, 0.1, 1e4); got.Value != 0 {
		t.Errorf("not clipped at 0: %+v", got)
	}
	if got := AttributableFraction(Effect{Beta: 0.1}, 0.5, 0, 1e4); got != (Fraction{}) {
		t.Errorf("zero tail rate: %+v", got)
	}
}

func TestCounterfactualQuantile(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	n := 5000
	rows := make([]LatencyDelta, n)
	for i := range rows {
		d := 0.0
		if rng.Float64() < 0.1 {
			d = 1
		}
		rows[i] = LatencyDelta{LatencyMS: 500 * math.Exp(rng.NormFloat64()*0.4+1.2*d), Delta: d}
	}
	full, err := CounterfactualQuantile(rows, n, 1.2, 0.99)
	if err != nil {
		t.Fatal(err)
	}
	// By hand: undo the shift and take the ⌈0.99n⌉-th smallest.
	cf := make([]float64, n)
	for i, r := range rows {
		cf[i] = r.LatencyMS * math.Exp(-1.2*r.Delta)
	}
	sortFloats(cf)
	if full != cf[4949] {
		t.Errorf("cf quantile %v, want %v", full, cf[4949])
	}
	// The same from the slowest 10% only.
	sorted := append([]LatencyDelta(nil), rows...)
	sortRows(sorted)
	top, err := CounterfactualQuantile(sorted[n-500:], n, 1.2, 0.99)
	if err != nil || top != full {
		t.Errorf("from top rows: %v, %v; want %v", top, err, full)
	}
	// Too few rows: the quantile falls among rows not given.
	if _, err := CounterfactualQuantile(sorted[n-20:], n, 5, 0.99); !errors.Is(err, ErrTooFewRows) {
		t.Errorf("err = %v, want ErrTooFewRows", err)
	}
	obs, _ := CounterfactualQuantile(rows, n, 0, 0.99)
	if !(full < obs) {
		t.Errorf("removing the cause did not lower P99: %v vs %v", full, obs)
	}
}

func sortFloats(x []float64) { sort.Float64s(x) }

func sortRows(x []LatencyDelta) {
	sort.Slice(x, func(i, j int) bool { return x[i].LatencyMS < x[j].LatencyMS })
}

// simulateKV draws requests where longer prompts raise KV usage and latency
// (through prefill); when kvFault is set, KV pressure also adds latency by
// preemption. It returns the columns [1, kv_exposed, prompt_k] and the
// outcomes log latency and tail indicator.
func simulateKV(seed uint64, n int, kvFault bool) (x *mat.Dense, logLat, tail []float64, lat []float64, delta []float64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	x = mat.NewDense(n, 3, nil)
	logLat = make([]float64, n)
	tail = make([]float64, n)
	lat = make([]float64, n)
	delta = make([]float64, n)
	for i := 0; i < n; i++ {
		promptK := rng.ExpFloat64() * 2 // thousands of tokens
		kv := math.Min(1, 0.3+0.12*promptK+rng.NormFloat64()*0.05)
		exposed := 0.0
		if kv >= 0.9 {
			exposed = 1
		}
		l := math.Log(800) + 0.35*promptK + rng.NormFloat64()*0.3
		if kvFault {
			l += 0.8 * exposed
		}
		x.Set(i, 0, 1)
		x.Set(i, 1, exposed)
		x.Set(i, 2, promptK)
		logLat[i] = l
		lat[i] = math.Exp(l)
		delta[i] = exposed
	}
	thr := Quantile(0.9, sortedCopy(lat))
	for i := range lat {
		if lat[i] > thr {
			tail[i] = 1
		}
	}
	return x, logLat, tail, lat, delta
}

func sortedCopy(x []float64) []float64 {
	s := append([]float64(nil), x...)
	sortFloats(s)
	return s
}

// TestDecoyKV is the decoy the design calls out: KV usage rising because
// prompts got longer. Adjusted for prompt_tokens (the default DAG's backdoor
// set for kv_usage) the KV effect vanishes; unadjusted it looks large. With
// a real KV fault the adjusted effect is there.
func TestDecoyKV(t *testing.T) {
	g, err := dag.Default()
	if err != nil {
		t.Fatal(err)
	}
	z, err := g.BackdoorSet("kv_usage", "e2e_ms", nil)
	if err != nil || !slices.Contains(z, "prompt_tokens") {
		t.Fatalf("backdoor set %v, %v", z, err)
	}
	fit := func(x *mat.Dense, y []float64) (*OLS, *Meats) {
		f, err := FitOLS(statsOf(x, y, nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		return f, MeatsFromRows(x, y, f)
	}
	for _, fault := range []bool{false, true} {
		x, logLat, tail, lat, delta := simulateKV(11, 1500, fault)
		fu, mu := fit(statstest.Columns(x, 0, 1), logLat)
		naive, _ := TreatmentEffect(fu, mu, 1)
		fl, ml := fit(x, logLat)
		adj, _ := TreatmentEffect(fl, ml, 1)
		// The tail indicator is a steep function of prompt length: adjust
		// for it with hinges at its quantiles (Hinges renders the same in
		// SQL), not only linearly.
		xs := withHinges(x, 2, []float64{0.5, 0.75, 0.9, 0.95, 0.98})
		fp, mp := fit(xs, tail)
		fpl, mpl := fit(x, tail)
		linear, _ := TreatmentEffect(fpl, mpl, 1)
		var exposed, tails float64
		for i := range delta {
			exposed += delta[i]
			tails += tail[i]
		}
		n := float64(len(delta))
		est, err := EstimateCause(CauseInput{
			LPM: fp, Log: fl, LPMMeats: mp, LogMeats: ml, Treatment: 1,
			Delta: 1, MeanDelta: exposed / n, TailRate: tails / n, N: n,
			AffectedMS: 3000,
			Rows:       lat2rows(lat, delta), RowsTotal: len(lat), Quantile: 0.99,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("fault=%v naive β=%.3f adjusted β=%.3f±%.3f LPM β linear=%.3f hinges=%.3f AF=%.2f %v cf=%.0f %v effect=%.0fms %v",
			fault, naive.Beta, adj.Beta, adj.SE, linear.Beta, est.LPM.Beta, est.Attributed.Value, est.Attributed.CI, est.CounterfactualMS, est.CounterfactualCI, est.EffectMS, est.EffectCI)
		if naive.Beta < 0.5 {
			t.Errorf("fault=%v: the unadjusted KV effect should look large, got %v", fault, naive.Beta)
		}
		ci := adj.CI(0)
		if !fault && (ci[0] > 0 || ci[1] < 0) {
			t.Errorf("decoy: adjusted KV effect %v±%v excludes 0", adj.Beta, adj.SE)
		}
		if !fault && est.Attributed.Value > 0.15 {
			t.Errorf("decoy: attributable fraction %v", est.Attributed.Value)
		}
		if fault && (ci[0] > 0.8 || ci[1] < 0.8) {
			t.Errorf("fault: adjusted KV effect %v±%v misses the true 0.8", adj.Beta, adj.SE)
		}
		if fault && est.Attributed.Value < 0.3 {
			t.Errorf("fault: attributable fraction %v", est.Attributed.Value)
		}
		if fault && !(est.CounterfactualCI[0] <= est.CounterfactualMS && est.CounterfactualMS <= est.CounterfactualCI[1]) {
			t.Errorf("counterfactual %v outside its interval %v", est.CounterfactualMS, est.CounterfactualCI)
		}
	}
}

func lat2rows(lat, delta []float64) []LatencyDelta {
	out := make([]LatencyDelta, len(lat))
	for i := range lat {
		out[i] = LatencyDelta{LatencyMS: lat[i], Delta: delta[i]}
	}
	return out
}

// withHinges appends hinge columns of column c at its quantiles qs.
func withHinges(x *mat.Dense, c int, qs []float64) *mat.Dense {
	n, p := x.Dims()
	col := make([]float64, n)
	for i := range col {
		col[i] = x.At(i, c)
	}
	s := sortedCopy(col)
	out := mat.NewDense(n, p+len(qs), nil)
	for i := 0; i < n; i++ {
		for j := 0; j < p; j++ {
			out.Set(i, j, x.At(i, j))
		}
		for k, q := range qs {
			out.Set(i, p+k, math.Max(col[i]-Quantile(q, s), 0))
		}
	}
	return out
}
