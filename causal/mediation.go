package causal

import (
	"fmt"
	"math"

	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/causal/sqlgen"
	cstats "github.com/tailcause/tailcause/causal/stats" // the fits name their sufficient statistics "stats"
	"github.com/tailcause/tailcause/schemas"
)

// MediatedShare is how much of a downstream culprit's exposure shift its
// upstream culprit must explain for the upstream one to rank first when its
// attributable fraction alone is too small (orderByMechanism).
const MediatedShare = 0.5

// mediates reports whether the shift of a downstream culprit's treatment
// from the baseline to the window is mostly the upstream culprit's doing:
// the treatment of down regressed on the treatment of up, with the window
// indicator and the engines' fixed effects, so that the slope is learnt
// from the variation within each period (not from the step both took at
// once); the slope times up's shift predicts at least MediatedShare of
// down's shift. It answers the question the attributable fractions cannot
// when the upstream measure is noisy (an engine's prompt mix from counter
// deltas) and its total effect is underestimated: did the prefix cache
// miss more because the prompts grew, or on its own? Rows are those of the
// culprits' entity (the scope when both act on it). False without a
// baseline or when either is not a measured node; results are memoized.
func (r *run) mediates(upNode, downNode string, up, down Culprit) bool {
	if r.base == nil {
		return false
	}
	key := upNode + "\x00" + EntityString(up.Entity) + "\x00" + downNode + "\x00" + EntityString(down.Entity)
	if v, ok := r.mediated[key]; ok {
		return v
	}
	v, mWin, mBase, err := r.mediatedShare(upNode, downNode, down.Entity)
	if err != nil {
		r.note("mediation %s → %s: %v", upNode, downNode, err)
	}
	// More work arriving raises what the engine does per second in
	// proportion (prompt tokens per second = requests per second × tokens
	// per request): the arrivals' share of the downstream rise, on the log
	// scale, where the slope within each period cannot see it.
	if rise := r.demandRise(up); err == nil && rise > 1 && mBase > 0 && mWin > mBase {
		v = math.Max(nanTo0(v), math.Log(rise)/math.Log(mWin/mBase))
	}
	// Longer prompts dilute the prefix cache's hit ratio, a ratio of
	// tokens: the engines' own counters say how much of its fall the
	// longer prompts make at the same cached tokens per request.
	if err == nil && up.Cause == schemas.CauseLongPrompts && down.Cause == schemas.CausePrefixMiss {
		d, derr := r.dilutedShare(down.Entity)
		if derr != nil {
			r.note("prefix-cache dilution: %v", derr)
		} else if !math.IsNaN(d) {
			v = math.Max(nanTo0(v), d)
		}
	}
	ok := err == nil && v >= MediatedShare
	if err == nil && !math.IsNaN(v) {
		on := EntityString(down.Entity)
		if on == "" {
			on = "the scope"
		}
		r.note("mediation: the shift of %s predicts %.0f%% of the shift of %s on %s", upNode, 100*v, downNode, on)
	}
	if r.mediated == nil {
		r.mediated = map[string]bool{}
	}
	r.mediated[key] = ok
	return ok
}

// demandRise is the DemandRise of the candidate behind culprit c (0 when
// none).
func (r *run) demandRise(c Culprit) float64 {
	for _, k := range r.all() {
		if k.cand.Culprit && k.cand.Cause == c.Cause && k.cand.Entity == c.Entity {
			return k.cand.DemandRise
		}
	}
	return 0
}

func nanTo0(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// mediatedShare is the share of down's treatment shift that up's shift
// predicts (mediates), NaN when down did not rise, and down's mean in the
// window and in the baseline.
func (r *run) mediatedShare(upNode, downNode string, e Entity) (share, mWin, mBase float64, err error) {
	share, mWin, mBase = math.NaN(), math.NaN(), math.NaN()
	upN, ok1 := r.a.dag.Node(upNode)
	downN, ok2 := r.a.dag.Node(downNode)
	engN, ok3 := r.a.dag.Node("engine")
	if !ok1 || !ok2 || !ok3 || upN.Expr == "" || downN.Expr == "" || upN.Categorical || downN.Categorical {
		return share, mWin, mBase, fmt.Errorf("not two measured nodes")
	}
	x, y := "toFloat64("+upN.Expr+")", "toFloat64("+downN.Expr+")"
	on := entityWhere(e)
	where := r.pooledWhere() + " AND isFinite(" + x + ") AND isFinite(" + y + ")" + on
	var factors []sqlgen.Factor
	if on == "" {
		// The whole scope: each engine's own level as a fixed effect (the
		// rows of one entity need none).
		fe, err := r.fixedEffects(engN)
		if err != nil {
			return share, mWin, mBase, err
		}
		factors = []sqlgen.Factor{fe}
	}
	w := r.inWin01()
	d := sqlgen.Design{
		Table: r.table(), Where: where,
		Regressors: []string{"1", x, w}, Names: []string{"intercept", upNode, "window"},
		Factors:  factors,
		Outcomes: []string{y},
		Sums:     []string{w, w + " * " + x, w + " * " + y, "1 - " + w, "(1 - " + w + ") * " + x, "(1 - " + w + ") * " + y},
	}
	groups, err := r.passSuffStats("mediation", d)
	if err != nil {
		return share, mWin, mBase, err
	}
	stats, sums, err := d.AssembleSuffStats(groups)
	if err != nil {
		return share, mWin, mBase, err
	}
	if stats[0].N <= float64(d.P())+10 || sums[0] == 0 || sums[3] == 0 {
		return share, mWin, mBase, fmt.Errorf("%v rows", stats[0].N)
	}
	f, err := cstats.FitOLS(stats[0], nil)
	if err != nil {
		return share, mWin, mBase, err
	}
	mWin, mBase = sums[2]/sums[0], sums[5]/sums[3]
	dx := sums[1]/sums[0] - sums[4]/sums[3]
	dy := mWin - mBase
	if !(dy > 0) {
		return share, mWin, mBase, nil
	}
	return f.Coef[1] * dx / dy, mWin, mBase, nil
}

// The engine_samples counters of the prefix cache (vllm:prefix_cache_hits
// and vllm:prefix_cache_queries, in tokens) and of finished requests
// (vllm:request_success), as enrich writes them (delta per scrape).
const (
	prefixHitsMetric    = "prefix_hits"
	prefixQueriesMetric = "prefix_queries"
	requestDoneMetric   = "request_success"
)

// dilutedShare is the share of the fall of the prefix-cache hit ratio on
// e (the scope when e names no engine or host) from the baseline to the
// window that longer prompts make on their own: the hit ratio is cached
// tokens over prompt tokens, so with the same cached tokens per finished
// request and more prompt tokens per request it falls by the prompts'
// growth alone. On the log scale, Δlog(hit ratio) = Δlog(hits per request)
// − Δlog(queries per request): the share is the queries' part, clipped to
// [0, 1] (hits per request that rose too leave it all to the prompts).
// A prefix cache that stops hitting loses cached tokens per request with
// the prompts unchanged: share 0. NaN when the ratio did not fall or the
// counters are missing. The table is read without FINAL: its sorting key
// has no pod, so FINAL would fold two pods of a model on one host scraped
// at the same instant into one, while a duplicate delivery counts in the
// hits, the queries and the requests alike.
func (r *run) dilutedShare(e Entity) (float64, error) {
	where := entityWhere(Entity{Host: e.Host, Pod: e.Pod, Engine: e.Engine})
	if m := r.req.SLO.Scope["model"]; m != "" {
		where += " AND model = " + dag.QuoteString(m)
	} else if where == "" {
		return math.NaN(), fmt.Errorf("no model or engine to read the counters of")
	}
	ivs := []Interval{r.win, *r.base}
	win, base := sampleInterval(r.win), sampleInterval(*r.base)
	q := fmt.Sprintf(`SELECT toFloat64(sumIf(delta, metric = %[1]s AND %[4]s)), toFloat64(sumIf(delta, metric = %[2]s AND %[4]s)), toFloat64(sumIf(delta, metric = %[3]s AND %[4]s)),
    toFloat64(sumIf(delta, metric = %[1]s AND %[5]s)), toFloat64(sumIf(delta, metric = %[2]s AND %[5]s)), toFloat64(sumIf(delta, metric = %[3]s AND %[5]s))
FROM %[6]s
WHERE metric IN (%[1]s, %[2]s, %[3]s) AND isFinite(delta) AND delta >= 0 AND (%[4]s OR %[5]s) AND %[7]s%[8]s`,
		dag.QuoteString(prefixHitsMetric), dag.QuoteString(prefixQueriesMetric), dag.QuoteString(requestDoneMetric),
		win, base, r.cfg.EngineSamplesTable, samplePrune(ivs...), where)
	v, err := r.floats("prefix-cache counters", q, 6)
	if err != nil {
		return math.NaN(), err
	}
	hw, qw, nw, hb, qb, nb := v[0], v[1], v[2], v[3], v[4], v[5]
	if !(hw > 0 && qw > 0 && nw > 0 && hb > 0 && qb > 0 && nb > 0) {
		return math.NaN(), nil
	}
	dlogH, dlogQ := math.Log((hw/nw)/(hb/nb)), math.Log((qw/nw)/(qb/nb))
	fall := dlogQ - dlogH // −Δlog(hit ratio)
	if !(fall > 0) {
		return math.NaN(), nil
	}
	share := math.Max(0, math.Min(1, dlogQ/fall))
	on := EntityString(e)
	if on == "" {
		on = "the scope"
	}
	r.note("prefix-cache dilution on %s: prompt tokens per request ×%.2f, cached tokens per request ×%.2f: the longer prompts make %.0f%% of the hit ratio's fall",
		on, math.Exp(dlogQ), math.Exp(dlogH), 100*share)
	return share, nil
}

// EvictedShare is how much of a prefix-miss culprit's shift may remain
// among the requests that found the KV cache with room for the misses to
// count as the KV culprit's evictions (evicts).
const EvictedShare = 0.5

// evicts reports whether a prefix-miss culprit's shift is the KV
// culprit's doing: a full cache evicts cached prefixes, so misses caused
// by KV pressure appear where the cache was full and not where it had
// room, while a prefix cache that stops hitting on its own misses
// everywhere. On the culprits' entity (the scope when both act on it), the
// miss ratio's shift from the baseline among the requests not exposed to
// the KV cause (KV below 0.9, no preemption) is compared with its shift
// among all: below EvictedShare of it — or nearly every window request
// exposed (fewer than 30 not), where nothing tells the two apart — the
// misses are evictions. False without a baseline; memoized.
func (r *run) evicts(kv, prefix Culprit) bool {
	if r.base == nil {
		return false
	}
	key := "evicts\x00" + EntityString(kv.Entity) + "\x00" + EntityString(prefix.Entity)
	if v, ok := r.mediated[key]; ok {
		return v
	}
	v, err := r.evictedShift(kv, prefix)
	if err != nil {
		r.note("evictions %s → %s: %v", kv.Cause, prefix.Cause, err)
	}
	if r.mediated == nil {
		r.mediated = map[string]bool{}
	}
	r.mediated[key] = err == nil && v
	return err == nil && v
}

func (r *run) evictedShift(kv, prefix Culprit) (bool, error) {
	var ex, miss string
	for _, c := range r.causes {
		switch {
		case c.cand.Cause == kv.Cause && c.cand.Skipped == "" && ex == "":
			ex = c.exposed
		case c.cand.Cause == prefix.Cause && c.cand.Skipped == "" && miss == "":
			miss = "toFloat64(" + c.node.Expr + ")"
		}
	}
	if ex == "" || miss == "" {
		return false, fmt.Errorf("no measured KV exposure or miss ratio")
	}
	where := r.pooledWhere() + " AND isFinite(" + miss + ")" + entityWhere(prefix.Entity)
	win, base := r.inWin(), inInterval(*r.base)
	q := fmt.Sprintf(`SELECT toFloat64(avgIf(%[1]s, %[2]s)), toFloat64(avgIf(%[1]s, %[3]s)), toFloat64(avgIf(%[1]s, %[2]s AND NOT %[4]s)), toFloat64(avgIf(%[1]s, %[3]s AND NOT %[4]s)),
    toFloat64(countIf(%[2]s)), toFloat64(countIf(%[2]s AND NOT %[4]s)), toFloat64(countIf(%[3]s AND NOT %[4]s))
FROM %[5]s WHERE %[6]s`, miss, win, base, ex, r.table(), where)
	row, err := r.floats("evictions", q, 7)
	if err != nil {
		return false, err
	}
	w, b, wRoom, bRoom, nWin, nWinRoom, nBaseRoom := row[0], row[1], row[2], row[3], row[4], row[5], row[6]
	shift := w - b
	if !(shift > 0) || nWin == 0 {
		return false, nil
	}
	on := EntityString(prefix.Entity)
	if on == "" {
		on = "the scope"
	}
	if nWinRoom < 30 || nBaseRoom < 30 {
		r.note("evictions: %.0f of %.0f window requests on %s found the KV cache with room: the prefix misses cannot be told from evictions", nWinRoom, nWin, on)
		return nWinRoom < 0.2*nWin, nil
	}
	share := (wRoom - bRoom) / shift
	r.note("evictions: the miss ratio on %s rose %.3g overall and %.3g where the KV cache had room (%.0f%%)", on, shift, wRoom-bRoom, 100*share)
	return share < EvictedShare, nil
}

// entityWhere is the condition (" AND …") selecting a culprit entity's
// rows: its GPU, its engine, or its host; "" for the whole scope.
func entityWhere(e Entity) string {
	switch {
	case e.GPU != "":
		return " AND gpu = " + dag.QuoteString(e.GPU)
	case e.Pod != "" || e.Engine != "":
		return " AND host = " + dag.QuoteString(e.Host) + " AND pod = " + dag.QuoteString(e.Pod) + " AND engine = " + dag.QuoteString(e.Engine)
	case e.Host != "":
		return " AND host = " + dag.QuoteString(e.Host)
	}
	return ""
}
