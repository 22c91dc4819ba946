package stats

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"gonum.org/v1/gonum/stat/distuv"
)

// QuantileCI is a sample quantile with a distribution-free confidence
// interval from order statistics.
type QuantileCI struct {
	Q, Level float64
	N        int
	Estimate float64 // type-1 quantile: the ⌈q·n⌉-th smallest value
	Lower    float64 // the LowerRank-th smallest value
	Upper    float64 // the UpperRank-th smallest value
	// Ranks (1-based, ascending) of the interval's order statistics.
	EstimateRank, LowerRank, UpperRank int
}

// QuantileRanks returns the 1-based ranks l ≤ u of the equal-tailed
// distribution-free confidence interval [X_(l), X_(u)] for the q-quantile of
// a continuous distribution from n i.i.d. values: with B ~ Binomial(n, q),
// l is the largest rank with P(B ≤ l−1) ≤ (1−level)/2 and u the smallest
// with P(B ≤ u−1) ≥ 1 − (1−level)/2, so that each tail misses with
// probability at most (1−level)/2 and the coverage is at least level. The
// error wraps ErrTooFewRows when n < MinSampleSize(q, level) (no order
// statistic is a valid upper bound).
func QuantileRanks(n int, q, level float64) (l, u int, err error) {
	if !(q > 0 && q < 1) || !(level > 0 && level < 1) || n < 1 {
		return 0, 0, fmt.Errorf("quantile ranks: n=%d q=%v level=%v", n, q, level)
	}
	a := (1 - level) / 2
	bin := distuv.Binomial{N: float64(n), P: q}
	cdf := func(k int) float64 { // P(B ≤ k)
		if k < 0 {
			return 0
		}
		return bin.CDF(float64(k))
	}
	// u: smallest u in [1, n] with cdf(u-1) ≥ 1-a.
	u = sort.Search(n, func(i int) bool { return cdf(i) >= 1-a }) + 1
	if u > n {
		return 0, 0, fmt.Errorf("quantile ranks: %d values cannot bound the %v-quantile at %v (need %d): %w", n, q, level, MinSampleSize(q, level), ErrTooFewRows)
	}
	// l: largest l in [1, n] with cdf(l-1) ≤ a.
	l = sort.Search(n+1, func(i int) bool { return cdf(i) > a }) // first i with cdf(i) > a
	if l < 1 {
		return 0, 0, fmt.Errorf("quantile ranks: %d values cannot bound the %v-quantile from below at %v: %w", n, q, level, ErrTooFewRows)
	}
	return l, u, nil
}

// MinSampleSize is the smallest n for which QuantileRanks finds an upper
// bound: q^n ≤ (1−level)/2 (367 for the P99 at 95%).
func MinSampleSize(q, level float64) int {
	return int(math.Ceil(math.Log((1-level)/2)/math.Log(q) - 1e-9))
}

// QuantileInterval computes the q-quantile of sample and its interval
// (QuantileRanks). sample is not modified.
func QuantileInterval(sample []float64, q, level float64) (QuantileCI, error) {
	s := append([]float64(nil), sample...)
	sort.Float64s(s)
	// The slowest values, descending, are all QuantileIntervalTop needs.
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
	return QuantileIntervalTop(len(s), s, q, level)
}

// QuantileIntervalTop is QuantileInterval from the slowest values only:
// topDesc holds the largest values of a window of n, in descending order
// (e.g. ORDER BY e2e_ms DESC LIMIT k). It needs the n−LowerRank+1 largest
// values; with fewer the error wraps ErrTooFewRows.
func QuantileIntervalTop(n int, topDesc []float64, q, level float64) (QuantileCI, error) {
	if len(topDesc) > n {
		return QuantileCI{}, fmt.Errorf("quantile interval: %d values for a window of %d", len(topDesc), n)
	}
	for i := 1; i < len(topDesc); i++ {
		if topDesc[i] > topDesc[i-1] || math.IsNaN(topDesc[i]) {
			return QuantileCI{}, errors.New("quantile interval: values not in descending order")
		}
	}
	l, u, err := QuantileRanks(n, q, level)
	if err != nil {
		return QuantileCI{}, err
	}
	at := func(rank int) (float64, bool) { // rank-th smallest
		i := n - rank
		if i >= len(topDesc) {
			return 0, false
		}
		return topDesc[i], true
	}
	k := QuantileRank(q, n)
	lo, ok := at(l)
	if !ok {
		return QuantileCI{}, fmt.Errorf("quantile interval: need the %d slowest values, have %d: %w", n-l+1, len(topDesc), ErrTooFewRows)
	}
	est, _ := at(k)
	hi, _ := at(u)
	return QuantileCI{Q: q, Level: level, N: n, Estimate: est, Lower: lo, Upper: hi, EstimateRank: k, LowerRank: l, UpperRank: u}, nil
}

// BreachConfig tunes DetectBreach. A nil *BreachConfig means defaults.
type BreachConfig struct {
	// ThresholdMS is the SLO threshold of the quantile; 0 means no SLO
	// (baseline comparison only).
	ThresholdMS float64
	// MinRelIncrease is the margin over the baseline: the window's estimate
	// must exceed the baseline's estimate·(1+MinRelIncrease), and its lower
	// bound the baseline's upper bound·(1+MinRelIncrease/2). Zero means
	// 0.2, a move larger than usual day-to-day drift of a P99; negative
	// means no margin.
	MinRelIncrease float64
}

// Breach is the verdict of DetectBreach.
type Breach struct {
	Breached bool
	// Reasons lists the rules that fired: "slo" (lower bound above the
	// threshold), "baseline" (lower bound above the baseline's upper
	// bound with the margin).
	Reasons []string
}

// DetectBreach decides whether the window's quantile is credibly bad: its
// lower confidence bound exceeds the SLO threshold, or it exceeds the upper
// bound of the baseline's quantile by MinRelIncrease/2 while the estimate
// exceeds the baseline's by MinRelIncrease. baseline may be nil (no
// earlier data: find one with BreachStart). Both intervals must come from
// QuantileInterval(Top), which enforces the minimum sample size.
func DetectBreach(window QuantileCI, baseline *QuantileCI, cfg *BreachConfig) Breach {
	var c BreachConfig
	if cfg != nil {
		c = *cfg
	}
	if c.MinRelIncrease == 0 {
		c.MinRelIncrease = 0.2
	}
	if c.MinRelIncrease < 0 {
		c.MinRelIncrease = 0
	}
	var b Breach
	if c.ThresholdMS > 0 && window.Lower > c.ThresholdMS {
		b.Reasons = append(b.Reasons, "slo")
	}
	// Significant (the window's lower bound above the baseline's upper
	// bound by half the margin: a P99's natural swings between windows
	// exceed its sampling interval) and material (the estimate up by the
	// margin). Asking the lower bound to clear the upper bound by the whole
	// margin would demand a rise of half again or more before a P99 counts
	// as broken.
	if baseline != nil && window.Lower > baseline.Upper*(1+c.MinRelIncrease/2) && window.Estimate > baseline.Estimate*(1+c.MinRelIncrease) {
		b.Reasons = append(b.Reasons, "baseline")
	}
	b.Breached = len(b.Reasons) > 0
	return b
}

// ChangePointOptions tunes ChangePoints. A nil *ChangePointOptions means
// defaults.
type ChangePointOptions struct {
	// Sigma is the noise standard deviation of the series; zero means a
	// robust estimate: MAD of first differences / (0.6745·√2).
	Sigma float64
	// Penalty is the cost of one more change point, in units of σ² of
	// squared error; zero means 3·ln(n) (MBIC-like: fewer false splits than
	// BIC's 2·ln(n), which matters because false splits become false
	// incidents).
	Penalty float64
	// MinSegment is the shortest segment, in points; zero means 3.
	MinSegment int
}

// ChangePoints segments series (e.g. per-minute log P99, or tail rate) into
// pieces of constant mean with PELT (Killick, Fearnhead and Eckley 2012),
// exact for the penalized Gaussian cost Σ(y − ȳ_segment)²/σ² + Penalty per
// change. It returns the indexes where new segments begin, ascending (empty
// when the series is one segment). Non-finite values are a programmer error
// (panic): filter them first.
func ChangePoints(series []float64, opts *ChangePointOptions) []int {
	var o ChangePointOptions
	if opts != nil {
		o = *opts
	}
	n := len(series)
	if o.MinSegment == 0 {
		o.MinSegment = 3
	}
	for _, v := range series {
		if !finite(v) {
			panic("causal: ChangePoints: non-finite value in series")
		}
	}
	if n < 2*o.MinSegment {
		return []int{}
	}
	if o.Sigma == 0 {
		o.Sigma = robustSigma(series)
	}
	if o.Penalty == 0 {
		o.Penalty = 3 * math.Log(float64(n))
	}
	if o.Sigma == 0 { // constant series
		return []int{}
	}
	s1 := make([]float64, n+1)
	s2 := make([]float64, n+1)
	for i, v := range series {
		s1[i+1] = s1[i] + v
		s2[i+1] = s2[i] + v*v
	}
	v2 := o.Sigma * o.Sigma
	cost := func(a, b int) float64 { // points a..b-1
		m := float64(b - a)
		d := s1[b] - s1[a]
		return math.Max(s2[b]-s2[a]-d*d/m, 0) / v2
	}
	f := make([]float64, n+1)
	last := make([]int, n+1)
	f[0] = -o.Penalty
	var cands []int
	for t := o.MinSegment; t <= n; t++ {
		cands = append(cands, t-o.MinSegment) // newest admissible start
		best, arg := math.Inf(1), -1
		vals := make([]float64, len(cands))
		for i, tau := range cands {
			if tau != 0 && tau < o.MinSegment {
				vals[i] = math.Inf(1)
				continue
			}
			vals[i] = f[tau] + cost(tau, t)
			if vals[i]+o.Penalty < best {
				best, arg = vals[i]+o.Penalty, tau
			}
		}
		f[t], last[t] = best, arg
		// Prune: τ can never be optimal later if F(τ)+C(τ,t) > F(t).
		kept := cands[:0]
		for i, tau := range cands {
			if tau != 0 && tau < o.MinSegment {
				continue // never a valid segment end
			}
			if !(vals[i] > f[t]) {
				kept = append(kept, tau)
			}
		}
		cands = kept
	}
	var cps []int
	for t := last[n]; t > 0; t = last[t] {
		cps = append(cps, t)
	}
	sort.Ints(cps)
	if cps == nil {
		cps = []int{}
	}
	return cps
}

func robustSigma(x []float64) float64 {
	if len(x) < 3 {
		return 0
	}
	d := make([]float64, len(x)-1)
	for i := range d {
		d[i] = x[i+1] - x[i]
	}
	med := Median(d)
	for i := range d {
		d[i] = math.Abs(d[i] - med)
	}
	return Median(d) / (0.6744897501960817 * math.Sqrt2)
}

// Median is the median of x, the mean of the middle two for an even count.
// x must not be empty or hold NaN; it is not modified.
func Median(x []float64) float64 {
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// BreachStart finds where a breach began in a series with no earlier
// baseline: the start of the first segment (ChangePoints) whose mean exceeds
// the first segment's mean by more than minShift (for a log-P99 series,
// ln 1.2 means 20% slower). The points before it are the healthy baseline.
// ok is false when no such segment exists (no change, or the series starts
// in the breach already).
func BreachStart(series []float64, minShift float64, opts *ChangePointOptions) (start int, ok bool) {
	start, _, ok = BreachStretch(series, minShift, opts)
	return start, ok
}

// BreachStretch is BreachStart with the breach's end: the first point of
// the first later segment back within minShift of the first segment's
// mean (the series recovered), or len(series) when it never did. A window
// narrowed to [start, end) is the breach alone, not diluted by the
// recovered time after it.
func BreachStretch(series []float64, minShift float64, opts *ChangePointOptions) (start, end int, ok bool) {
	bounds, means := segments(series, opts)
	for i := 1; i < len(means); i++ {
		if means[i] > means[0]+minShift {
			end = len(series)
			for j := i + 1; j < len(means); j++ {
				if means[j] <= means[0]+minShift {
					end = bounds[j]
					break
				}
			}
			return bounds[i], end, true
		}
	}
	return 0, 0, false
}

// segments cuts series at its ChangePoints: each segment's first point
// (bounds[0] = 0) and mean.
func segments(series []float64, opts *ChangePointOptions) (bounds []int, means []float64) {
	bounds = append([]int{0}, ChangePoints(series, opts)...)
	for i, a := range bounds {
		b := len(series)
		if i+1 < len(bounds) {
			b = bounds[i+1]
		}
		var s float64
		for _, v := range series[a:b] {
			s += v
		}
		means = append(means, s/float64(b-a))
	}
	return bounds, means
}

// BreachRecovery finds a breach that was already on when the series began
// and ended inside it (a fault from the first minutes of a window that
// then recovered, which BreachStart cannot see: its yardstick, the first
// segment, is the breach). With the segments of ChangePoints, when no
// later segment exceeds the first by minShift but the first exceeds the
// last by minShift, the breach runs until the first segment back within
// minShift of the last: end is that segment's first point, and the points
// from end on are the healthy baseline. ok is false otherwise.
func BreachRecovery(series []float64, minShift float64, opts *ChangePointOptions) (end int, ok bool) {
	bounds, means := segments(series, opts)
	if len(means) < 2 {
		return 0, false
	}
	first, last := means[0], means[len(means)-1]
	for _, m := range means[1:] {
		if m > first+minShift {
			return 0, false // a breach that begins later: BreachStart's
		}
	}
	if !(first > last+minShift) {
		return 0, false
	}
	for i := 1; i < len(means); i++ {
		if means[i] <= last+minShift {
			return bounds[i], true
		}
	}
	return 0, false
}
