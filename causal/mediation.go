package causal

import (
	"fmt"
	"math"
	"strings"

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
	// Longer prompts lower the prefix cache's hit ratio (tokens over
	// tokens) and raise the prompt tokens prefilled per second by their
	// growth alone: the engines' own counters say how much of each.
	if err == nil && up.Cause == schemas.CauseLongPrompts && (down.Cause == schemas.CausePrefixMiss || down.Cause == schemas.CausePrefillInterference) {
		ps, perr := r.promptShiftOn(down.Entity)
		switch {
		case perr != nil:
			r.note("prompt counters: %v", perr)
		case down.Cause == schemas.CausePrefixMiss:
			v = math.Max(nanTo0(v), nanTo0(ps.dilutedShare()))
		default:
			v = math.Max(nanTo0(v), nanTo0(ps.loadShare()))
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

// promptShift is how the prompt counters of an engine (or of the scope's
// engines) moved from the baseline to the window, each as window over
// baseline: prompt tokens per finished request, prompt tokens per second
// (the mean of the scrapes' rates, as engine_prompt_tps), and the prefix
// cache's cached and queried tokens per finished request. Zero where a
// counter is missing.
type promptShift struct {
	perRequest, perSecond, cached, queried float64
}

// dilutedShare is the share of the fall of the prefix-cache hit ratio that
// longer prompts make on their own: the hit ratio is cached tokens over
// queried (prompt) tokens, so with the same cached tokens per request and
// more prompt tokens per request it falls by the prompts' growth alone. On
// the log scale, Δlog(hit ratio) = Δlog(cached per request) − Δlog(queried
// per request): the share is the queried part, clipped to [0, 1] (cached
// tokens per request that rose too leave it all to the prompts). A prefix
// cache that stops hitting loses cached tokens per request with the
// prompts unchanged: share 0. NaN when the ratio did not fall or a counter
// is missing.
func (p promptShift) dilutedShare() float64 { return p.shareOfFall(p.queried) }

// grownShare is dilutedShare with the prompts' own growth: the prompt
// tokens per finished request (counted once per request, at its first
// token) in place of the queried tokens per request, which a preemption's
// recompute queries again. A full KV cache that evicts the cached prefixes
// and recomputes the preempted prompts queries more tokens per request
// and hits fewer, with prompts as long as before: share 0. NaN when the
// ratio did not fall, the prompts did not grow or a counter is missing.
func (p promptShift) grownShare() float64 {
	if !(p.perRequest > 1) {
		return math.NaN()
	}
	return p.shareOfFall(p.perRequest)
}

// shareOfFall is the part of the hit ratio's fall on the log scale that a
// growth of the tokens per request by grown makes, clipped to [0, 1]; NaN
// when the ratio did not fall or a counter is missing.
func (p promptShift) shareOfFall(grown float64) float64 {
	if !(p.cached > 0 && p.queried > 0 && grown > 0) {
		return math.NaN()
	}
	fall := math.Log(p.queried) - math.Log(p.cached)
	if !(fall > 0) {
		return math.NaN()
	}
	return math.Max(0, math.Min(1, math.Log(grown)/fall))
}

// loadShare is the share of the rise of the prompt tokens prefilled per
// second that longer prompts make: tokens per second = finished requests
// per second × tokens per request, so on the log scale the tokens per
// request's part of the rise, clipped to [0, 1]. NaN when the load did not
// rise or a counter is missing.
func (p promptShift) loadShare() float64 {
	if !(p.perRequest > 0 && p.perSecond > 1) {
		return math.NaN()
	}
	return math.Max(0, math.Min(1, math.Log(p.perRequest)/math.Log(p.perSecond)))
}

// The engine_samples counters of prompt tokens, of the prefix cache
// (vllm:prefix_cache_hits and vllm:prefix_cache_queries, in tokens) and of
// finished requests (vllm:request_success), as enrich writes them (delta
// and rate per scrape).
const (
	promptTokensMetric  = "prompt_tokens"
	prefixHitsMetric    = "prefix_hits"
	prefixQueriesMetric = "prefix_queries"
	requestDoneMetric   = "request_success"
)

// promptShiftOn reads the prompt counters' shift on e's engine (the
// scope's model when e names no engine or host); memoized. The table is
// read without FINAL: its sorting key has no pod, so FINAL would fold two
// pods of a model on one host scraped at the same instant into one, while
// a duplicate delivery counts in numerators and denominators alike.
func (r *run) promptShiftOn(e Entity) (promptShift, error) {
	on := Entity{Host: e.Host, Pod: e.Pod, Engine: e.Engine}
	key := EntityString(on)
	if p, ok := r.prompts[key]; ok {
		return p, nil
	}
	where := entityWhere(on)
	if m := r.req.SLO.Scope["model"]; m != "" {
		where += " AND model = " + dag.QuoteString(m)
	} else if where == "" {
		return promptShift{}, fmt.Errorf("no model or engine to read the counters of")
	}
	win, base := sampleInterval(r.win), sampleInterval(*r.base)
	sum := func(metric, period string) string {
		return fmt.Sprintf("toFloat64(sumIf(delta, metric = %s AND %s))", dag.QuoteString(metric), period)
	}
	rate := func(period string) string {
		return fmt.Sprintf("toFloat64(avgIf(rate_per_s, metric = %s AND isFinite(rate_per_s) AND %s))", dag.QuoteString(promptTokensMetric), period)
	}
	var cols []string
	for _, period := range []string{win, base} {
		cols = append(cols, sum(promptTokensMetric, period), sum(prefixHitsMetric, period), sum(prefixQueriesMetric, period), sum(requestDoneMetric, period), rate(period))
	}
	q := fmt.Sprintf(`SELECT %s
FROM %s
WHERE metric IN (%s, %s, %s, %s) AND isFinite(delta) AND delta >= 0 AND (%s OR %s) AND %s%s`,
		strings.Join(cols, ", "), r.cfg.EngineSamplesTable,
		dag.QuoteString(promptTokensMetric), dag.QuoteString(prefixHitsMetric), dag.QuoteString(prefixQueriesMetric), dag.QuoteString(requestDoneMetric),
		win, base, samplePrune(r.win, *r.base), where)
	v, err := r.floats("prompt counters", q, 10)
	if err != nil {
		return promptShift{}, err
	}
	ratio := func(w, b float64) float64 {
		if w > 0 && b > 0 && !math.IsInf(w/b, 0) {
			return w / b
		}
		return 0
	}
	pw, hw, qw, nw, sw := v[0], v[1], v[2], v[3], v[4]
	pb, hb, qb, nb, sb := v[5], v[6], v[7], v[8], v[9]
	var p promptShift
	if nw > 0 && nb > 0 {
		p.perRequest, p.cached, p.queried = ratio(pw/nw, pb/nb), ratio(hw/nw, hb/nb), ratio(qw/nw, qb/nb)
	}
	p.perSecond = ratio(sw, sb)
	where2 := EntityString(e)
	if where2 == "" {
		where2 = "the scope"
	}
	r.note("prompt counters on %s, window over baseline: prompt tokens per request ×%.2f, per second ×%.2f; cached tokens per request ×%.2f, queried ×%.2f",
		where2, p.perRequest, p.perSecond, p.cached, p.queried)
	if r.prompts == nil {
		r.prompts = map[string]promptShift{}
	}
	r.prompts[key] = p
	return p, nil
}

// EvictedShare is how much of a prefix-miss culprit's shift may remain
// among the requests that found the KV cache with room for the misses to
// count as the KV culprit's evictions (evicts).
const EvictedShare = 0.5

// KVRiseOverSharing is the margin by which the KV usage's rise must pass
// the most that lost prefix sharing can fill (1/(1 − hit ratio)) for the
// misses to be the KV culprit's evictions whatever the cache's room
// (evictedShift): load and prompt mix move usage too.
const KVRiseOverSharing = 2.0

// evicts reports whether a prefix-miss culprit's shift is the KV
// culprit's doing: a full cache evicts cached prefixes, so misses caused
// by KV pressure appear where the cache was full and not where it had
// room, while a prefix cache that stops hitting on its own misses
// everywhere. On the culprits' entity (the scope when both act on it), the
// miss ratio's shift from the baseline among the requests not exposed to
// the KV cause (KV below 0.9, no preemption) is compared with its shift
// among all: below EvictedShare of it — or nearly every window request
// exposed (fewer than 30 not), where nothing tells the two apart — the
// misses are evictions. Before that: a KV usage that rose far past what
// the lost sharing could fill means the cache lost room, and its misses
// are evictions wherever they fell (evictedShift). False without a
// baseline; memoized.
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
	var ex, miss, usage string
	for _, c := range r.causes {
		switch {
		case c.cand.Cause == kv.Cause && c.cand.Skipped == "" && ex == "":
			ex, usage = c.exposed, "toFloat64("+c.node.Expr+")"
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
    toFloat64(countIf(%[2]s)), toFloat64(countIf(%[2]s AND NOT %[4]s)), toFloat64(countIf(%[3]s AND NOT %[4]s)),
    toFloat64(avgIf(%[7]s, %[2]s AND isFinite(%[7]s))), toFloat64(avgIf(%[7]s, %[3]s AND isFinite(%[7]s)))
FROM %[5]s WHERE %[6]s`, miss, win, base, ex, r.table(), where, usage)
	row, err := r.floats("evictions", q, 9)
	if err != nil {
		return false, err
	}
	w, b, wRoom, bRoom, nWin, nWinRoom, nBaseRoom := row[0], row[1], row[2], row[3], row[4], row[5], row[6]
	uw, ub := row[7], row[8]
	shift := w - b
	if !(shift > 0) || nWin == 0 {
		return false, nil
	}
	on := EntityString(prefix.Entity)
	if on == "" {
		on = "the scope"
	}
	// Misses cannot fill the cache beyond what the lost sharing held: a
	// request that misses its prefix holds its own copy of blocks it would
	// have shared, so the referenced blocks grow at most by 1/(1 − h),
	// h the baseline's hit ratio. KV usage that rose far past that bound
	// was not filled by the misses: the cache lost room, and a cache with
	// less room keeps fewer evictable prefixes at any usage (vLLM's usage
	// counts referenced blocks only), so the misses where it "had room"
	// are evictions too (tuning seed 2495: a model's KV cache lost, usage
	// ×100, the miss ratio up 0.11 at usage below 0.5).
	if hb := 1 - b; hb >= 0 && hb < 1 && ub > 0 && uw/ub > KVRiseOverSharing/(1-hb) {
		r.note("evictions: KV usage on %s rose ×%.3g, past ×%.3g, what losing a %.0f%% prefix hit ratio could fill: the misses are the KV cause's evictions", on, uw/ub, KVRiseOverSharing/(1-hb), 100*hb)
		return true, nil
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
