package stats

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Z95 is the standard normal 97.5% quantile used for 95% intervals.
const Z95 = 1.959963984540054

// Effect is one regression coefficient with its standard error.
type Effect struct {
	Beta float64
	SE   float64
}

// CI returns Beta ± z·SE; z = 0 means Z95.
func (e Effect) CI(z float64) [2]float64 {
	if z == 0 {
		z = Z95
	}
	return [2]float64{e.Beta - z*e.SE, e.Beta + z*e.SE}
}

// TreatmentEffect returns coefficient j of f with its HC3 standard error
// (MacKinnon–White; the estimator the culprits name, "backdoor-ols-hc3").
func TreatmentEffect(f *OLS, m *Meats, j int) (Effect, error) {
	se, err := f.CoefSE(HC3, m, j)
	if err != nil {
		return Effect{}, fmt.Errorf("treatment effect: %w", err)
	}
	return Effect{Beta: f.Coef[j], SE: se}, nil
}

// EffectMS converts a log-latency coefficient into milliseconds for the
// affected requests:
//
//	effect_ms = (exp(β·Δ) − 1) · refMS
//
// where Δ is the treatment change of a typical affected request (1 for an
// exposure indicator) and refMS is the typical (tail) latency of the
// affected requests had the cause been absent. The 95% interval maps the
// interval of β through the same monotone function. When the caller knows
// the observed latency L of the affected requests instead, refMS is
// L·exp(−β·Δ), and effect_ms = L·(1 − exp(−β·Δ)): see EstimateCause.
func EffectMS(logEffect Effect, delta, refMS float64) (ms float64, ci [2]float64) {
	f := func(b float64) float64 { return math.Expm1(b*delta) * refMS }
	ci95 := logEffect.CI(0)
	lo, hi := f(ci95[0]), f(ci95[1])
	if lo > hi {
		lo, hi = hi, lo
	}
	return f(logEffect.Beta), [2]float64{lo, hi}
}

// Fraction is a share in [0, 1] with a 95% interval.
type Fraction struct {
	Value float64
	CI    [2]float64
}

// AttributableFraction is the share of the window's tail requests explained
// by the cause, from the linear-probability model of the tail indicator:
//
//	AF = β_lpm · meanDelta / tailRate
//
// β_lpm is the adjusted increase in P(tail) per unit of treatment, meanDelta
// the mean over all n window rows of Δ_i (the exposed share for an exposure
// indicator), tailRate the window's tail share. The interval is the delta
// method over β_lpm and the binomial tailRate (treated as independent), and
// value and interval are clipped to [0, 1]. Degenerate inputs (tailRate ≤ 0,
// n ≤ 0) give a zero fraction.
func AttributableFraction(lpm Effect, meanDelta, tailRate, n float64) Fraction {
	if !(tailRate > 0) || !(n > 0) || !finite(lpm.Beta) || !finite(meanDelta) {
		return Fraction{}
	}
	af := lpm.Beta * meanDelta / tailRate
	dBeta := meanDelta / tailRate
	dRate := -af / tailRate
	varRate := tailRate * (1 - tailRate) / n
	se := math.Sqrt(dBeta*dBeta*lpm.SE*lpm.SE + dRate*dRate*varRate)
	return Fraction{
		Value: clip01(af),
		CI:    [2]float64{clip01(af - Z95*se), clip01(af + Z95*se)},
	}
}

func clip01(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return math.Min(1, math.Max(0, v))
}

// LatencyDelta is one request of the window: its observed latency and Δ_i,
// how far its cause sits above normal (Node.Delta renders it as SQL).
type LatencyDelta struct {
	LatencyMS float64
	Delta     float64
}

// ErrTooFewRows is returned when the rows given cannot determine a quantile.
var ErrTooFewRows = errors.New("too few rows")

// CounterfactualQuantile is the q-quantile of the window's latency under
// do(cause = normal), defined with the log-latency model
// log L_i = … + β·x_i + ε_i as the abduction–action–prediction
// counterfactual that keeps each request's own residual ε_i:
//
//	L_i^cf = L_i · exp(−β·Δ_i)
//
// (unchanged when Δ_i = 0), and the result is the type-1 empirical quantile
// of {L_i^cf}: the ⌈q·n⌉-th smallest value (the same definition as
// Quantile).
//
// rows may be the whole window (len(rows) = n) or only its slowest part: the
// rows whose latency is at least some cut, with n the window's row count.
// Rows left out are assumed faster than every row given, and with β·Δ ≥ 0
// they stay faster; a quantile that falls among them returns ErrTooFewRows
// (fetch more rows). β < 0 (the "cause" speeds requests up) is applied as
// is; then rows must be the whole window.
func CounterfactualQuantile(rows []LatencyDelta, n int, beta, q float64) (float64, error) {
	if n < 1 || len(rows) > n || !(q > 0 && q <= 1) {
		return 0, fmt.Errorf("counterfactual quantile: n=%d rows=%d q=%v", n, len(rows), q)
	}
	if beta < 0 && len(rows) != n {
		return 0, fmt.Errorf("counterfactual quantile: β < 0 needs the whole window: %w", ErrTooFewRows)
	}
	cf := make([]float64, len(rows))
	for i, r := range rows {
		cf[i] = r.LatencyMS * math.Exp(-beta*r.Delta)
	}
	sort.Float64s(cf)
	k := QuantileRank(q, n) // 1-based rank in the full window
	missing := n - len(rows)
	if k <= missing {
		return 0, fmt.Errorf("counterfactual quantile: rank %d of %d falls among the %d rows not given: %w", k, n, missing, ErrTooFewRows)
	}
	return cf[k-missing-1], nil
}

// QuantileRank is the 1-based rank ⌈q·n⌉ of the type-1 q-quantile, in [1, n].
func QuantileRank(q float64, n int) int {
	k := int(math.Ceil(q*float64(n) - 1e-9))
	if k < 1 {
		k = 1
	}
	if k > n {
		k = n
	}
	return k
}

// Quantile returns the type-1 (inverse empirical CDF) q-quantile of sorted
// values: the ⌈q·n⌉-th smallest. It panics on an empty or unsorted input
// (programmer error), like gonum's stat.Quantile.
func Quantile(q float64, sorted []float64) float64 {
	if len(sorted) == 0 || !(q >= 0 && q <= 1) {
		panic(fmt.Sprintf("causal: Quantile(%v) of %d values", q, len(sorted)))
	}
	if !sort.Float64sAreSorted(sorted) {
		panic("causal: Quantile: values not sorted")
	}
	return sorted[QuantileRank(q, len(sorted))-1]
}

// CauseInput gathers the aggregated inputs of one candidate cause.
type CauseInput struct {
	// LPM is the fit of the tail indicator (latency > threshold) on the
	// treatment and the backdoor set; Log the fit of log latency on the same
	// regressors. Treatment is the treatment's column in both.
	LPM, Log           *OLS
	LPMMeats, LogMeats *Meats
	Treatment          int

	// Delta is Δ for a typical affected request (1 for an exposure
	// indicator). MeanDelta is the mean of Δ_i over the N window rows (the
	// exposed share for an indicator). TailRate is the window's tail share.
	Delta, MeanDelta, TailRate, N float64

	// AffectedMS is the observed typical tail latency of the affected
	// requests (e.g. the P99 of the exposed rows in the window).
	AffectedMS float64

	// Rows and RowsTotal feed CounterfactualQuantile (see there); Quantile
	// is the SLO quantile, e.g. 0.99.
	Rows      []LatencyDelta
	RowsTotal int
	Quantile  float64
}

// CauseEstimate is what the estimators say about one cause.
type CauseEstimate struct {
	LPM, Log Effect

	EffectMS   float64    // see EffectMS; reference = AffectedMS·exp(−β·Δ)
	EffectCI   [2]float64 // 95%
	Attributed Fraction   // see AttributableFraction

	// CounterfactualMS is CounterfactualQuantile at max(β_log, 0) and
	// CounterfactualCI the same at the ends of β_log's 95% interval, each
	// clipped at 0: removing a cause is never credited with making the tail
	// worse (a negative β means "not a culprit", and the ranking drops it).
	CounterfactualMS float64
	CounterfactualCI [2]float64
}

// EstimateCause runs the estimators of one candidate cause: HC3 effects of
// both models, effect_ms, the attributable fraction and the counterfactual
// quantile with their intervals.
func EstimateCause(in CauseInput) (CauseEstimate, error) {
	var out CauseEstimate
	if in.LPM == nil || in.Log == nil {
		return out, errors.New("estimate cause: both fits are required")
	}
	var err error
	if out.LPM, err = TreatmentEffect(in.LPM, in.LPMMeats, in.Treatment); err != nil {
		return out, fmt.Errorf("estimate cause: tail model: %w", err)
	}
	if out.Log, err = TreatmentEffect(in.Log, in.LogMeats, in.Treatment); err != nil {
		return out, fmt.Errorf("estimate cause: log model: %w", err)
	}
	ref := in.AffectedMS * math.Exp(-out.Log.Beta*in.Delta)
	out.EffectMS, out.EffectCI = EffectMS(out.Log, in.Delta, ref)
	out.Attributed = AttributableFraction(out.LPM, in.MeanDelta, in.TailRate, in.N)
	if in.Rows != nil {
		q := in.Quantile
		if q == 0 {
			q = 0.99
		}
		if out.CounterfactualMS, err = CounterfactualQuantile(in.Rows, in.RowsTotal, math.Max(out.Log.Beta, 0), q); err != nil {
			return out, fmt.Errorf("estimate cause: %w", err)
		}
		ci := out.Log.CI(0)
		hi, err1 := CounterfactualQuantile(in.Rows, in.RowsTotal, math.Max(ci[0], 0), q)
		lo, err2 := CounterfactualQuantile(in.Rows, in.RowsTotal, math.Max(ci[1], 0), q)
		if err := errors.Join(err1, err2); err != nil {
			return out, fmt.Errorf("estimate cause: counterfactual interval: %w", err)
		}
		out.CounterfactualCI = [2]float64{lo, hi}
	}
	return out, nil
}
