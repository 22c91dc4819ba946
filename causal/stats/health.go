package stats

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mathext"
)

// EntityCounts are the tail counts of one entity (engine, GPU, host) in the
// window: Tail of N requests had latency above the tail threshold.
type EntityCounts struct {
	Key  string
	Tail float64
	N    float64
}

// BetaPrior is a Beta(Alpha, Beta) distribution of per-entity tail rates.
type BetaPrior struct {
	Alpha, Beta float64
	// Method says how it was obtained: "mle" (marginal likelihood),
	// "moments", "homogeneous" (no overdispersion among peers: concentration
	// capped) or "fallback" (too few informative peers).
	Method string
}

// Mean is α/(α+β).
func (b BetaPrior) Mean() float64 { return b.Alpha / (b.Alpha + b.Beta) }

// Variance is αβ/((α+β)²(α+β+1)).
func (b BetaPrior) Variance() float64 {
	s := b.Alpha + b.Beta
	return b.Alpha * b.Beta / (s * s * (s + 1))
}

// CDF is P(p ≤ x), the regularized incomplete beta I_x(α, β).
func (b BetaPrior) CDF(x float64) float64 {
	switch {
	case x <= 0:
		return 0
	case x >= 1:
		return 1
	}
	return mathext.RegIncBeta(b.Alpha, b.Beta, x)
}

// Quantile is the inverse of CDF.
func (b BetaPrior) Quantile(p float64) float64 { return mathext.InvRegIncBeta(b.Alpha, b.Beta, p) }

// Posterior is the conjugate update Beta(α + k, β + n − k).
func (b BetaPrior) Posterior(tail, n float64) BetaPrior {
	return BetaPrior{Alpha: b.Alpha + tail, Beta: b.Beta + n - tail, Method: b.Method}
}

// HealthOptions tunes Health and FitBetaPrior. A nil *HealthOptions means
// defaults.
type HealthOptions struct {
	// Quantile of the peer prior that bounds "healthy" tail rates; zero
	// means 0.9.
	Quantile float64
	// IncludeSelf fits one prior from all entities, the scored one
	// included. By default each entity is scored against a prior fitted
	// from the others (leave-one-out), so a sick entity does not widen its
	// own yardstick.
	IncludeSelf bool
	// MinCV is the smallest spread of tail rates among healthy peers the
	// prior may claim, as a coefficient of variation (sd/mean); zero means
	// 0.25. Peers that look homogeneous push the fitted concentration α+β to
	// infinity, and such a prior would outweigh any entity's own data
	// (over-shrinkage: a sick GPU would still score like its peers). The cap
	// is s ≤ (1−μ)/(μ·MinCV²) − 1.
	MinCV float64
}

func (o *HealthOptions) withDefaults() HealthOptions {
	var d HealthOptions
	if o != nil {
		d = *o
	}
	if d.Quantile == 0 {
		d.Quantile = 0.9
	}
	if d.MinCV == 0 {
		d.MinCV = 0.25
	}
	return d
}

// HealthScore is the health of one entity.
type HealthScore struct {
	Key       string
	Prior     BetaPrior // fitted from the peers
	Posterior BetaPrior // Prior updated with the entity's counts
	Threshold float64   // the prior's Quantile-quantile of tail rates
	// Health is P(p_e ≤ Threshold | k_e, n_e) under Posterior: the posterior
	// probability that the entity's tail rate is no worse than that of a
	// healthy peer (one at the prior's 90th percentile by default). An
	// entity with little data scores near the quantile (0.9): no evidence
	// either way.
	Health float64
}

// Health scores each entity against its peers with a hierarchical
// Beta-Binomial model (empirical Bayes): tail counts k_e ~ Binomial(n_e,
// p_e), p_e ~ Beta(α, β), with (α, β) fitted from the peer entities by
// FitBetaPrior. The result is in the order of counts.
func Health(counts []EntityCounts, opts *HealthOptions) ([]HealthScore, error) {
	o := opts.withDefaults()
	if !(o.Quantile > 0 && o.Quantile < 1) {
		return nil, fmt.Errorf("health: quantile %v outside (0,1)", o.Quantile)
	}
	if !(o.MinCV > 0) || math.IsInf(o.MinCV, 0) {
		return nil, fmt.Errorf("health: MinCV %v must be finite and > 0", o.MinCV)
	}
	for _, c := range counts {
		if !(c.N >= 0) || !(c.Tail >= 0) || c.Tail > c.N || math.IsInf(c.N, 0) {
			return nil, fmt.Errorf("health: entity %q: %v tail of %v requests", c.Key, c.Tail, c.N)
		}
	}
	var shared BetaPrior
	if o.IncludeSelf {
		var err error
		if shared, err = FitBetaPrior(counts, &o); err != nil {
			return nil, err
		}
	}
	out := make([]HealthScore, len(counts))
	peers := make([]EntityCounts, 0, len(counts))
	for i, c := range counts {
		prior := shared
		if !o.IncludeSelf {
			peers = append(peers[:0], counts[:i]...)
			peers = append(peers, counts[i+1:]...)
			var err error
			if prior, err = FitBetaPrior(peers, &o); err != nil {
				return nil, fmt.Errorf("health: entity %q: %w", c.Key, err)
			}
		}
		post := prior.Posterior(c.Tail, c.N)
		thr := prior.Quantile(o.Quantile)
		out[i] = HealthScore{Key: c.Key, Prior: prior, Posterior: post, Threshold: thr, Health: post.CDF(thr)}
	}
	return out, nil
}

// FitBetaPrior fits the Beta prior of tail rates from peer counts by
// maximizing the Beta-Binomial marginal likelihood
//
//	Σ_e log B(k_e + α, n_e − k_e + β) − log B(α, β)
//
// over (logit μ, log s), μ = α/(α+β), s = α+β ≤ (1−μ)/(μ·MinCV²) − 1, started at
// the method-of-moments estimate (a deterministic Nelder–Mead). When the
// peers show less spread than MinCV the concentration sits at its cap
// ("homogeneous"); when the optimizer fails the moments estimate is used.
// With fewer than two peers with requests, or no peer tail at all (or all
// tail), the prior is the weak fallback Beta(2μ₀, 2(1−μ₀)) with
// μ₀ = (Σk + ½)/(Σn + 1).
func FitBetaPrior(peers []EntityCounts, opts *HealthOptions) (BetaPrior, error) {
	o := opts.withDefaults()
	var sk, sn float64
	var used []EntityCounts
	for _, c := range peers {
		if c.N > 0 {
			used = append(used, c)
			sk += c.Tail
			sn += c.N
		}
	}
	if len(used) < 2 || sk == 0 || sk == sn {
		mu := (sk + 0.5) / (sn + 1)
		return BetaPrior{Alpha: 2 * mu, Beta: 2 * (1 - mu), Method: "fallback"}, nil
	}
	maxS := func(mu float64) float64 { return math.Max((1-mu)/(mu*o.MinCV*o.MinCV)-1, 1e-3) }
	mom := MomentsPrior(used, maxS)
	nll := func(x []float64) float64 {
		mu := 1 / (1 + math.Exp(-x[0]))
		s := math.Min(math.Exp(x[1]), maxS(mu))
		a, b := mu*s, (1-mu)*s
		if !(a > 0) || !(b > 0) {
			return math.Inf(1)
		}
		lb := mathext.Lbeta(a, b)
		var ll float64
		for _, c := range used {
			ll += mathext.Lbeta(c.Tail+a, c.N-c.Tail+b) - lb
		}
		return -ll
	}
	s0 := mom.Alpha + mom.Beta
	mu0 := mom.Mean()
	x0 := []float64{math.Log(mu0 / (1 - mu0)), math.Log(s0)}
	x, f := nelderMead2(nll, x0, 0.5, 1e-10, 2000)
	if !finite(f) || f > nll(x0) {
		return mom, nil
	}
	mu := 1 / (1 + math.Exp(-x[0]))
	s := math.Min(math.Exp(x[1]), maxS(mu))
	method := "mle"
	if s >= maxS(mu)*0.999 {
		method = "homogeneous"
	}
	p := BetaPrior{Alpha: mu * s, Beta: (1 - mu) * s, Method: method}
	if !finite(p.Alpha) || !finite(p.Beta) || p.Alpha <= 0 || p.Beta <= 0 {
		return BetaPrior{}, errors.New("fit beta prior: non-finite estimate")
	}
	return p, nil
}

// MomentsPrior is the method-of-moments Beta fit of the rates r_e = k_e/n_e:
// mean m and variance v across entities, minus the binomial sampling part
// m(1−m)·mean(1/n_e), give the between-entity variance τ², and
// s = m(1−m)/τ² − 1, capped by maxS(m); no overdispersion (τ² ≤ 0) means
// the cap. used holds two or more entities, each with N > 0 (FitBetaPrior
// starts from it; the sweep scores stretches of peers with it directly).
func MomentsPrior(used []EntityCounts, maxS func(mu float64) float64) BetaPrior {
	var m, invN float64
	for _, c := range used {
		m += c.Tail / c.N
		invN += 1 / c.N
	}
	k := float64(len(used))
	m /= k
	invN /= k
	var v float64
	for _, c := range used {
		d := c.Tail/c.N - m
		v += d * d
	}
	v /= k - 1
	tau2 := v - m*(1-m)*invN
	if m <= 0 || m >= 1 {
		m = -1 // degenerate, see below
	}
	s := 0.0
	method := "homogeneous"
	if m > 0 {
		s = maxS(m)
		if tau2 > 0 && m*(1-m)/tau2-1 < s {
			s = m*(1-m)/tau2 - 1
			method = "moments"
		}
	}
	if !(s > 0) || m <= 0 || m >= 1 {
		// Degenerate rates: pool them.
		var sk, sn float64
		for _, c := range used {
			sk += c.Tail
			sn += c.N
		}
		m = (sk + 0.5) / (sn + 1)
		s = 2
		method = "fallback"
	}
	return BetaPrior{Alpha: m * s, Beta: (1 - m) * s, Method: method}
}

// nelderMead2 minimizes f over R² with the Nelder–Mead simplex (standard
// coefficients 1, 2, ½, ½) from x0 with initial step, until the simplex's
// function values differ by less than ftol or maxEval evaluations. (gonum's
// optimize package would pull a dependency outside go.sum for two
// parameters.)
func nelderMead2(f func([]float64) float64, x0 []float64, step, ftol float64, maxEval int) ([]float64, float64) {
	type pt struct {
		x [2]float64
		f float64
	}
	eval := func(x [2]float64) pt { return pt{x, f(x[:])} }
	s := [3]pt{
		eval([2]float64{x0[0], x0[1]}),
		eval([2]float64{x0[0] + step, x0[1]}),
		eval([2]float64{x0[0], x0[1] + step}),
	}
	n := 3
	comb := func(a [2]float64, t float64, b [2]float64) [2]float64 {
		return [2]float64{a[0] + t*(b[0]-a[0]), a[1] + t*(b[1]-a[1])}
	}
	for n < maxEval {
		// Order best, middle, worst (NaN counts as worst).
		less := func(a, b pt) bool { return a.f < b.f || math.IsNaN(b.f) && !math.IsNaN(a.f) }
		for i := 1; i < 3; i++ {
			for j := i; j > 0 && less(s[j], s[j-1]); j-- {
				s[j], s[j-1] = s[j-1], s[j]
			}
		}
		if math.Abs(s[2].f-s[0].f) <= ftol*(math.Abs(s[0].f)+ftol) {
			break
		}
		c := comb(s[0].x, 0.5, s[1].x) // centroid of the best two
		r := eval(comb(c, -1, s[2].x))
		n++
		switch {
		case r.f < s[0].f:
			e := eval(comb(c, -2, s[2].x))
			n++
			if e.f < r.f {
				s[2] = e
			} else {
				s[2] = r
			}
		case r.f < s[1].f:
			s[2] = r
		default:
			var k pt
			if r.f < s[2].f {
				k = eval(comb(c, -0.5, s[2].x)) // outside contraction
			} else {
				k = eval(comb(c, 0.5, s[2].x)) // inside contraction
			}
			n++
			if k.f < math.Min(r.f, s[2].f) {
				s[2] = k
				continue
			}
			for i := 1; i < 3; i++ { // shrink towards the best
				s[i] = eval(comb(s[0].x, 0.5, s[i].x))
				n++
			}
		}
	}
	best := s[0]
	for _, p := range s[1:] {
		if p.f < best.f {
			best = p
		}
	}
	return []float64{best.x[0], best.x[1]}, best.f
}
