package causal

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/causal/stats"
	"github.com/tailcause/tailcause/schemas"
)

// Where a cause acts, and so which entity a culprit names.
const (
	kindEngine   = "engine"   // engine state: host/engine/pod/model
	kindGPU      = "gpu"      // hardware: host/gpu
	kindHost     = "host"     // a whole host (entity.degraded only)
	kindWorkload = "workload" // request shape: the scope (model/service)
)

// causeRun is one candidate cause being estimated.
type causeRun struct {
	node       dag.Node
	kind       string
	adjust     []string
	continuous bool   // treatment is the level, not an exposure indicator
	treatment  string // Float64 SQL
	exposed    string // SQL boolean: the request is affected (exposure, or level above elevated)
	label      string // readable form of exposed
	elevated   float64
	entityKey  string // localized engine/gpu (or degraded host) key, "" for the scope
	pidx       int    // index in placementRow.exp / entityStats.exp
	split      bool   // a per-entity share of a cause spread over entities
	col        int    // index in r.causes and topRow.vals (-1: degraded)
	// degraded: the placement node of the entity examined (entityKey).
	placement *dag.Node
	splitInto int // per-entity culprits made of this cause
	// whileLong: a queue's arrival rate while it was long
	// (exposedArrivals), once read; NaN where it cannot be told.
	whileLong *float64
	// longer: a queue's prompt ratio (longerWork), once read; NaN
	// where it cannot be told.
	longer *float64
	// riseLo: the lower end of a queue's arrival rise's interval
	// (riseLow), once read; NaN where it cannot be told.
	riseLo *float64

	// Aggregates.
	exp        expCounts // totals over placements
	affectedMS float64
	affectedN  float64
	meanDelta  float64 // continuous: mean Δ over window rows (quantile mapping)
	typDelta   float64 // continuous: mean Δ of affected rows
	focalRows  float64 // rows of the focused entity's own fit (focalFit), 0 when pooled
	cand       Candidate
}

// expCounts are exposure counts of one cause in one placement group.
type expCounts struct{ wTailExp, wExp, bExp, bTailExp float64 }

func (e *expCounts) add(o expCounts) {
	e.wTailExp += o.wTailExp
	e.wExp += o.wExp
	e.bExp += o.bExp
	e.bTailExp += o.bTailExp
}

// nodeQuantiles are quantiles of a continuous node on gridProbs.
type nodeQuantiles struct {
	base, win, pooled []float64
	nBase, nWin       float64
}

var gridProbs = func() []float64 {
	p := make([]float64, 101)
	for i := range p {
		p[i] = float64(i) / 100
	}
	return p
}()

// interp evaluates the piecewise-linear function through (xs, ys) at x,
// xs nondecreasing; flat outside.
func interp(xs, ys []float64, x float64) float64 {
	n := len(xs)
	if x <= xs[0] {
		return ys[0]
	}
	if x >= xs[n-1] {
		return ys[n-1]
	}
	i := sort.SearchFloat64s(xs, x) // xs[i-1] < x <= xs[i]
	if xs[i] == x {
		// Ties: the middle of the flat run.
		j := i
		for j+1 < n && xs[j+1] == x {
			j++
		}
		return (ys[i] + ys[j]) / 2
	}
	t := (x - xs[i-1]) / (xs[i] - xs[i-1])
	return ys[i-1] + t*(ys[i]-ys[i-1])
}

// delta is Δ for level v under quantile mapping: how far v sits above the
// baseline value of the same rank, v − Q_base(F_window(v)), clipped at 0.
// Without a baseline, the window median stands in for the normal level.
func (nq *nodeQuantiles) delta(v float64) float64 {
	if math.IsNaN(v) || nq.nWin == 0 {
		return 0
	}
	if nq.nBase == 0 {
		return math.Max(v-nq.win[50], 0)
	}
	p := interp(nq.win, gridProbs, v)
	return math.Max(v-interp(gridProbs, nq.base, p), 0)
}

// meanDelta is the mean Δ over the window rows and over those with Δ > 0,
// from the quantile grids (trapezoid rule over probability).
func (nq *nodeQuantiles) meanDelta() (all, affected float64) {
	if nq.nWin == 0 {
		return 0, 0
	}
	var s, w, sa, wa float64
	for i := range gridProbs {
		wt := 1.0
		if i == 0 || i == len(gridProbs)-1 {
			wt = 0.5
		}
		var d float64
		if nq.nBase == 0 {
			d = math.Max(nq.win[i]-nq.win[50], 0)
		} else {
			d = math.Max(nq.win[i]-nq.base[i], 0)
		}
		s += wt * d
		w += wt
		if d > 0 {
			sa += wt * d
			wa += wt
		}
	}
	if wa > 0 {
		affected = sa / wa
	}
	return s / w, affected
}

// knots are the hinge knots of a continuous adjuster: pooled quantiles at
// KnotQuantiles, distinct and strictly inside the pooled range.
func (nq *nodeQuantiles) knots(qs []float64) []float64 {
	lo, hi := nq.pooled[0], nq.pooled[len(nq.pooled)-1]
	var out []float64
	for _, q := range qs {
		k := interp(gridProbs, nq.pooled, q)
		if k <= lo || k >= hi {
			continue
		}
		if len(out) > 0 && k <= out[len(out)-1]*(1+1e-9) {
			continue
		}
		out = append(out, k)
	}
	return out
}

// candidates is one causeRun per cause node of the DAG that
// Config.Causes wants, in the DAG's order, with its backdoor adjustment set
// (Skipped when the node is not upstream of the outcome or has no
// adjustment set).
func (r *run) candidates() []*causeRun {
	var causes []*causeRun
	g := r.a.dag
	anc := ancestors(g, r.outcome.Name)
	// Latency components (queue, prefill, TTFT, stalls, TPOT, decode) are
	// never adjusted for: they are the outcome's parts, moved by the very
	// causes under study, and conditioning on them would hand a cause's
	// effect to a sibling mechanism.
	var outcomes []string
	for _, n := range g.Nodes() {
		if n.Role == dag.RoleOutcome {
			outcomes = append(outcomes, n.Name)
		}
	}
	for _, n := range g.Nodes() {
		if n.Cause == "" || n.Latent || n.Role == dag.RolePlacement || !r.wants(n.Cause) {
			continue
		}
		c := &causeRun{node: n, treatment: n.Treatment(), continuous: n.Exposed == "", col: len(causes)}
		c.cand = Candidate{Cause: n.Cause, Node: n.Name}
		switch n.Role {
		case dag.RoleGPUState:
			c.kind = kindGPU
		case dag.RoleRequestShape:
			c.kind = kindWorkload
		default:
			c.kind = kindEngine
		}
		causes = append(causes, c)
		if !anc[n.Name] {
			c.cand.Skipped = fmt.Sprintf("%s does not lie upstream of %s in %s", n.Name, r.outcome.Name, g.Version())
			continue
		}
		z, err := g.BackdoorSet(n.Name, r.outcome.Name, &dag.BackdoorOptions{Exclude: outcomes})
		if err != nil {
			c.cand.Skipped = err.Error()
			continue
		}
		c.adjust = z
		c.cand.AdjustedFor = append([]string{}, z...)
	}
	return causes
}

// elevatedAt is a continuous cause's exposure threshold: its quantile p
// of qs (quantiles on gridProbs), exposed above it. When that quantile is
// the largest value too — a bounded covariate whose top 5% sit at its
// ceiling, such as a miss ratio of 1 for requests sharing no prefix — the
// ceiling itself is exposed (the threshold just below it): "above the
// ceiling" exposes nothing, and a prefix cache that stopped hitting for
// every request was skipped as affecting none (tuning seed 2453).
func elevatedAt(expr string, qs []float64, p float64, what string) (float64, string) {
	v := interp(gridProbs, qs, p)
	if len(qs) > 0 && v >= qs[len(qs)-1] && !math.IsInf(v, 0) {
		return math.Nextafter(v, math.Inf(-1)), fmt.Sprintf("%s at %s (%s, its maximum)", expr, fmtNum(v), what)
	}
	return v, fmt.Sprintf("%s above %s (%s)", expr, fmtNum(v), what)
}

// attribute estimates every candidate cause of a breached window.
func (r *run) attribute() error {
	r.causes = r.candidates()
	shared, err := r.sharedFromFrame()
	if err != nil {
		return err
	}
	if r.quant, err = r.queryQuantiles(shared); err != nil {
		return err
	}
	for _, c := range r.causes {
		if c.cand.Skipped != "" {
			continue
		}
		if c.continuous {
			nq := r.quant[c.node.Name]
			if nq.nWin == 0 {
				c.cand.Skipped = "no window request has a finite " + c.node.Name
				continue
			}
			qs, p, what := nq.win, 0.9, "window P90"
			if r.base != nil && nq.nBase > 0 {
				qs, p, what = nq.base, 0.95, "baseline P95"
			}
			c.elevated, c.label = elevatedAt(c.node.Expr, qs, p, what)
			// A level below the node's floor is no exposure, however far
			// above its normal level (dag.Node.Floor).
			if f := c.node.Floor; f > 0 && c.elevated < f {
				if top := nq.win[len(nq.win)-1]; !(top > f) {
					c.cand.Skipped = fmt.Sprintf("no window request is affected: %s never exceeds its floor %s (at most %s), a level at which the cause cannot act", c.node.Expr, fmtNum(f), fmtNum(top))
					continue
				}
				c.elevated, c.label = f, fmt.Sprintf("%s above %s (its floor; the %s is %s)", c.node.Expr, fmtNum(f), what, fmtNum(c.elevated))
			}
			c.exposed = "(" + c.node.Covariate() + " > " + dag.FormatFloat(c.elevated) + ")"
			c.meanDelta, c.typDelta = nq.meanDelta()
		} else {
			c.exposed = "(" + c.node.Exposed + ")"
			c.label = c.node.Exposed
		}
	}
	ps, err := r.queryPlacements(shared)
	if err != nil {
		return err
	}
	r.placements, r.engines, r.gpus, r.hosts, r.nWinTail = ps.rows, ps.engines, ps.gpus, ps.hosts, ps.nWinTail
	if err := r.queryAffected(shared); err != nil {
		return err
	}
	top, err := r.queryTop(0, nil)
	if err != nil {
		return err
	}
	r.setTop(top)
	for _, c := range r.causes {
		if c.cand.Skipped != "" {
			continue
		}
		if err := r.estimate(c); err != nil {
			if errors.Is(err, errSkip) {
				c.cand.Skipped = strings.TrimPrefix(err.Error(), errSkip.Error()+": ")
				continue
			}
			return fmt.Errorf("estimate %s: %w", c.node.Cause, err)
		}
	}
	if err := r.ensureCounterfactuals(); err != nil {
		return err
	}
	for _, c := range r.causes {
		if c.cand.Skipped == "" {
			r.splits = append(r.splits, r.localize(c)...)
		}
	}
	for _, c := range r.causes {
		if c.cand.Skipped == "" && c.kind == kindGPU && c.entityKey == "" && c.splitInto == 0 && c.node.Samples != nil {
			if err := r.gpuInEngine(c); err != nil {
				return err
			}
		}
	}
	for _, c := range r.causes {
		if c.cand.Skipped == "" && c.kind == kindGPU {
			if err := r.hostWideGPU(c); err != nil {
				return err
			}
		}
	}
	if r.wants(schemas.CauseEntityDegraded) {
		if r.degraded, err = r.examineDegraded(); err != nil {
			return err
		}
		// The degraded entities' counterfactuals, and the splits' since
		// the first call.
		if err := r.ensureCounterfactuals(); err != nil {
			return err
		}
	}
	for _, c := range r.all() {
		if c.cand.Skipped == "" && c.node.Cause == schemas.CauseQueueSaturation {
			if err := r.judgeDemand(c); err != nil {
				return err
			}
		}
		if c.cand.Skipped == "" && c.node.Cause == schemas.CausePrefixMiss {
			r.judgeDilution(c)
		}
		if c.cand.Skipped == "" && c.node.Name == stepNode {
			if err := r.judgeSteps(c); err != nil {
				return err
			}
		}
	}
	share := r.focusTailShare()
	for _, c := range r.all() {
		if c.cand.Skipped != "" {
			continue
		}
		c.cand.Culprit = c.splitInto == 0 && isCulprit(c.cand.Cause, c.cand.Estimate, r.minAF(c, share))
	}
	return r.resolveExemplars()
}

// minAF is the smallest attributable fraction that makes c a culprit.
// In a focused analysis a cause acting on the breached entity (ActsOn) is
// material when it explains MinAF of the entity's tail: its fraction of
// the scope's tail at least MinAF times the entity's share of that tail
// (share, focusTailShare). The fraction stays the scope's, as every
// culprit's of the analysis; only its bar is the entity's. A pod among 23
// holds a few percent of its model's tail: a prefix-cache loss on it that
// explained half of its own tail was 0.044 of the model's, no culprit, and
// its breach was dropped for want of one (tuning seed 5007).
func (r *run) minAF(c *causeRun, share float64) float64 {
	if f := r.req.Focus; f != nil && share > 0 && c.cand.Entity.ActsOn(f.Entity) {
		return r.cfg.MinAF * share
	}
	return r.cfg.MinAF
}

// focusTailShare is the focused engine's or host's share of the window's
// tail requests (0 without a focus on one, or without tail requests).
func (r *run) focusTailShare() float64 {
	es := r.focusedEntity()
	if es == nil || r.nWinTail <= 0 {
		return 0
	}
	return math.Min(1, es.nwTail/r.nWinTail)
}

// isCulprit is the rule that makes an estimated cause a culprit: its
// latency effect positive, its attributable fraction at least minAF and
// significantly above zero. A degraded entity must also be significantly
// slower (the effect's interval above zero), not only more often past the
// tail threshold: an entity always a little slower than its peers crosses
// a fixed threshold far more often when the whole scope's work grows, its
// latency per unit of work the same (a tuning run's host under a model's
// longer outputs: ×1.01, the effect's 95% interval −373..754 ms, ranked
// above the long outputs). Every degraded entity the tuning sets drew was
// slower with an interval above zero (×1.10–5.2).
func isCulprit(cause Cause, e stats.CauseEstimate, minAF float64) bool {
	ok := e.Log.Beta > 0 && e.Attributed.Value >= minAF && e.Attributed.CI[0] > 0
	if cause == schemas.CauseEntityDegraded {
		ok = ok && e.EffectCI[0] > 0
	}
	return ok
}

// judgeDilution tells a prefix cache that stopped hitting from one whose
// hit ratio fell because the prompts it was given grew: the ratio is
// cached tokens over queried (prompt) tokens, and the engine's own
// counters say how much of its fall the longer prompts make on their own
// (promptShift.grownShare). From MediatedShare of the fall on, the
// cache hit as many tokens per request as before and the misses are a
// symptom of the prompts (Candidate.Symptom): they rank below the
// culprits of those prompts on the same engine. Tuning seeds 7844 and
// 7934 (least-loaded and random routing): a pod given its model's long
// prompts (engine.prefill_interference), its hit ratio diluted, ranked
// prefix_cache.miss first. A cache that stops hitting, or that a full KV
// cache evicts (its preempted prompts recomputed and queried again), hits
// fewer tokens of prompts as long as before: no dilution (tuning seed
// 7715, a pod's KV cache cut, judged by the queried tokens per request).
// Nothing is judged without a baseline or the counters.
func (r *run) judgeDilution(c *causeRun) {
	if r.base == nil {
		return
	}
	ps, err := r.promptShiftOn(c.cand.Entity)
	if err != nil {
		r.note("prompt counters: %v", err)
		return
	}
	share := ps.grownShare()
	if !(share >= MediatedShare) {
		return
	}
	c.cand.Symptom = true
	c.cand.Evidence = append(c.cand.Evidence, fmt.Sprintf("prompt tokens per request ×%.2f of the baseline's, queried ×%.2f and cached ×%.2f: the longer prompts make %.0f%% of the hit ratio's fall; the misses rank below the culprits of the prompts it was given",
		ps.perRequest, ps.queried, ps.cached, 100*share))
}

// stepNode is the node of the engine's step size (engine_step_tokens).
const stepNode = "prefill_step"

// judgeSteps tells larger steps that slowed an engine from an engine whose
// slowness made its steps larger. A step's time grows at most in
// proportion to its tokens, so steps that slowed the decodes batched with
// them grow at least as the time per output token does, on the log
// scale; an engine that is itself slower (a degraded engine, a queue, a
// thrashing KV cache) takes longer steps, and more prompts wait for each:
// its steps grow too, by less. Below MediatedShare of the TPOT's rise
// (log step rise over log TPOT rise, on the culprit's rows, window over
// baseline) the steps are a symptom (Candidate.Symptom) and rank below the
// culprits on the same engine. On the tuning seeds' pods given large
// prefills the share was 0.63–4.2 where the TPOT rose ×1.3 or more (7881
// and 8125, TPOT ×107 and ×38, at 0.63 and 0.75); on degraded pods
// 0.06–0.11 (7698, 7708, 7720, 7735: steps ×1.01–1.07, TPOT ×1.2–1.9); on
// queues 0.12–0.44. Nothing is judged without a baseline, or where the
// TPOT did not rise. The requests table is read, not the snapshot: it
// holds no latency component but the outcome.
func (r *run) judgeSteps(c *causeRun) error {
	if r.base == nil {
		return nil
	}
	both := "isFinite(tpot_ms) AND tpot_ms > 0 AND isFinite(engine_step_tokens) AND engine_step_tokens > 0"
	avg := func(col, period string) string {
		return fmt.Sprintf("toFloat64(avgIf(%s, %s AND %s))", col, period, both)
	}
	win, base := r.inWin(), inInterval(*r.base)
	q := fmt.Sprintf("SELECT %s, %s, %s, %s\nFROM %s FINAL\nWHERE %s%s",
		avg("tpot_ms", win), avg("tpot_ms", base), avg("engine_step_tokens", win), avg("engine_step_tokens", base),
		r.a.cfg.Table, r.pooledWhere(), entityWhere(c.cand.Entity))
	v, err := r.floats("step sizes", q, 4)
	if err != nil {
		return err
	}
	tpot, step := v[0]/v[1], v[2]/v[3]
	if !(tpot > 1) || math.IsInf(tpot, 0) || !(step > 0) || math.IsInf(step, 0) {
		return nil
	}
	share := math.Log(step) / math.Log(tpot)
	if share >= MediatedShare {
		return nil
	}
	c.cand.Symptom = true
	c.cand.Evidence = append(c.cand.Evidence, fmt.Sprintf("the engine's steps ×%.2f of the baseline's, its time per output token ×%.2f: larger steps make at most %.0f%% of the slowdown; the steps rank below the culprits of a slower engine",
		step, tpot, 100*math.Max(share, 0)))
	return nil
}

// judgeDemand tells a queue that more work built from one that slower
// service built: it compares the arrival rate on the culprit's engine (or
// the scope) in the window with the baseline's. Below
// Config.QueueDemandRise the queue is a symptom of whatever slowed the
// engine (Candidate.Symptom); the evidence says which it is. Without a
// baseline, an engine's arrivals are compared with its peers' in the
// window (peerDemand).
func (r *run) judgeDemand(c *causeRun) error {
	if r.cfg.QueueDemandRise == 0 {
		return nil
	}
	if r.base == nil {
		return r.peerDemand(c)
	}
	allW, allB := r.scopeRequests()
	nw, nb := allW, allB
	where, need := "the scope", r.cfg.ScopeDemandRise
	if es := r.engines[c.entityKey]; c.entityKey != "" && es != nil {
		nw, nb, where = es.nw, es.nb, "engine "+es.key
		// An engine that serves (nearly) the whole scope has no router
		// steering a share of the traffic to it: its arrivals are the
		// model's, judged as the scope's (tuning seed 2305: a model's
		// only engine got ×1.49 the arrivals, a surge judged a symptom
		// at the engine's ×1.5).
		if nw < 0.95*allW {
			need = r.cfg.QueueDemandRise
		}
	}
	if need == 0 {
		need = r.cfg.QueueDemandRise
	}
	ws, bs, err := r.arrivalSpans()
	if err != nil {
		return err
	}
	if nb == 0 || ws <= 0 || bs <= 0 {
		return nil
	}
	wRate, bRate := nw/ws, nb/bs
	rise := wRate / bRate
	whileLong := false // the rise is the one while the queue was long (not re-judged by riseLow)
	if rise < need {
		// A surge that began inside the window is diluted by the time
		// before it: judge the arrivals while the queue was long too.
		if c.whileLong == nil {
			eRate, ok, err := r.exposedArrivals(c, queueEngine(r, c))
			if err != nil {
				return err
			}
			if !ok {
				eRate = math.NaN()
			}
			c.whileLong = &eRate
		}
		if eRate := *c.whileLong; eRate/bRate > rise {
			wRate, rise, whileLong = eRate, eRate/bRate, true
			where += " while its queue was long"
		}
	}
	if rise < need {
		c.cand.Symptom = true
		c.cand.Evidence = append(c.cand.Evidence, fmt.Sprintf("arrivals on %s ×%.2f of the baseline rate (%.3g/s vs %.3g/s), below ×%v: the queue grew because requests were served slower, not because more arrived; it ranks below the other culprits there",
			where, rise, wRate, bRate, need))
		return nil
	}
	if !whileLong {
		if c.riseLo == nil {
			lo, ok, err := r.riseLow(queueEngine(r, c), rise)
			if err != nil {
				return err
			}
			if !ok {
				lo = math.NaN()
			}
			c.riseLo = &lo
		}
		if lo := *c.riseLo; lo <= 1 {
			c.cand.Symptom = true
			c.cand.Evidence = append(c.cand.Evidence, fmt.Sprintf("arrivals on %s ×%.2f of the baseline rate (%.3g/s vs %.3g/s), but ×%.2f at the lower end of its 95%% interval (the arrivals' minute-to-minute spread): no more work than the load's own swings; the queue grew because requests were served slower, and it ranks below the other culprits there",
				where, rise, wRate, bRate, lo))
			return nil
		}
	}
	if longer, err := r.longerWork(c); err != nil || longer {
		return err
	}
	c.cand.DemandRise = rise
	c.cand.Evidence = append(c.cand.Evidence, fmt.Sprintf("arrivals on %s ×%.2f of the baseline rate (%.3g/s vs %.3g/s): more work arrived than before",
		where, rise, wRate, bRate))
	return nil
}

// scopeRequests are the scope's window and baseline requests, summed over
// the placement groups: the counts judgeDemand's scope rates are made of.
func (r *run) scopeRequests() (win, base float64) {
	for _, p := range r.placements {
		win, base = win+p.nw, base+p.nb
	}
	return win, base
}

// riseLow is the lower end of the 95% interval of an arrival rise (the
// window's rate over the baseline's on engine e, the scope for nil), from
// the whole minutes of each period: traffic swings minute to minute far
// more than a Poisson count (a fleet's minutes held 139–277 arrivals around
// a mean of 205), so a baseline of three quiet minutes makes an ordinary
// window look like ×1.2 the load. The spread is the minutes' relative
// spread (a robust one, minuteRiseLow; at least the Poisson one). Not ok
// with fewer than three whole baseline minutes or no whole window minute:
// the estimate alone then decides.
//
// Tuning seed 5652 (no earlier data): a model's KV cache lost 3 minutes
// into the run, the baseline those 3 minutes (148, 148, 212 arrivals), the
// window ×1.21 of it: the queue it built ranked above the KV preemptions
// as "more work arrived".
func (r *run) riseLow(e *entityStats, rise float64) (lo float64, ok bool, err error) {
	where := r.whereIn(r.win, *r.base)
	if e != nil {
		where += " AND " + r.onEngineSQL(e)
	}
	q := fmt.Sprintf("SELECT toFloat64(intDiv(start_ns, %d)) AS tc_m, toFloat64(count()) FROM %s WHERE %s GROUP BY tc_m",
		int64(time.Minute), r.table(), where)
	counts := map[int64]float64{}
	err = r.query("arrivals by minute", q, func(rows Rows) error {
		var m, n float64
		if err := rows.Scan(&m, &n); err != nil {
			return err
		}
		counts[int64(m)] = n
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	lo, ok = minuteRiseLow(counts, r.win, *r.base, rise)
	return lo, ok, nil
}

// minuteRiseLow is riseLow's arithmetic over counts (arrivals per minute,
// keyed by minutes since the epoch): the whole minutes inside win and
// base, from each one's first minute with arrivals to its last (a minute
// without arrivals between them counts 0).
func minuteRiseLow(counts map[int64]float64, win, base Interval, rise float64) (float64, bool) {
	whole := func(iv Interval) []float64 {
		first := (iv.Start.UnixNano() + int64(time.Minute) - 1) / int64(time.Minute)
		last := iv.End.UnixNano()/int64(time.Minute) - 1
		// The period's data may cover only part of it (a baseline hour
		// before a run that began later): minutes before the first
		// arrival and after the last are no data, not quiet minutes.
		for first <= last && counts[first] == 0 {
			first++
		}
		for last >= first && counts[last] == 0 {
			last--
		}
		var out []float64
		for m := first; m <= last; m++ {
			out = append(out, counts[m])
		}
		return out
	}
	w, b := whole(win), whole(base)
	if len(w) == 0 || len(b) < 3 {
		return 0, false
	}
	// The minutes' relative spread, robustly: 1.4826 × the median absolute
	// deviation of each minute from its period's median, relative to that
	// median, over the minutes of both periods. A standard deviation would
	// count the surge's own minutes as swings — those of a surge that began
	// inside the window, or in the baseline before it (the fault-before
	// question) — and a baseline of three minutes alone has no spread to
	// speak of (two of them equal: a deviation of 0).
	var rel []float64
	minMed := math.Inf(1)
	for _, ms := range [][]float64{w, b} {
		med := stats.Median(ms)
		if med <= 0 {
			return 0, false
		}
		minMed = math.Min(minMed, med)
		for _, v := range ms {
			rel = append(rel, math.Abs(v/med-1))
		}
	}
	cv := 1.4826 * stats.Median(rel)
	cv2 := math.Max(cv*cv, 1/minMed)
	se := math.Sqrt(cv2/float64(len(w)) + cv2/float64(len(b)))
	return rise * math.Exp(-1.96*se), true
}

// longerWorkRatio is the rise of the mean prompt length at which the work
// that arrived is longer work rather than more of the same.
const longerWorkRatio = 1.25

// longerWork tells, for a queue whose arrivals rose past the demand
// threshold, whether the work that arrived was longer: the mean prompt
// tokens of its engine's (the scope's) window requests against its
// baseline's, or without a baseline against the scope's other engines' in
// the window, at least longerWorkRatio. Then the queue is a symptom of the
// prompts (the prefill they bring, or the prompt mix) and says so:
// prefill interference steers the long prompts to one engine, which
// gets more of them than its peers (tuning seeds 2890, 2922, 3057: the
// queue ranked above the prefill load, no earlier data, its arrivals
// ×1.5–3 its peers' median and its prompts ×2.5). A queue that more of the
// same work built keeps its prompt lengths (±10%).
func (r *run) longerWork(c *causeRun) (bool, error) {
	e := queueEngine(r, c)
	if c.longer == nil {
		ratio := math.NaN()
		// The mean prompt where cond holds over the mean where it does
		// not: the window against the baseline, or the engine against
		// its peers in the window.
		var cond, where string
		switch {
		case r.base != nil:
			cond, where = r.inWin(), r.whereIn(r.win, *r.base)
			if e != nil {
				where += " AND " + r.onEngineSQL(e)
			}
		case e != nil:
			cond, where = r.onEngineSQL(e), r.winWhere()
		}
		if cond != "" {
			q := fmt.Sprintf("SELECT toFloat64(avgIf(prompt_tokens, %[1]s)), toFloat64(avgIf(prompt_tokens, NOT %[1]s)) FROM %[2]s WHERE %[3]s",
				cond, r.table(), where)
			v, err := r.floats("prompt lengths", q, 2)
			if err != nil {
				return false, err
			}
			if v[1] > 0 {
				ratio = v[0] / v[1]
			}
		}
		c.longer = &ratio
	}
	if !(*c.longer >= longerWorkRatio) {
		return false, nil
	}
	against := "the baseline's"
	if r.base == nil {
		against = "its peers' in the window"
	}
	c.cand.Symptom = true
	c.cand.Evidence = append(c.cand.Evidence, fmt.Sprintf("the requests that arrived had prompts ×%.2f as long as %s: longer work, not more of the same; the queue ranks below the culprits of the prompts it was given",
		*c.longer, against))
	return true, nil
}

// onEngineSQL selects the rows of engine e, as a label comparison that the
// Go fits evaluate on the frame's labels (colterm.go) without a column of
// their own.
func (r *run) onEngineSQL(e *entityStats) string {
	if n, ok := r.a.dag.Node("engine"); ok && n.Expr != "" {
		return "(" + n.Expr + ") = " + dag.QuoteString(e.key)
	}
	return "concat(host, '/', pod, '/', engine) = " + dag.QuoteString(e.key)
}

// queueEngine is the engine a queue culprit is localized to, nil for the scope's.
func queueEngine(r *run, c *causeRun) *entityStats {
	if c.entityKey == "" {
		return nil
	}
	return r.engines[c.entityKey]
}

// exposedArrivals is the arrival rate on engine e (the scope for nil)
// while c's queue was long: the window cut into minutes, each minute's
// arrival rate weighted by its exposed requests. A queue that a surge
// built is long from the surge on, and a surge that began inside the
// window is diluted in the window's rate by the time before it (tuning
// seed 3072: work forced onto one of two pods, ×1.48 over the window, was
// judged a symptom at ×1.5). Slower service leaves the rate as it was
// while the queue is long. (The span from the first exposed arrival to
// the last does not do: a baseline's P95 is exceeded by chance early in
// any window.) ok is false with fewer than MinEntityRows exposed
// requests, and when the requests that arrived while the queue was long
// had prompts longer than the baseline's by a quarter or more (their
// mean, weighted alike): that work is longer, not more of the same, and
// the prefill it brings is the cause to name (tuning seed 3057: long
// prompts steered to one pod, ×2.5 their length, ×1.7 the arrivals while
// its queue was long).
func (r *run) exposedArrivals(c *causeRun, e *entityStats) (rate float64, ok bool, err error) {
	where := r.whereIn(r.win, *r.base)
	if e != nil {
		where += " AND " + r.onEngineSQL(e)
	}
	vs, err := r.byMinute("exposed arrivals", "toFloat64(count()), toFloat64(countIf("+c.exposed+")), toFloat64(avg(prompt_tokens))", where)
	if err != nil {
		return 0, false, err
	}
	ms := make([]minuteArrivals, len(vs))
	for i, v := range vs {
		ms[i] = minuteArrivals{minute: v[0], n: v[1], exposed: v[2], prompt: v[3]}
	}
	rate, ok = rateWhileLong(ms, r.win, float64(max(r.cfg.MinEntityRows, 1)))
	return rate, ok, nil
}

// movedLoad tells, for an engine or host examined for entity.degraded,
// whether it is slow because work was moved to it: its share of the
// scope's arrivals while its queue was long (each minute of the window
// weighted by the entity's requests exposed to the queue cause)
// at least QueueDemandRise times its share in the baseline. The scope's
// own arrivals cancel out: a surge on the whole model leaves the shares
// as they were. A router moves work off engines that failed or slowed
// onto their peers (tuning seed 3871: XID bursts took a host's engines
// down; the model's other host got ×2.2 its share while its queue was
// long, and its entity.degraded, the queue's load left over by a linear
// adjustment, ranked above the XID). Then the entity's slowness is the
// load's, a symptom (Candidate.Symptom, Candidate.MovedLoad) that ranks
// below every culprit of the scope. Needs a baseline and a queue cause.
func (r *run) movedLoad(c *causeRun, es *entityStats) error {
	if r.base == nil || r.cfg.QueueDemandRise == 0 {
		return nil
	}
	var queue *causeRun
	for _, q := range r.causes {
		if q.cand.Skipped == "" && q.node.Cause == schemas.CauseQueueSaturation && q.exposed != "" {
			queue = q
			break
		}
	}
	if queue == nil {
		return nil
	}
	on := "host = " + dag.QuoteString(es.key)
	if c.kind == kindEngine {
		on = r.onEngineSQL(es)
	}
	vs, err := r.byMinute("moved load", fmt.Sprintf("toFloat64(countIf(%[1]s)), toFloat64(count()), toFloat64(countIf(%[1]s AND %[2]s))", on, queue.exposed),
		r.whereIn(r.win, *r.base))
	if err != nil {
		return err
	}
	ms := make([]minuteShare, len(vs))
	for i, v := range vs {
		ms[i] = minuteShare{minute: v[0], own: v[1], all: v[2], exposed: v[3]}
	}
	rise, ok := shareWhileLong(ms, float64(max(r.cfg.MinEntityRows, 1)))
	if !ok || rise < r.cfg.QueueDemandRise {
		return nil
	}
	c.cand.Symptom, c.cand.MovedLoad = true, true
	c.cand.Evidence = append(c.cand.Evidence, fmt.Sprintf("while its queue was long it received ×%.2f its baseline share of the scope's arrivals: work was moved to it from its peers, and its slowness is that load's; it ranks below the culprits of the scope",
		rise))
	return nil
}

// byMinute reads three aggregates (cols, Float64) of the rows selected by
// where for each minute of the window, and for the baseline's rows as
// minute -1: rows of [minute, col1, col2, col3].
func (r *run) byMinute(what, cols, where string) ([][4]float64, error) {
	q := fmt.Sprintf("SELECT toFloat64(if(%s, intDiv(start_ns, %d), -1)) AS tc_m, %s FROM %s WHERE %s GROUP BY tc_m",
		r.inWin(), int64(time.Minute), cols, r.table(), where)
	var out [][4]float64
	err := r.query(what, q, func(rows Rows) error {
		var v [4]float64
		if err := rows.Scan(&v[0], &v[1], &v[2], &v[3]); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// minuteShare is one minute of movedLoad (minute -1: the baseline): the
// entity's arrivals, the scope's, and the entity's exposed to the queue.
type minuteShare struct{ minute, own, all, exposed float64 }

// shareWhileLong is movedLoad's arithmetic: the entity's share of the
// scope's arrivals in each window minute weighted by its exposed
// requests, over its baseline share; not ok under minExposed exposed
// requests or without a baseline share.
func shareWhileLong(ms []minuteShare, minExposed float64) (rise float64, ok bool) {
	var weighted, exposed, base float64
	for _, m := range ms {
		switch {
		case m.minute < 0:
			if m.all > 0 {
				base = m.own / m.all
			}
		case m.exposed > 0 && m.all > 0:
			weighted += m.exposed * m.own / m.all
			exposed += m.exposed
		}
	}
	if exposed < minExposed || base <= 0 {
		return 0, false
	}
	return weighted / exposed / base, true
}

// minuteArrivals is one minute of exposedArrivals (minute -1: the
// baseline): its arrivals, the exposed ones, their mean prompt tokens.
type minuteArrivals struct{ minute, n, exposed, prompt float64 }

// rateWhileLong is exposedArrivals' arithmetic over its minutes: the
// arrival rate of each minute of win (clipped to it) weighted by its
// exposed requests; not ok under minExposed of them, or when their
// prompts, weighted alike, are a quarter longer than the baseline's.
func rateWhileLong(ms []minuteArrivals, win Interval, minExposed float64) (rate float64, ok bool) {
	const minute = int64(time.Minute)
	from, to := win.Start.UnixNano(), win.End.UnixNano()
	var weighted, exposed, prompt, basePrompt float64
	for _, m := range ms {
		if m.minute < 0 {
			basePrompt = m.prompt
			continue
		}
		lo, hi := max(int64(m.minute)*minute, from), min((int64(m.minute)+1)*minute, to)
		if m.exposed > 0 && hi > lo {
			weighted += m.exposed * m.n / (float64(hi-lo) / 1e9)
			prompt += m.exposed * m.prompt
			exposed += m.exposed
		}
	}
	if exposed < minExposed || finite(prompt) && basePrompt > 0 && prompt/exposed >= longerWorkRatio*basePrompt {
		return 0, false
	}
	return weighted / exposed, true
}

// peerDemand is judgeDemand without a baseline: the arrivals on the
// culprit's engine over the median of its peers' in the window (engines
// of one model behind one router share its arrivals alike). A queue on an
// engine that got no more work than its peers grew because it served
// slower: a symptom. A scope-wide queue has no peer and is left as it is.
func (r *run) peerDemand(c *causeRun) error {
	es := r.engines[c.entityKey]
	if c.entityKey == "" || es == nil {
		return nil
	}
	var peers []float64
	for _, k := range sortedKeys(r.engines) {
		if o := r.engines[k]; k != c.entityKey && k != "" && o.nw >= float64(r.cfg.MinEntityRows) {
			peers = append(peers, o.nw)
		}
	}
	if len(peers) < 2 {
		return nil
	}
	slices.Sort(peers)
	med := peers[len(peers)/2]
	if len(peers)%2 == 0 {
		med = (peers[len(peers)/2-1] + peers[len(peers)/2]) / 2
	}
	if med <= 0 {
		return nil
	}
	rise := es.nw / med
	if rise < r.cfg.QueueDemandRise {
		c.cand.Symptom = true
		c.cand.Evidence = append(c.cand.Evidence, fmt.Sprintf("engine %s received %.0f requests in the window, ×%.2f the median of its %d peers (%.0f), below ×%v: the queue grew because requests were served slower, not because more arrived; it ranks below the other culprits there",
			es.key, es.nw, rise, len(peers), med, r.cfg.QueueDemandRise))
		return nil
	}
	if longer, err := r.longerWork(c); err != nil || longer {
		return err
	}
	c.cand.DemandRise = rise
	c.cand.Evidence = append(c.cand.Evidence, fmt.Sprintf("engine %s received %.0f requests in the window, ×%.2f the median of its %d peers: more work arrived there than at its peers",
		es.key, es.nw, rise, len(peers)))
	return nil
}

// arrivalSpans are the seconds between the first and the last arrival of
// the scope in the window and in the baseline: the time the counts of
// judgeDemand were observed over (a baseline hour may hold data for only
// part of it), read once per run.
func (r *run) arrivalSpans() (win, base float64, err error) {
	if r.spans == nil {
		q := fmt.Sprintf("SELECT toFloat64(maxIf(start_ns, %[1]s)) - toFloat64(minIf(start_ns, %[1]s)), toFloat64(maxIf(start_ns, %[2]s)) - toFloat64(minIf(start_ns, %[2]s)) FROM %[3]s WHERE %[4]s",
			r.inWin(), inInterval(*r.base), r.table(), r.pooledWhere())
		v, err := r.floats("arrival spans", q, 2)
		if err != nil {
			return 0, 0, err
		}
		r.spans = []float64{v[0] / 1e9, v[1] / 1e9}
	}
	return r.spans[0], r.spans[1], nil
}

// wants reports whether cause c is a candidate under Config.Causes.
func (r *run) wants(c Cause) bool {
	return r.cfg.Causes == nil || slices.Contains(r.cfg.Causes, c)
}

// all is every estimated candidate: mechanisms, their per-entity splits
// and the degraded entities, in that order.
func (r *run) all() []*causeRun {
	out := append([]*causeRun(nil), r.causes...)
	out = append(out, r.splits...)
	return append(out, r.degraded...)
}

// errSkip marks a cause that cannot be estimated in this window (the
// reason is in the message); the analysis goes on without it.
var errSkip = errors.New("skip")

func ancestors(g *dag.DAG, of string) map[string]bool {
	out := map[string]bool{}
	stack := []string{of}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, p := range g.Parents(v) {
			if !out[p] {
				out[p] = true
				stack = append(stack, p)
			}
		}
	}
	return out
}

// queryQuantiles reads the quantile grids of every continuous node in use
// (treatments and adjusters) for baseline, window and both, in one query.
// quantilesDeterministic keeps memory bounded (a reservoir of 8192 per
// state) and the answer reproducible (the sample is chosen by a hash of
// the request uid).
//
// With shared, they are computed from the frame instead (frameQuantiles),
// and the query runs only under checkSharedSQL, to compare.
func (r *run) queryQuantiles(shared bool) (map[string]*nodeQuantiles, error) {
	quant := map[string]*nodeQuantiles{}
	var names []string
	seen := map[string]bool{}
	use := func(name string) {
		n, _ := r.a.dag.Node(name)
		if n.Categorical || n.Latent || n.Expr == "" || seen[name] {
			return
		}
		seen[name] = true
		names = append(names, name)
	}
	for _, c := range r.causes {
		if c.cand.Skipped != "" {
			continue
		}
		if c.continuous {
			use(c.node.Name)
		}
		for _, z := range c.adjust {
			use(z)
		}
	}
	if len(names) == 0 {
		return quant, nil
	}
	if shared {
		got, ok := r.frameQuantiles(names)
		if !ok {
			// A sampled frame that cannot give every grid exactly.
			r.gofit.sharedSQL++
			return r.queryQuantiles(false)
		}
		if !checkSharedSQL {
			return got, nil
		}
		want, err := r.queryQuantiles(false)
		if err != nil {
			return nil, err
		}
		// A sampled frame's grids are exact, its counts estimates.
		exactN := r.gofit.frame.sampleBits == 0
		for _, name := range names {
			a, b := got[name], want[name]
			if !sameFloats(a.base, b.base) || !sameFloats(a.win, b.win) || !sameFloats(a.pooled, b.pooled) || exactN && (a.nBase != b.nBase || a.nWin != b.nWin) {
				return nil, fmt.Errorf("the frame's quantile grids of %s differ from the query's: %v %v %v %v %v, query %v %v %v %v %v", name, a.nBase, a.nWin, a.base, a.win, a.pooled, b.nBase, b.nWin, b.base, b.win, b.pooled)
			}
		}
		return got, nil
	}
	levels := make([]string, len(gridProbs))
	for i, p := range gridProbs {
		levels[i] = dag.FormatFloat(p)
	}
	lv := strings.Join(levels, ", ")
	var cols []string
	for _, name := range names {
		n, _ := r.a.dag.Node(name)
		v := n.Covariate()
		fin := "isFinite(" + v + ")"
		baseCond := "0"
		if r.base != nil {
			baseCond = inInterval(*r.base)
		}
		cols = append(cols,
			fmt.Sprintf("quantilesDeterministicIf(%s)(%s, %s, %s AND %s)", lv, v, r.a.uidHash(), baseCond, fin),
			fmt.Sprintf("quantilesDeterministicIf(%s)(%s, %s, %s AND %s)", lv, v, r.a.uidHash(), r.inWin(), fin),
			fmt.Sprintf("quantilesDeterministicIf(%s)(%s, %s, %s)", lv, v, r.a.uidHash(), fin),
			fmt.Sprintf("toFloat64(countIf(%s AND %s))", baseCond, fin),
			fmt.Sprintf("toFloat64(countIf(%s AND %s))", r.inWin(), fin),
		)
	}
	q := "SELECT\n    " + strings.Join(cols, ",\n    ") + "\nFROM " + r.table() + "\nWHERE " + r.pooledWhere()
	return quant, r.query("node quantiles", q, func(rows Rows) error {
		dest := make([]any, 0, len(cols))
		qs := make([]*nodeQuantiles, len(names))
		for i := range names {
			nq := &nodeQuantiles{}
			qs[i] = nq
			dest = append(dest, &nq.base, &nq.win, &nq.pooled, &nq.nBase, &nq.nWin)
		}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		for i, name := range names {
			quant[name] = qs[i]
		}
		return nil
	})
}

// placementRow is one (host, engine, gpu, model) group of the pooled rows.
type placementRow struct {
	host, engine, gpu, model, pod string
	nw, nwTail, nb, nbTail        float64
	p99w                          float64
	exp                           []expCounts // per cause, r.causes order
}

// engineKey is the engine's label as the DAG's engine node computes it:
// concat(host, '/', pod, '/', engine) (the engine index alone repeats on
// every pod of a host).
func (p placementRow) engineKey() string { return p.host + "/" + p.pod + "/" + p.engine }

// entityStats aggregates placement rows of one engine or GPU.
type entityStats struct {
	key                    string
	host, engine, gpu, pod string
	model                  string
	nw, nwTail, nb, nbTail float64
	p99w, p99wN            float64 // window quantile of the largest group
	gpus, engines          map[string]float64
	exp                    []expCounts
	health                 float64
	healthOK               bool
}

// placementSet is what queryPlacements read: the placement rows (sorted)
// and the engines, GPUs and hosts they aggregate to, health scored, with
// the window's tail count.
type placementSet struct {
	rows                 []placementRow
	engines, gpus, hosts map[string]*entityStats
	nWinTail             float64
}

// queryPlacements reads per-placement counts (window/baseline, tail,
// exposure of each cause): the entities of the fixed effects, the health
// scores, localization and evidence, in one GROUP BY.
//
// With shared, from the frame instead (framePlacements; the query runs
// only under checkSharedSQL, to compare).
func (r *run) queryPlacements(shared bool) (placementSet, error) {
	base := "0"
	if r.base != nil {
		base = inInterval(*r.base)
	}
	win := r.inWin()
	tail := "(" + r.y + " > " + dag.FormatFloat(r.tailT) + ")"
	cols := []string{
		"toString(host)", "toString(engine)", "toString(gpu)", "toString(model)", "toString(pod)",
		fmt.Sprintf("toFloat64(countIf(%s))", win),
		fmt.Sprintf("toFloat64(countIf(%s AND %s))", win, tail),
		fmt.Sprintf("toFloat64(countIf(%s))", base),
		fmt.Sprintf("toFloat64(countIf(%s AND %s))", base, tail),
		fmt.Sprintf("toFloat64(quantileExactIf(%s)(%s, %s))", dag.FormatFloat(r.q), r.y, win),
	}
	var active []*causeRun
	for _, c := range r.causes {
		if c.cand.Skipped != "" {
			continue
		}
		active = append(active, c)
		e := c.exposed
		cols = append(cols,
			fmt.Sprintf("toFloat64(countIf(%s AND %s AND %s))", win, tail, e),
			fmt.Sprintf("toFloat64(countIf(%s AND %s))", win, e),
			fmt.Sprintf("toFloat64(countIf(%s AND %s))", base, e),
			fmt.Sprintf("toFloat64(countIf(%s AND %s AND %s))", base, tail, e),
		)
	}
	q := "SELECT\n    " + strings.Join(cols, ",\n    ") + "\nFROM " + r.table() + "\nWHERE " + r.pooledWhere() + "\nGROUP BY host, pod, engine, gpu, model"
	var ps placementSet
	var err error
	if shared {
		ps.rows = r.framePlacements(active)
		if checkSharedSQL {
			err = r.checkPlacements(q, active, ps.rows)
		}
	} else {
		ps.rows, err = r.readPlacements(q, len(active))
	}
	if err != nil {
		return ps, err
	}
	sort.Slice(ps.rows, func(i, j int) bool {
		a, b := ps.rows[i], ps.rows[j]
		return a.host+"\x00"+a.pod+"\x00"+a.engine+"\x00"+a.gpu+"\x00"+a.model < b.host+"\x00"+b.pod+"\x00"+b.engine+"\x00"+b.gpu+"\x00"+b.model
	})
	ps.engines, ps.gpus, ps.hosts = map[string]*entityStats{}, map[string]*entityStats{}, map[string]*entityStats{}
	for _, p := range ps.rows {
		ps.nWinTail += p.nwTail
		for i, c := range active {
			c.exp.add(p.exp[i])
		}
		for _, m := range []struct {
			set map[string]*entityStats
			key string
		}{{ps.engines, p.engineKey()}, {ps.gpus, p.gpu}, {ps.hosts, p.host}} {
			es := m.set[m.key]
			if es == nil {
				es = &entityStats{key: m.key, gpus: map[string]float64{}, engines: map[string]float64{}, exp: make([]expCounts, len(active))}
				m.set[m.key] = es
			}
			es.nw += p.nw
			es.nwTail += p.nwTail
			es.nb += p.nb
			es.nbTail += p.nbTail
			es.gpus[p.gpu] += p.nw + p.nb
			es.engines[p.engineKey()] += p.nw + p.nb
			if p.nw > es.p99wN {
				es.p99w, es.p99wN = p.p99w, p.nw
				es.host, es.engine, es.gpu, es.pod, es.model = p.host, p.engine, p.gpu, p.pod, p.model
			}
			for i := range active {
				es.exp[i].add(p.exp[i])
			}
		}
	}
	for i, c := range active {
		c.pidx = i
	}
	r.scoreHealth(ps.engines)
	r.scoreHealth(ps.gpus)
	r.scoreHealth(ps.hosts)
	return ps, nil
}

// readPlacements runs the placement query q, whose rows carry the counts
// of causes exposures after the fixed columns.
func (r *run) readPlacements(q string, causes int) ([]placementRow, error) {
	var out []placementRow
	err := r.query("placement counts", q, func(rows Rows) error {
		var p placementRow
		dest := []any{&p.host, &p.engine, &p.gpu, &p.model, &p.pod, &p.nw, &p.nwTail, &p.nb, &p.nbTail, &p.p99w}
		p.exp = make([]expCounts, causes)
		for i := range p.exp {
			e := &p.exp[i]
			dest = append(dest, &e.wTailExp, &e.wExp, &e.bExp, &e.bTailExp)
		}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

// checkPlacements runs the placement query q and fails unless its rows
// are the frame's (frame), bit for bit.
func (r *run) checkPlacements(q string, active []*causeRun, frame []placementRow) error {
	got, err := r.readPlacements(q, len(active))
	if err != nil {
		return err
	}
	// A sampled frame's exact counts: the groups', their tails' and the
	// tails' exposures (the other exposure counts and the groups' P99 are
	// estimates).
	sampled := r.gofit.frame.sampleBits > 0
	flat := func(ps []placementRow) (keys []string, vals []float64) {
		ps = slices.Clone(ps)
		sort.Slice(ps, func(i, j int) bool {
			return ps[i].engineKey()+"\x00"+ps[i].gpu+"\x00"+ps[i].model < ps[j].engineKey()+"\x00"+ps[j].gpu+"\x00"+ps[j].model
		})
		for _, p := range ps {
			keys = append(keys, p.host+"\x00"+p.pod+"\x00"+p.engine+"\x00"+p.gpu+"\x00"+p.model)
			if sampled {
				vals = append(vals, p.nw, p.nwTail, p.nb, p.nbTail)
				for _, e := range p.exp {
					vals = append(vals, e.wTailExp, e.bTailExp)
				}
				continue
			}
			vals = append(vals, p.nw, p.nwTail, p.nb, p.nbTail, p.p99w)
			for _, e := range p.exp {
				vals = append(vals, e.wTailExp, e.wExp, e.bExp, e.bTailExp)
			}
		}
		return keys, vals
	}
	k1, v1 := flat(frame)
	k2, v2 := flat(got)
	if !slices.Equal(k1, k2) || !sameFloats(v1, v2) {
		return fmt.Errorf("the frame's placement counts differ from the query's:\n%q %v\nquery %q %v", k1, v1, k2, v2)
	}
	return nil
}

// entityHealth lists the scored engines, GPUs and hosts, least healthy
// first (Incident.EntityHealth).
func (r *run) entityHealth() []EntityHealth {
	var out []EntityHealth
	for _, set := range []struct {
		kind string
		m    map[string]*entityStats
	}{{"engine", r.engines}, {"gpu", r.gpus}, {"host", r.hosts}} {
		for _, k := range sortedKeys(set.m) {
			es := set.m[k]
			if !es.healthOK || k == "" {
				continue
			}
			e := Entity{Host: es.host}
			switch set.kind {
			case "engine":
				e.Engine, e.Pod, e.Model = es.engine, es.pod, es.model
			case "gpu":
				e.GPU = es.gpu
			}
			out = append(out, EntityHealth{Kind: set.kind, Entity: e, Health: round(es.health, 4), Requests: int64(es.nw), TailRequests: int64(es.nwTail)})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Health < out[j].Health })
	if len(out) > MaxEntityHealth {
		out = out[:MaxEntityHealth]
	}
	return out
}

// scoreHealth scores the window tail rate of each entity against its peers
// (Health, leave-one-out Beta-Binomial).
func (r *run) scoreHealth(set map[string]*entityStats) {
	keys := sortedKeys(set)
	var counts []stats.EntityCounts
	for _, k := range keys {
		es := set[k]
		if es.nw >= float64(r.cfg.MinEntityRows) {
			counts = append(counts, stats.EntityCounts{Key: k, Tail: es.nwTail, N: es.nw})
		}
	}
	if len(counts) < 2 {
		return
	}
	hs, err := stats.Health(counts, nil)
	if err != nil {
		r.note("health scores: %v", err)
		return
	}
	for _, h := range hs {
		set[h.Key].health, set[h.Key].healthOK = h.Health, true
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// queryAffected reads, per cause, the SLO quantile of the affected window
// requests: the typical latency effect_ms scales.
//
// With shared, from the frame instead (frameAffected; the query runs only
// under checkSharedSQL, to compare).
func (r *run) queryAffected(shared bool) error {
	var cols []string
	var active []*causeRun
	for _, c := range r.causes {
		if c.cand.Skipped != "" {
			continue
		}
		active = append(active, c)
		cond := r.inWin() + " AND " + c.exposed
		cols = append(cols,
			fmt.Sprintf("toFloat64(quantileExactIf(%s)(%s, %s))", dag.FormatFloat(r.q), r.y, cond),
			fmt.Sprintf("toFloat64(countIf(%s))", cond))
	}
	if len(cols) == 0 {
		return nil
	}
	q := "SELECT\n    " + strings.Join(cols, ",\n    ") + "\nFROM " + r.table() + "\nWHERE " + r.winWhere()
	var v []float64
	if shared {
		v = r.frameAffected()
		if checkSharedSQL && r.gofit.frame.sampleBits == 0 { // a sample's are estimates
			w, err := r.floats("affected quantiles", q, len(cols))
			if err != nil {
				return err
			}
			if !sameFloats(v, w) {
				return fmt.Errorf("the frame's affected quantiles differ from the query's: %v, query %v", v, w)
			}
		}
	} else {
		var err error
		if v, err = r.floats("affected quantiles", q, len(cols)); err != nil {
			return err
		}
	}
	for i, c := range active {
		c.affectedMS, c.affectedN = v[2*i], v[2*i+1]
	}
	return nil
}

// topRow is one of the window's slowest requests with each cause's
// treatment value (NaN: unknown).
type topRow struct {
	y                        float64
	trace, host, engine, gpu string    // engine: the engine node's label (engineKey)
	vals                     []float64 // per r.causes
}

// queryTop reads the window's m slowest requests (m = 0: a first guess of
// four times the rows above the quantile, at least 1000) with the
// treatment of every cause, slowest first: the counterfactual quantiles
// and exemplars. buf, an earlier answer no longer used, lends its memory.
func (r *run) queryTop(m int, buf []topRow) ([]topRow, error) {
	if m == 0 {
		k := stats.QuantileRank(r.q, r.nWin)
		m = max(4*(r.nWin-k+1), 1000, r.nWin-r.winQ.LowerRank+1)
	}
	m = min(m, r.nWin)
	engineLabel := "concat(host, '/', pod, '/', engine)"
	if n, ok := r.a.dag.Node("engine"); ok && n.Expr != "" {
		engineLabel = n.Expr
	}
	trace := "toString(trace_id)"
	if r.a.snap != nil {
		trace = exemplarKeySQL // resolved to trace ids by resolveExemplars
	}
	cols := []string{r.y + " AS tc_v", trace, "toString(host)", "toString(" + engineLabel + ")", "toString(gpu)"}
	for _, c := range r.causes {
		cols = append(cols, "toFloat64("+c.treatment+")")
	}
	// read sends the rows of where, sorted by ClickHouse and cut to m
	// unless sorted is false: then the rows (those at or above the frame's
	// cut, at least m and barely more) are sorted here.
	read := func(where string, sorted bool) ([]topRow, error) {
		q := fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY tc_v DESC LIMIT %d", strings.Join(cols, ", "), r.table(), where, m)
		if !sorted {
			q = fmt.Sprintf("SELECT %s FROM %s WHERE %s", strings.Join(cols, ", "), r.table(), where)
		}
		top := buf[:0]
		err := r.query("slowest window requests", q, func(rows Rows) error {
			t := topRow{vals: make([]float64, len(r.causes))}
			dest := []any{&t.y, &t.trace, &t.host, &t.engine, &t.gpu}
			for i := range r.causes {
				dest = append(dest, &t.vals[i])
			}
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			top = append(top, t)
			return nil
		})
		if err == nil && !sorted {
			top = slowestFirst(top, m)
		}
		return top, err
	}
	where := r.winWhere()
	cut, ok := 0.0, false
	if sa := r.gofit.shared; sa != nil {
		// The frame knows the m-th slowest: only the rows at or above it
		// are read (ties at the cut are as arbitrary as they were), and
		// sorted here: ClickHouse's ORDER BY … LIMIT of the ~20 columns
		// cost as much again as selecting them (10M rows: 0.9 s of server
		// CPU against 0.45 s; slowestFirst sorts the 200k rows in ~0.05 s).
		if cut, ok = sa.topCut(m); ok {
			where += " AND " + r.y + " >= " + dag.FormatFloat(cut)
		}
	}
	top, err := read(where, !ok)
	if err != nil {
		return nil, err
	}
	if ok && checkSharedSQL {
		buf = nil
		all, err := read(r.winWhere(), true)
		if err != nil {
			return nil, err
		}
		if len(all) != len(top) || !slices.EqualFunc(all, top, func(a, b topRow) bool { return a.y == b.y }) {
			return nil, fmt.Errorf("the slowest %d window rows above the frame's cut %v differ from the query's", m, cut)
		}
	}
	return top, nil
}

// setTop makes top the run's slowest rows, and the fastest of them its
// cut.
func (r *run) setTop(top []topRow) {
	r.top, r.topCut = top, 0
	if len(top) > 0 {
		r.topCut = top[len(top)-1].y
	}
}

// slowestFirst returns the m slowest of rows, slowest first; ties keep
// their order in rows (the server's, as arbitrary as ORDER BY's). It sorts
// (outcome, index) pairs and gathers the rows once: a stable sort of the
// rows themselves moved ~100 bytes a swap (200k rows: ~0.4 s against
// ~0.05 s).
func slowestFirst(rows []topRow, m int) []topRow {
	type key struct {
		y float64 // finite: the scope's rows have a finite outcome
		i int
	}
	ks := make([]key, len(rows))
	for i, t := range rows {
		ks[i] = key{t.y, i}
	}
	slices.SortFunc(ks, func(a, b key) int {
		switch {
		case a.y > b.y:
			return -1
		case a.y < b.y:
			return 1
		}
		return a.i - b.i
	})
	out := make([]topRow, min(len(ks), m))
	for k := range out {
		out[k] = rows[ks[k].i]
	}
	return out
}

// exemplarKeySQL identifies a snapshot row in place of its trace id: the
// snapshot holds no trace_id (its widest column, ~20% of the CREATE's CPU,
// and read only for the few exemplars), so the slowest rows carry this key
// and resolveExemplars looks their trace ids up.
var exemplarKeySQL = exemplarKey(snapshotUIDHash)

// exemplarKey is the SQL of a row's exemplar key, the uid hash being the
// SQL hash.
func exemplarKey(hash string) string {
	return "concat(toString(start_ns), '/', toString(" + hash + "))"
}

// resolveExemplars replaces, through a snapshot, the exemplar keys of every
// candidate (exemplarKeySQL) with the requests' trace ids: one read of the
// table keyed by (start_ns, uid hash) and pruned to the seconds of
// the rows' start_time (a few granules). Without FINAL: the duplicates of
// a request share its uid and its trace id. A key the table no longer
// holds (dropped by the TTL since the snapshot) loses its exemplar.
func (r *run) resolveExemplars() error {
	if r.a.snap == nil {
		return nil
	}
	var secs, keys []string
	seen := map[string]bool{}
	for _, c := range r.all() {
		for _, k := range c.cand.Exemplars {
			ns, hash, ok := strings.Cut(k, "/")
			if !ok {
				return fmt.Errorf("exemplar key %q: want start_ns/uid hash", k)
			}
			if seen[k] {
				continue
			}
			seen[k] = true
			n, err := strconv.ParseInt(ns, 10, 64)
			if err != nil {
				return fmt.Errorf("exemplar key %q: %w", k, err)
			}
			secs = append(secs, fmt.Sprintf("toDateTime(%d)", n/int64(time.Second)))
			keys = append(keys, "("+ns+", "+hash+")")
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(secs)
	q := fmt.Sprintf("SELECT %s AS k, any(toString(trace_id)) FROM %s WHERE %s AND start_time IN (%s) AND (start_ns, %s) IN (%s) GROUP BY k",
		exemplarKey(uidHashSQL), r.a.cfg.Table, r.scope, strings.Join(slices.Compact(secs), ", "), uidHashSQL, strings.Join(keys, ", "))
	trace := make(map[string]string, len(keys))
	err := r.query("exemplar trace ids", q, func(rows Rows) error {
		var k, t string
		if err := rows.Scan(&k, &t); err != nil {
			return err
		}
		trace[k] = t
		return nil
	})
	if err != nil {
		return err
	}
	for _, c := range r.all() {
		out := make([]string, 0, len(c.cand.Exemplars))
		for _, k := range c.cand.Exemplars {
			if t, ok := trace[k]; ok {
				out = append(out, t)
			}
		}
		c.cand.Exemplars = out
	}
	return nil
}

// deltaRows are the slowest rows with Δ of cause c.
func (r *run) deltaRows(c *causeRun) []stats.LatencyDelta {
	out := make([]stats.LatencyDelta, len(r.top))
	i := c.col
	for k, t := range r.top {
		d := 0.0
		switch {
		case c.placement != nil:
			if r.onEntity(t, c) {
				d = 1
			}
		case c.split && !r.onEntity(t, c):
		case c.continuous:
			d = r.quant[c.node.Name].delta(t.vals[i])
		default:
			if t.vals[i] > 0 {
				d = 1
			}
		}
		out[k] = stats.LatencyDelta{LatencyMS: t.y, Delta: d}
	}
	return out
}

func (r *run) onEntity(t topRow, c *causeRun) bool {
	switch c.kind {
	case kindGPU:
		return t.gpu == c.entityKey
	case kindHost:
		return t.host == c.entityKey
	}
	return t.engine == c.entityKey
}

// ensureCounterfactuals refetches more of the slowest rows while some
// counterfactual quantile (or its interval) falls below the slowest rows
// fetched: only then are the rows left out certainly faster.
func (r *run) ensureCounterfactuals() error {
	for {
		need := false
		for _, c := range r.all() {
			e := c.cand.Estimate
			if c.cand.Skipped != "" {
				continue
			}
			if e.CounterfactualMS < r.topCut || e.CounterfactualCI[0] < r.topCut {
				need = true
			}
		}
		if !need || len(r.top) >= r.nWin {
			return nil
		}
		top, err := r.queryTop(4*len(r.top), r.top)
		if err != nil {
			return err
		}
		r.setTop(top)
		for _, c := range r.all() {
			if c.cand.Skipped != "" {
				continue
			}
			r.counterfactual(c)
		}
	}
}

func (r *run) counterfactual(c *causeRun) {
	e := &c.cand.Estimate
	rows := r.deltaRows(c)
	cf := func(beta float64) float64 {
		v, err := stats.CounterfactualQuantile(rows, r.nWin, math.Max(beta, 0), r.q)
		if err != nil {
			return 0
		}
		return v
	}
	ci := e.Log.CI(0)
	e.CounterfactualMS = cf(e.Log.Beta)
	e.CounterfactualCI = [2]float64{cf(ci[1]), cf(ci[0])}
}

func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1e9:
		return fmt.Sprintf("%.3g", v)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 1:
		return fmt.Sprintf("%.3g", v)
	default:
		return fmt.Sprintf("%.2g", v)
	}
}

func pct(num, den float64) string {
	if den <= 0 {
		return "n/a"
	}
	p := 100 * num / den
	if p > 0 && p < 10 {
		return fmt.Sprintf("%.1f%%", p)
	}
	return fmt.Sprintf("%.0f%%", p)
}
