package stats

import (
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func TestQuantileRanksReference(t *testing.T) {
	ref := loadHealthRef(t)
	for _, r := range ref.Ranks {
		l, u, err := QuantileRanks(r.N, r.Q, r.Level)
		if r.U > r.N {
			if !errors.Is(err, ErrTooFewRows) {
				t.Errorf("n=%d: err = %v, want ErrTooFewRows", r.N, err)
			}
			continue
		}
		if err != nil || l != r.L || u != r.U {
			t.Errorf("n=%d: ranks %d %d %v, scipy %d %d", r.N, l, u, err, r.L, r.U)
		}
	}
	if got := MinSampleSize(0.99, 0.95); got != 368 {
		t.Errorf("MinSampleSize = %d, want 368", got)
	}
	if _, _, err := QuantileRanks(368, 0.99, 0.95); err != nil {
		t.Errorf("n=368: %v", err)
	}
}

// TestQuantileIntervalCoverage checks the distribution-free coverage on a
// skewed (log-normal) latency distribution.
func TestQuantileIntervalCoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	const reps, n = 1000, 1000
	truth := math.Exp(0.5*2.3263478740408408) * 1000 // P99 of 1000·LogNormal(0, 0.5)
	covered := 0
	sample := make([]float64, n)
	for r := 0; r < reps; r++ {
		for i := range sample {
			sample[i] = 1000 * math.Exp(0.5*rng.NormFloat64())
		}
		ci, err := QuantileInterval(sample, 0.99, 0.95)
		if err != nil {
			t.Fatal(err)
		}
		if ci.Lower <= truth && truth <= ci.Upper {
			covered++
		}
		if !(ci.Lower <= ci.Estimate && ci.Estimate <= ci.Upper) {
			t.Fatalf("estimate outside interval: %+v", ci)
		}
	}
	cov := float64(covered) / reps
	if cov < 0.93 || cov > 0.995 {
		t.Errorf("coverage %.3f, want ≈ ≥ 0.95", cov)
	}
	// The interval from the slowest values equals the full one.
	sort.Float64s(sample)
	full, _ := QuantileInterval(sample, 0.99, 0.95)
	top := make([]float64, 0, 40)
	for i := n - 1; i >= n-40; i-- {
		top = append(top, sample[i])
	}
	fromTop, err := QuantileIntervalTop(n, top, 0.99, 0.95)
	if err != nil || fromTop != full {
		t.Errorf("top: %+v, %v; want %+v", fromTop, err, full)
	}
	if _, err := QuantileIntervalTop(n, top[:5], 0.99, 0.95); !errors.Is(err, ErrTooFewRows) {
		t.Errorf("5 top values: err = %v, want ErrTooFewRows", err)
	}
	if _, err := QuantileInterval(sample[:100], 0.99, 0.95); !errors.Is(err, ErrTooFewRows) {
		t.Errorf("100 values: err = %v, want ErrTooFewRows", err)
	}
}

func TestDetectBreach(t *testing.T) {
	base := QuantileCI{Estimate: 1900, Lower: 1800, Upper: 2000}
	tests := []struct {
		name   string
		window QuantileCI
		base   *QuantileCI
		cfg    *BreachConfig
		want   []string
	}{
		{"slo", QuantileCI{Lower: 2600}, nil, &BreachConfig{ThresholdMS: 2500}, []string{"slo"}},
		{"slo not credible", QuantileCI{Estimate: 2700, Lower: 2400}, nil, &BreachConfig{ThresholdMS: 2500}, nil},
		{"baseline", QuantileCI{Estimate: 2600, Lower: 2500}, &base, nil, []string{"baseline"}},
		{"within margin", QuantileCI{Estimate: 2250, Lower: 2250}, &base, nil, nil},
		{"not significant", QuantileCI{Estimate: 2400, Lower: 1950}, &base, nil, nil},
		{"lower bound within half the margin", QuantileCI{Estimate: 2400, Lower: 2150}, &base, nil, nil},
		{"no margin", QuantileCI{Estimate: 2250, Lower: 2100}, &base, &BreachConfig{MinRelIncrease: -1}, []string{"baseline"}},
		{"both", QuantileCI{Estimate: 6500, Lower: 6000}, &base, &BreachConfig{ThresholdMS: 2500}, []string{"slo", "baseline"}},
		{"healthy", QuantileCI{Lower: 1850, Upper: 2100}, &base, &BreachConfig{ThresholdMS: 2500}, nil},
	}
	for _, tc := range tests {
		b := DetectBreach(tc.window, tc.base, tc.cfg)
		if b.Breached != (len(tc.want) > 0) || len(b.Reasons) != len(tc.want) {
			t.Errorf("%s: %+v, want %v", tc.name, b, tc.want)
			continue
		}
		for i := range tc.want {
			if b.Reasons[i] != tc.want[i] {
				t.Errorf("%s: %+v, want %v", tc.name, b, tc.want)
			}
		}
	}
}

func noisy(rng *rand.Rand, levels []float64, each int, sd float64) []float64 {
	var out []float64
	for _, l := range levels {
		for i := 0; i < each; i++ {
			out = append(out, l+rng.NormFloat64()*sd)
		}
	}
	return out
}

func TestChangePoints(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	// Per-minute log P99: healthy 60 minutes, then 1.6x slower.
	s := noisy(rng, []float64{math.Log(1900), math.Log(1900 * 1.6)}, 60, 0.08)
	cps := ChangePoints(s, nil)
	if len(cps) != 1 || cps[0] < 59 || cps[0] > 61 {
		t.Errorf("change points %v, want [60]", cps)
	}
	start, ok := BreachStart(s, math.Log(1.2), nil)
	if !ok || start < 59 || start > 61 {
		t.Errorf("BreachStart = %d, %v; want 60", start, ok)
	}
	// Up, then back down, then up again: the first rise is the start.
	s = noisy(rng, []float64{0, 1, 0, 2}, 30, 0.1)
	cps = ChangePoints(s, nil)
	if len(cps) != 3 {
		t.Errorf("change points %v, want 3 near 30, 60, 90", cps)
	}
	if start, ok := BreachStart(s, 0.5, nil); !ok || start < 29 || start > 31 {
		t.Errorf("BreachStart = %d, %v; want 30", start, ok)
	}
	// A drop is not a breach.
	s = noisy(rng, []float64{1, 0}, 40, 0.1)
	if _, ok := BreachStart(s, 0.2, nil); ok {
		t.Error("a drop reported as a breach")
	}
	// High from the start, then recovered: BreachRecovery's, ending at
	// the drop; BreachStart's when a healthy stretch came first.
	if end, ok := BreachRecovery(s, 0.2, nil); !ok || end < 39 || end > 41 {
		t.Errorf("BreachRecovery = %d, %v; want 40", end, ok)
	}
	if end, ok := BreachRecovery(noisy(rng, []float64{1, 0.5, 0}, 30, 0.05), 0.2, nil); !ok || end < 59 || end > 61 {
		t.Errorf("BreachRecovery over two steps down = %d, %v; want 60 (the first within the shift of the last)", end, ok)
	}
	up := noisy(rng, []float64{0, 1, 0}, 30, 0.1)
	if _, ok := BreachRecovery(up, 0.5, nil); ok {
		t.Error("BreachRecovery took a breach that began after a healthy stretch")
	}
	if _, ok := BreachRecovery(noisy(rng, []float64{0.1, 0}, 40, 0.02), 0.2, nil); ok {
		t.Error("BreachRecovery took a drop smaller than the shift")
	}
	if _, ok := BreachRecovery(noisy(rng, []float64{0}, 80, 0.1), 0.2, nil); ok {
		t.Error("BreachRecovery on flat noise")
	}
	// Flat noise: false splits are rare with the default penalty.
	false_ := 0
	for seed := uint64(0); seed < 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 1))
		if len(ChangePoints(noisy(r, []float64{7.5}, 120, 0.1), nil)) > 0 {
			false_++
		}
	}
	if false_ > 10 {
		t.Errorf("%d of 200 flat series split", false_)
	}
	// Short and constant series.
	if cps := ChangePoints([]float64{1, 2}, nil); len(cps) != 0 {
		t.Errorf("short series: %v", cps)
	}
	if cps := ChangePoints(make([]float64, 50), nil); len(cps) != 0 {
		t.Errorf("constant series: %v", cps)
	}
}

// TestChangePointsExact compares PELT with exhaustive optimal partitioning
// (the same penalized cost, no pruning) on small series.
func TestChangePointsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 13))
	for iter := 0; iter < 50; iter++ {
		s := noisy(rng, []float64{0, rng.NormFloat64(), rng.NormFloat64()}, 6+rng.IntN(6), 0.3)
		opts := &ChangePointOptions{Sigma: 0.3, Penalty: 4, MinSegment: 2}
		got := ChangePoints(s, opts)
		want := optimalPartition(s, 0.3, 4, 2)
		if len(got) != len(want) {
			t.Fatalf("iter %d: PELT %v, exhaustive %v", iter, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("iter %d: PELT %v, exhaustive %v", iter, got, want)
			}
		}
	}
}

func optimalPartition(s []float64, sigma, pen float64, minSeg int) []int {
	n := len(s)
	cost := func(a, b int) float64 {
		var m float64
		for _, v := range s[a:b] {
			m += v
		}
		m /= float64(b - a)
		var c float64
		for _, v := range s[a:b] {
			c += (v - m) * (v - m)
		}
		return c / (sigma * sigma)
	}
	f := make([]float64, n+1)
	last := make([]int, n+1)
	for t := 1; t <= n; t++ {
		f[t] = math.Inf(1)
		for tau := 0; tau <= t-minSeg; tau++ {
			if tau != 0 && tau < minSeg {
				continue
			}
			base := -pen
			if tau > 0 {
				base = f[tau]
			}
			if v := base + cost(tau, t) + pen; v < f[t] {
				f[t], last[t] = v, tau
			}
		}
	}
	var cps []int
	for t := last[n]; t > 0; t = last[t] {
		cps = append(cps, t)
	}
	sort.Ints(cps)
	return cps
}
