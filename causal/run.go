package causal

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/causal/sqlgen"
	"github.com/tailcause/tailcause/causal/stats"
	"github.com/tailcause/tailcause/schemas"
)

// run is the state of one Analyze call. The phases return what they
// find, and only the two orchestrators, analyze (the judgement) and
// attribute (the estimation), store it here, for the phases after them to
// read; memos, the query tally and hostWideGPU, which drops the splits of
// a GPU cause it finds host-wide, are the exceptions.
type run struct {
	a   *Analyzer
	cfg Config
	ctx context.Context
	req Request

	outcome dag.Node
	y       string // Float64 SQL of the outcome
	q       float64
	scope   string // SQL boolean of the scope

	// analyze: resolveBaseline's framing, the counts and quantiles,
	// breachInside's narrowing, the breach.
	win          Interval
	base         *Interval // nil: no baseline
	baseSource   string
	nWin, nBase  int
	winQ, baseQ  stats.QuantileCI
	breach       stats.Breach
	tailT        float64
	insufficient bool

	// attribute: candidates, queryQuantiles, queryPlacements, queryTop
	// (setTop), localize's splits, examineDegraded.
	causes        []*causeRun
	quant         map[string]*nodeQuantiles // by node name
	placements    []placementRow
	engines, gpus map[string]*entityStats
	hosts         map[string]*entityStats
	nWinTail      float64
	top           []topRow
	topCut        float64
	splits        []*causeRun
	degraded      []*causeRun

	// Memos.
	spans      []float64                 // arrivalSpans: window, baseline seconds
	mediated   map[string]bool           // mediates
	concurrent map[string]concurrentRate // othersWhileExposed
	prompts    map[string]promptShift    // promptShiftOn, by entity
	qseries    *qseries                  // quantileSeries
	gofit      goFits                    // the fits' columns and sums in Go (colfit.go)

	notes   []string
	queries int
	qtime   time.Duration
}

func (a *Analyzer) newRun(ctx context.Context, req Request) (*run, error) {
	r := &run{a: a, cfg: a.cfg, ctx: ctx, req: req}
	if r.req.SLO.Signal == "" {
		r.req.SLO.Signal = "e2e_latency"
	}
	if r.req.SLO.Quantile == 0 {
		r.req.SLO.Quantile = 0.99
	}
	slo := r.req.SLO
	var errs []error
	if !(slo.Quantile > 0 && slo.Quantile < 1) {
		errs = append(errs, fmt.Errorf("quantile %v outside (0,1)", slo.Quantile))
	}
	if !(slo.ThresholdMS >= 0) || math.IsInf(slo.ThresholdMS, 0) {
		errs = append(errs, fmt.Errorf("threshold %v ms must be finite and >= 0", slo.ThresholdMS))
	}
	out, ok := a.dag.Outcome(slo.Signal)
	if !ok {
		errs = append(errs, fmt.Errorf("signal %q: no outcome node of the DAG measures it", slo.Signal))
	}
	if !req.Window.End.After(req.Window.Start) {
		errs = append(errs, fmt.Errorf("window %s..%s is empty", req.Window.Start.Format(time.RFC3339), req.Window.End.Format(time.RFC3339)))
	}
	if b := req.Baseline; b != nil {
		if !b.End.After(b.Start) {
			errs = append(errs, fmt.Errorf("baseline %s..%s is empty", b.Start.Format(time.RFC3339), b.End.Format(time.RFC3339)))
		} else if b.Start.Before(req.Window.End) && req.Window.Start.Before(b.End) {
			errs = append(errs, errors.New("baseline overlaps the window"))
		}
	}
	allowed := map[string]bool{}
	for _, c := range scopeColumns {
		allowed[c] = true
	}
	keys := make([]string, 0, len(slo.Scope))
	for k := range slo.Scope {
		if !allowed[k] {
			errs = append(errs, fmt.Errorf("scope key %q: want one of %s", k, strings.Join(scopeColumns, ", ")))
		}
		keys = append(keys, k)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("invalid request: %w", err)
	}
	sort.Strings(keys)
	conds := []string{}
	for _, k := range keys {
		conds = append(conds, k+" = "+dag.QuoteString(slo.Scope[k]))
	}
	r.outcome = out
	r.y = out.Covariate()
	r.q = slo.Quantile
	r.scope = strings.Join(append(conds, "isFinite("+r.y+")"), " AND ")
	r.win = req.Window
	return r, nil
}

func (r *run) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.notes = append(r.notes, msg)
	r.a.log.Debug(msg)
}

// --- SQL fragments -------------------------------------------------------

// table is what requests are read from: a snapshot, or the table with
// FINAL (snapshot.go).
func (r *run) table() string { return r.a.table() }

func inInterval(iv Interval) string {
	return fmt.Sprintf("(start_ns >= %d AND start_ns < %d)", iv.Start.UnixNano(), iv.End.UnixNano())
}

// prune bounds the DateTime key column, so that the primary key and
// partitions prune (start_ns is not in the sorting key).
func prune(ivs ...Interval) string {
	lo, hi := ivs[0].Start, ivs[0].End
	for _, iv := range ivs[1:] {
		if iv.Start.Before(lo) {
			lo = iv.Start
		}
		if iv.End.After(hi) {
			hi = iv.End
		}
	}
	return fmt.Sprintf("start_time >= toDateTime(%d) AND start_time <= toDateTime(%d)", lo.Unix(), hi.Unix())
}

func (r *run) inWin() string { return inInterval(r.win) }

// inWin01 is the Float64 window indicator (1 for every row without a
// baseline).
func (r *run) inWin01() string {
	if r.base == nil {
		return "1"
	}
	return "toFloat64(" + r.inWin() + ")"
}

func (r *run) whereIn(ivs ...Interval) string {
	parts := make([]string, len(ivs))
	for i, iv := range ivs {
		parts[i] = inInterval(iv)
	}
	return r.scope + " AND " + prune(ivs...) + " AND (" + strings.Join(parts, " OR ") + ")"
}

func (r *run) winWhere() string { return r.whereIn(r.win) }

// pooledWhere selects the window and baseline rows the fits pool.
func (r *run) pooledWhere() string {
	if r.base == nil {
		return r.winWhere()
	}
	return r.whereIn(r.win, *r.base)
}

func (r *run) tailExpr() string { return "toFloat64(" + r.y + " > " + dag.FormatFloat(r.tailT) + ")" }
func (r *run) logExpr() string  { return "log(greatest(" + r.y + ", 0.001))" }

// --- queries ---------------------------------------------------------------

func (r *run) query(what, q string, scan func(Rows) error) error {
	t0 := time.Now()
	err := QueryRows(r.ctx, r.a.db, what, q, scan)
	r.done(what, q, t0)
	return err
}

func (r *run) floats(what, q string, n int) ([]float64, error) {
	t0 := time.Now()
	v, err := queryFloats(r.ctx, r.a.db, what, q, n)
	r.done(what, q, t0)
	return v, err
}

// groups runs a first pass: labels strings then n Float64 columns per row.
func (r *run) groups(what, q string, labels, n int) ([]sqlgen.GroupRow, error) {
	var out []sqlgen.GroupRow
	err := r.query(what, q, func(rows Rows) error {
		g := sqlgen.GroupRow{Labels: make([]string, labels), Values: make([]float64, n)}
		dest := make([]any, 0, labels+n)
		for i := range g.Labels {
			dest = append(dest, &g.Labels[i])
		}
		for i := range g.Values {
			dest = append(dest, &g.Values[i])
		}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		out = append(out, g)
		return nil
	})
	return out, err
}

func (r *run) done(what, q string, t0 time.Time) {
	d := time.Since(t0)
	r.queries++
	r.qtime += d
	r.a.log.Debug("causal query", "what", what, "duration", d, "sql_bytes", len(q))
}

// countPair is what one scan of a window and a baseline returns: each
// one's count of rows and the seconds between its first and last arrival
// (arrivalSpans).
type countPair struct {
	win, base   Interval
	nWin, nBase int
	spans       []float64
}

// countPair counts the rows of win and of base, and their arrival spans,
// in one scan: each count is r.count's of whereIn(iv) (the pruning bounds of
// each interval kept in its countIf), the spans arrivalSpans' query over
// whereIn(win, base).
func (r *run) countPair(win, base Interval) (*countPair, error) {
	in := func(iv Interval) string { return "(" + prune(iv) + " AND " + inInterval(iv) + ")" }
	q := fmt.Sprintf("SELECT toFloat64(countIf(%[1]s)), toFloat64(countIf(%[2]s)), toFloat64(maxIf(start_ns, %[3]s)) - toFloat64(minIf(start_ns, %[3]s)), toFloat64(maxIf(start_ns, %[4]s)) - toFloat64(minIf(start_ns, %[4]s)) FROM %[5]s WHERE %[6]s",
		in(win), in(base), inInterval(win), inInterval(base), r.table(), r.whereIn(win, base))
	v, err := r.floats("counts", q, 4)
	if err != nil {
		return nil, err
	}
	return &countPair{win: win, base: base, nWin: int(v[0]), nBase: int(v[1]), spans: []float64{v[2] / 1e9, v[3] / 1e9}}, nil
}

func (r *run) count(where string) (int, error) {
	v, err := r.floats("count", "SELECT toFloat64(count()) FROM "+r.table()+" WHERE "+where, 1)
	if err != nil {
		return 0, err
	}
	return int(v[0]), nil
}

// quantile computes the SLO quantile of n rows with its interval from the
// n−l+1 slowest (ORDER BY … DESC LIMIT), the order-statistic convention of
// QuantileRanks (quantileExact's rank convention differs).
func (r *run) quantile(where string, n int) (stats.QuantileCI, error) {
	l, _, err := stats.QuantileRanks(n, r.q, r.cfg.Level)
	if err != nil {
		return stats.QuantileCI{}, err
	}
	m := n - l + 1
	vals := make([]float64, 0, m)
	q := fmt.Sprintf("SELECT %s AS tc_v FROM %s WHERE %s ORDER BY tc_v DESC LIMIT %d", r.y, r.table(), where, m)
	err = r.query("slowest requests", q, func(rows Rows) error {
		var v float64
		if err := rows.Scan(&v); err != nil {
			return err
		}
		vals = append(vals, v)
		return nil
	})
	if err != nil {
		return stats.QuantileCI{}, err
	}
	return stats.QuantileIntervalTop(n, vals, r.q, r.cfg.Level)
}

// quantilePair is quantile's answer for the nWin rows of win and the nBase
// rows of base, from one scan: the slowest of each as
// groupArraySortedIf(m)(−y, in iv), the m smallest of −y, each iv's
// condition r.count's (negating is exact, so the values are those of
// ORDER BY … DESC LIMIT m).
func (r *run) quantilePair(win, base Interval, nWin, nBase int) (w, b stats.QuantileCI, err error) {
	var ms [2]int
	for i, n := range []int{nWin, nBase} {
		l, _, err := stats.QuantileRanks(n, r.q, r.cfg.Level)
		if err != nil {
			return w, b, err
		}
		ms[i] = n - l + 1
	}
	in := func(iv Interval) string { return "(" + prune(iv) + " AND " + inInterval(iv) + ")" }
	q := fmt.Sprintf("SELECT groupArraySortedIf(%d)(-%s, %s), groupArraySortedIf(%d)(-%s, %s) FROM %s WHERE %s",
		ms[0], r.y, in(win), ms[1], r.y, in(base), r.table(), r.whereIn(win, base))
	var vals [2][]float64
	if err := r.query("slowest requests", q, func(rows Rows) error { return rows.Scan(&vals[0], &vals[1]) }); err != nil {
		return w, b, err
	}
	for i := range vals {
		for j := range vals[i] {
			vals[i][j] = -vals[i][j]
		}
	}
	if w, err = stats.QuantileIntervalTop(nWin, vals[0], r.q, r.cfg.Level); err != nil {
		return w, b, err
	}
	b, err = stats.QuantileIntervalTop(nBase, vals[1], r.q, r.cfg.Level)
	return w, b, err
}

// --- the analysis ------------------------------------------------------------

func (r *run) analyze() error {
	fr, err := r.resolveBaseline()
	if err != nil {
		return err
	}
	r.win, r.base, r.baseSource = fr.win, fr.base, fr.source
	scanP := fr.scanP
	// The window's count (and the baseline's, and their arrival spans)
	// with the baseline's in one scan when there is one: the preceding
	// hour's, read by resolveBaseline, or read now.
	var pair *countPair
	if r.base != nil {
		if pair = fr.pair; pair == nil || pair.win != r.win || pair.base != *r.base {
			if pair, err = r.countPair(r.win, *r.base); err != nil {
				return err
			}
		}
	}
	if pair != nil {
		r.nWin = pair.nWin
	} else if r.nWin, err = r.count(r.winWhere()); err != nil {
		return err
	}
	minN := max(r.cfg.MinRequests, stats.MinSampleSize(r.q, r.cfg.Level))
	if r.nWin < minN {
		r.note("%d requests in the window, fewer than the %d needed to judge the %v-quantile", r.nWin, minN, r.q)
		r.insufficient = true
		return nil
	}
	if r.base != nil {
		r.nBase, r.spans = pair.nBase, pair.spans
		if r.nBase < max(r.cfg.MinBaselineRequests, stats.MinSampleSize(r.q, r.cfg.Level)) {
			r.note("baseline %s holds %d requests, fewer than %d: analysed without a baseline", fmtInterval(*r.base), r.nBase, r.cfg.MinBaselineRequests)
			r.base, r.baseSource, r.nBase = nil, BaselineNone, 0
		}
	}
	// Both P99 intervals from one scan when there is a baseline.
	if r.base != nil {
		if r.winQ, r.baseQ, err = r.quantilePair(r.win, *r.base, r.nWin, r.nBase); err != nil {
			return err
		}
	} else if r.winQ, err = r.quantile(r.winWhere(), r.nWin); err != nil {
		return err
	}
	if f := r.req.Focus; f != nil {
		r.breach = stats.Breach{Breached: true, Reasons: []string{f.Level}}
		r.tailT = f.TailThresholdMS
		if r.base != nil {
			r.tailT = r.baseQ.Estimate
		}
		return r.attribute()
	}
	var baseCI *stats.QuantileCI
	if r.base != nil {
		baseCI = &r.baseQ
	}
	b := stats.DetectBreach(r.winQ, baseCI, &stats.BreachConfig{ThresholdMS: r.req.SLO.ThresholdMS, MinRelIncrease: r.relIncrease()})
	// With an SLO threshold the threshold decides (it is the team's
	// definition of broken); the baseline rule decides only without one.
	rule := "baseline"
	if r.req.SLO.ThresholdMS > 0 {
		rule = "slo"
	}
	r.breach = stats.Breach{Reasons: b.Reasons}
	for _, why := range b.Reasons {
		if why == rule {
			r.breach.Breached = true
		}
	}
	if r.req.SLO.ThresholdMS == 0 && r.base == nil {
		r.note("no SLO threshold and no baseline: a breach cannot be declared")
	}
	if !r.breach.Breached && rule == "baseline" && scanP > 0 && r.base != nil && r.material(r.winQ.Estimate, r.baseQ.Estimate) {
		// The stretch tailScan found is significant by its count of tail
		// requests, at the scan's corrected level; the quantiles' intervals
		// (a few dozen tail requests each) add no evidence, only the
		// materiality: the estimate up by the margin (dropped when its top
		// culprit is the demand: demandOnly).
		r.breach = stats.Breach{Breached: true, Reasons: append(r.breach.Reasons, ReasonTailCount)}
		r.note("the %v-quantile %.0f ms is up %.0f%% on the time before it (%.0f ms), its tail requests significantly more (p %.2g): a breach",
			r.q, r.winQ.Estimate, 100*(r.winQ.Estimate/r.baseQ.Estimate-1), r.baseQ.Estimate, scanP)
	}
	if !r.breach.Breached && rule == "baseline" && r.baseSource == BaselinePreceding {
		nr, err := r.breachInside(baseCI)
		if err != nil {
			return err
		}
		if nr != nil {
			r.win, r.nWin, r.winQ, r.qseries, r.breach = nr.win, nr.n, nr.q, nil, nr.breach
			r.spans = nil // the arrival spans (judgeDemand) of the narrowed window
		}
	}
	if !r.breach.Breached {
		return nil
	}
	r.tailT = r.req.SLO.ThresholdMS
	if r.tailT == 0 {
		r.tailT = r.baseQ.Estimate
	}
	return r.attribute()
}

// breachInside looks, when the whole window does not breach its
// preceding baseline, for the stretch of it where the quantile series
// changed (BreachStretch) and judges that stretch against the same
// baseline: a fault over a third of the window, diluted by the healthy
// minutes around it, is still a breach of the window. It returns the
// stretch when it breaches (the window narrows to it), nil otherwise; a
// stretch shorter than MinBreachStretch is a burst, not judged.
func (r *run) breachInside(baseCI *stats.QuantileCI) (*narrowing, error) {
	if r.win.End.Sub(r.win.Start) <= r.cfg.MinBreachStretch {
		return nil, nil // no stretch after the window's start is long enough: skip the series query
	}
	// The scope's own time scan (tailScan, against the window's earlier
	// stretches) is not tried here: at the live edge, with history before
	// the window, it took the first 45 s of a KV fault on one of two pods
	// for a model-wide breach (the live benchmark's seed 2 paged a prompt
	// shift on the model, 75 s before the right culprit); the entity scan
	// finds such a fault. The scan against the baseline's rate
	// (baselineTailScan) is, with MinBreachStretch as its shortest run.
	start, end, ok, err := r.breachStart()
	if err != nil {
		return nil, err
	}
	if ok && end.Sub(start) >= r.cfg.MinBreachStretch {
		stretch := Interval{Start: start, End: end}
		n, q, enough, err := r.stretchQuantile(stretch)
		if err != nil {
			return nil, err
		}
		if b := stats.DetectBreach(q, baseCI, &stats.BreachConfig{MinRelIncrease: r.relIncrease()}); enough && slices.Contains(b.Reasons, "baseline") {
			r.note("the whole window's %v-quantile %.0f ms is within the baseline rule, but the series changes at %s%s: window narrowed to %s (%.0f ms)",
				r.q, r.winQ.Estimate, start.UTC().Format(time.RFC3339), map[bool]string{true: " and recovers at " + end.UTC().Format(time.RFC3339)}[end.Before(r.win.End)], fmtInterval(stretch), q.Estimate)
			return &narrowing{win: stretch, n: n, q: q, breach: stats.Breach{Breached: true, Reasons: b.Reasons}}, nil
		}
	}
	return r.baselineTailScan(baseCI)
}

// stretchQuantile is the request count and quantile of a stretch of the
// window; enough is false (and q unset) below the sample size a quantile
// needs.
func (r *run) stretchQuantile(iv Interval) (n int, q stats.QuantileCI, enough bool, err error) {
	if n, err = r.count(r.whereIn(iv)); err != nil || n < max(r.cfg.MinRequests, stats.MinSampleSize(r.q, r.cfg.Level)) {
		return n, q, false, err
	}
	q, err = r.quantile(r.whereIn(iv), n)
	return n, q, err == nil, err
}

// baselineTailScan is breachInside's second look, when no change point of
// the quantile series breaches: a short fault at a low request rate (three
// minutes of a model's single engine, ~1,200 requests) lifts the stretch's
// quantile by a third, but its confidence interval, a few dozen tail
// requests wide, does not clear the baseline's by the rule's margin. Its
// requests above the baseline's quantile (and above its lower scan
// threshold) say so with far more power: the window is cut into
// scanBuckets stretches, and every run of them at least MinBreachStretch
// long is tested against the baseline's own rate above the same
// thresholds (scopeScan with the baseline as the past, at tailScan's
// corrected level). The run with the most excess tail breaches when its
// quantile estimate is up by the margin (MinRelIncrease) on the
// baseline's: significance from the counts, materiality from the
// estimate.
func (r *run) baselineTailScan(baseCI *stats.QuantileCI) (*narrowing, error) {
	if r.base == nil || baseCI == nil {
		return nil, nil
	}
	from, to, p, found, err := r.tailScan(r.base)
	if err != nil || !found {
		return nil, err
	}
	stretch := Interval{Start: from, End: to}
	n, sq, enough, err := r.stretchQuantile(stretch)
	if err != nil || !enough || !r.material(sq.Estimate, baseCI.Estimate) {
		return nil, err
	}
	r.note("the whole window's %v-quantile %.0f ms is within the baseline rule, but its requests above the baseline's gather in %s (p %.2g against the baseline's rate; %.0f ms against %.0f): window narrowed to it",
		r.q, r.winQ.Estimate, fmtInterval(stretch), p, sq.Estimate, baseCI.Estimate)
	return &narrowing{win: stretch, n: n, q: sq, breach: stats.Breach{Breached: true, Reasons: []string{ReasonTailCount}}}, nil
}

// demandOnly reports whether a breach rests on its count of tail requests
// alone (ReasonTailCount) and its top culprit (of cs, ranked) is the
// demand: a queue that more work built, or prefills crowding decodes. The
// quantile's interval does not establish such a stretch, and a fault-free
// fleet's load swings make it: its tail rises with the work that arrived
// (a fault-free tuning fleet, seed 1778, had such a breach on each
// question). The analysis then reports no breach, with a note.
func demandOnly(reasons []string, cs []Culprit) bool {
	return slices.Contains(reasons, ReasonTailCount) && demandFirst(cs)
}

// unexplainedCount reports whether a breach rests on its count of tail
// requests alone (ReasonTailCount) and no culprit explains it (cs empty).
// The count is a scan's finding, significant at a corrected level that a
// fleet of scopes crosses by chance now and then; what a breach of the
// quantile rule would stand on (the user's own definition of broken) it
// has not. Without a cause it is not reported: a fault-free holdout fleet
// (seed 100339, a model's arrivals swinging by a fifth) fired on three
// minutes with 30 tail requests of 840 and no culprit. A fault it misses
// this way was missed already (an incident that names nothing).
func unexplainedCount(reasons []string, cs []Culprit) bool {
	return slices.Contains(reasons, ReasonTailCount) && len(cs) == 0
}

// demandFirst reports whether the top culprit of cs (ranked) is the
// demand: a queue that more work built, or prefills crowding decodes.
func demandFirst(cs []Culprit) bool {
	if len(cs) == 0 {
		return false
	}
	switch cs[0].Cause {
	case schemas.CauseQueueSaturation, schemas.CausePrefillInterference:
		return true
	}
	return false
}

// loadSwing reports whether a breach of the whole scope is its load
// served within capacity (Config.SwingQueueShare): its top culprit (of
// cs, ranked) is the scope's own demand, its quantile up by less than
// SwingMaxRise, and the queue culprit's attributable fraction, returned,
// not significantly past SwingQueueShare (its 95% interval reaching below
// it: a fault-free model's 2-minute arrival burst paged its queue at 0.16
// [0.02, 0.30], fresh tuning seed 5555). An entity's breach, an SLO
// threshold's, or a breach without a baseline is never one. A culprit on
// the scope's only engine (Candidate.WholeScope: named on it, not
// localized within the scope) acts on the whole scope: a one-engine
// model's arrivals swinging by half again were paged as its engine's
// prefill load and queue (fresh fault-free tuning seed 5509, both
// questions).
//
// A queue judged a symptom (judgeDemand: no more arrivals than the
// load's own swings) is no sign of capacity exceeded: with the demand
// first, what slowed its service is the load itself. A fresh fault-free
// tuning fleet (seed 6079, healthy before, the look-back): a model's
// arrivals ×1.29 over three minutes (×0.97 at the lower end of their
// interval), its P99 ×1.27, prefills crowding decodes first at 0.48 and
// the queue, a symptom, at 0.39 [0.28, 0.50]; paged on two questions.
//
// Past SwingMaxRise the breach is still a swing when the queue's own
// estimate is below SwingQueueShare (not merely its interval) and the
// scope's arrivals in the window are at least swingArrivalRise its
// baseline's: a burst of arrivals that bigger batches served, however
// far it lifted the quantile for its minutes. Fresh fault-free tuning
// fleets, no earlier data: a one-pod model's arrivals doubled for one
// minute (464 against ~200) and its P99 over three minutes rose ×2.97 on
// the three before, prefills crowding decodes at 1.0 of the tail and no
// queue culprit (seed 5905); another model's ×1.62 on a burst of 734
// arrivals against ~500 (5757). The surges of the tuning fleets past
// ×1.5 held 0.22–0.66 of their tails in the queue; a fault slowing the
// scope's only engine brings no more arrivals.
func (r *run) loadSwing(cs []Culprit) (float64, bool) {
	if r.cfg.SwingQueueShare <= 0 || r.req.Focus != nil || r.req.SLO.ThresholdMS > 0 || r.base == nil || r.baseQ.Estimate <= 0 {
		return 0, false
	}
	if !demandFirst(cs) || !r.onWholeScope(cs[0]) {
		return 0, false
	}
	var q, lo float64
	for _, c := range cs {
		if k := r.culpritCandidate(c); c.Cause == schemas.CauseQueueSaturation && r.onWholeScope(c) && (k == nil || !k.Symptom) {
			q, lo = c.AttributableFraction, r.fractionLow(c)
		}
	}
	if r.winQ.Estimate < r.baseQ.Estimate*r.cfg.SwingMaxRise {
		return q, lo < r.cfg.SwingQueueShare
	}
	if q >= r.cfg.SwingQueueShare {
		return 0, false
	}
	rise, ok := r.scopeArrivalRise()
	return q, ok && rise >= swingArrivalRise
}

// swingArrivalRise is the rise of the scope's arrival rate, window over
// baseline, at which a demand-led breach past Config.SwingMaxRise is a
// burst of load (loadSwing).
const swingArrivalRise = 1.1

// scopeArrivalRise is the scope's arrival rate in the window over its
// baseline's (judgeDemand's rates: requests over the span of their
// arrivals); not ok when it cannot be told.
func (r *run) scopeArrivalRise() (float64, bool) {
	nw, nb := r.scopeRequests()
	ws, bs, err := r.arrivalSpans()
	if err != nil || nw == 0 || nb == 0 || ws <= 0 || bs <= 0 {
		return 0, false
	}
	return (nw / ws) / (nb / bs), true
}

// fractionLow is the lower end of culprit c's attributable fraction's 95%
// interval (its estimate when its candidate is not found).
func (r *run) fractionLow(c Culprit) float64 {
	if k := r.culpritCandidate(c); k != nil {
		return k.Estimate.Attributed.CI[0]
	}
	return c.AttributableFraction
}

// onWholeScope reports whether culprit c acts on the whole scope: it names
// no entity within it, or the scope's only engine (Candidate.WholeScope).
func (r *run) onWholeScope(c Culprit) bool {
	if scopeWide(c.Entity) {
		return true
	}
	k := r.culpritCandidate(c)
	return k != nil && k.WholeScope
}

// culpritCandidate is the candidate that made culprit c (nil when none).
func (r *run) culpritCandidate(c Culprit) *Candidate {
	for _, k := range r.all() {
		if k.cand.Culprit && k.cand.Cause == c.Cause && k.cand.Entity == c.Entity {
			return &k.cand
		}
	}
	return nil
}

// material reports whether a quantile estimate is up by the breach rule's
// margin (MinRelIncrease) on the baseline's: what a count-declared breach
// (ReasonTailCount) asks of the estimate, its significance being the
// counts'.
func (r *run) material(q, base float64) bool {
	return q > base*(1+math.Max(r.cfg.MinRelIncrease, 0))
}

// ReasonTailCount is the breach reason (Analysis.Breach.Reasons) of a
// stretch whose quantile is up by the margin on the time before it and
// whose count of tail requests, not the quantiles' intervals, makes it
// significant (baselineTailScan, tailScan's stretch).
const ReasonTailCount = "tail_count"

// narrowing is a breach inside the window: the stretch that breaches,
// its request count and quantile.
type narrowing struct {
	win    Interval
	n      int
	q      stats.QuantileCI
	breach stats.Breach
}

func (r *run) relIncrease() float64 {
	if r.cfg.MinRelIncrease == 0 {
		return -1 // DetectBreach: negative means no margin
	}
	return r.cfg.MinRelIncrease
}

func fmtInterval(iv Interval) string {
	return iv.Start.UTC().Format(time.RFC3339) + ".." + iv.End.UTC().Format(time.RFC3339)
}

// overlaps reports whether the half-open intervals a and b share time.
func overlaps(a, b Interval) bool {
	return a.Start.Before(b.End) && b.Start.Before(a.End)
}

// framing is the window and baseline a question is judged on, as
// resolveBaseline settled them.
type framing struct {
	win    Interval   // the window, narrowed to a change point's stretch
	base   *Interval  // nil: no baseline
	source string     // Baseline*
	pair   *countPair // the window's and the preceding hour's counts, when read
	// scanP is the p-value of tailScan's stretch when the window is
	// narrowed to it (0 otherwise): its significance is the counts'.
	scanP float64
}

// resolveBaseline applies the baseline rule of design.md: explicit; else the
// BaselineLength before the window when it holds enough requests; else the
// healthy part of the window before the breach began; else none.
func (r *run) resolveBaseline() (framing, error) {
	fr := framing{win: r.win}
	if r.req.Baseline != nil {
		b := *r.req.Baseline
		fr.base, fr.source = &b, BaselineExplicit
		return fr, nil
	}
	pre := Interval{Start: r.win.Start.Add(-r.cfg.BaselineLength), End: r.win.Start}
	pair, err := r.countPair(r.win, pre)
	if err != nil {
		return fr, err
	}
	n := pair.nBase
	fr.pair = pair
	if n >= r.cfg.MinBaselineRequests {
		fr.base, fr.source = &pre, BaselinePreceding
		return fr, nil
	}
	start, end, ok, err := r.breachStart()
	if err != nil {
		return fr, err
	}
	if f := r.req.Focus; ok && f != nil && f.Stretch != nil && !overlaps(Interval{Start: start, End: end}, *f.Stretch) {
		// The scope's quantile changed at another time than the entity
		// turned worse: its narrowed window would judge the entity on
		// another stretch of time (tuning seed 5052: a host's PCIe fault
		// from 14:17, its engine worse than its peers 14:09–14:27, the
		// model's series up 14:02–14:09 with a long-output swing; the
		// focused analysis named that swing and the breach was dropped).
		// A change point inside the stretch still frames it: tried with
		// "holds half of the stretch", a pod's prefill interference
		// (5107, fault before: the model's change 14:21–14:23 inside the
		// pod's 14:06–14:27) was judged on 14:06–14:30 and lost.
		r.note("the scope's change point (%s) is outside the stretch where %s %s turned worse (%s): the entity's stretch frames it",
			fmtInterval(Interval{Start: start, End: end}), f.Level, EntityString(f.Entity), fmtInterval(*f.Stretch))
		ok = false
	}
	if f := r.req.Focus; !ok && f != nil && f.Stretch != nil && f.Stretch.Start.After(r.win.Start) && f.Stretch.Start.Before(r.win.End) {
		// The entity's own change: the time scan found where it turned
		// worse than its peers or its past; what came before is its own
		// recent past, the scope's change point being none.
		b := Interval{Start: r.win.Start, End: f.Stretch.Start}
		fr.base, fr.source = &b, BaselineChangePoint
		fr.win = Interval{Start: f.Stretch.Start, End: r.win.End}
		r.note("baseline from the window itself: %s %s turned worse at %s; window narrowed to %s", f.Level, EntityString(f.Entity), f.Stretch.Start.UTC().Format(time.RFC3339), fmtInterval(fr.win))
		return fr, nil
	}
	if !ok && r.req.Focus == nil {
		// A breach from the window's start that recovered inside it: the
		// time after the recovery is the healthy yardstick.
		end, rec, err := r.breachRecovery()
		if err != nil {
			return fr, err
		}
		// A recovery needs MinBreachStretch after it, as a breach does: a
		// trough in the window's last minute is not the healthy yardstick
		// of everything before it (the live benchmark's seed 2, four
		// minutes into its data: the last 59 s, ×0.63 the P99 before
		// them, paged the model's prefill load 16 s after a KV fault's
		// onset on one of its pods).
		if rec && r.win.End.Sub(end) >= r.cfg.MinBreachStretch {
			b := Interval{Start: end, End: r.win.End}
			fr.base, fr.source = &b, BaselineChangePoint
			fr.win = Interval{Start: r.win.Start, End: end}
			r.note("baseline from the window itself: the %v-quantile series was high from the window's start and recovered at %s; window narrowed to %s, the time after it the baseline", r.q, end.UTC().Format(time.RFC3339), fmtInterval(fr.win))
			return fr, nil
		}
	}
	if !ok && r.req.Focus == nil {
		// No step in the quantile series: a fault that comes and goes (XID
		// bursts) needs two change points and pays their penalty twice.
		// Its tail requests still pile up in a stretch of the window.
		from, to, p, found, err := r.tailScan(nil)
		if err != nil {
			return fr, err
		}
		if found {
			b := Interval{Start: r.win.Start, End: from}
			fr.base, fr.source, fr.scanP = &b, BaselineChangePoint, p
			fr.win = Interval{Start: from, End: to}
			r.note("baseline from the window itself: the scope's tail requests gather in %s (p %.2g against its own earlier rate); window narrowed to it, the time before it the baseline", fmtInterval(fr.win), p)
			return fr, nil
		}
	}
	if !ok {
		fr.source = BaselineNone
		r.note("no baseline: %d requests in the %s before the window and no change point inside it", n, r.cfg.BaselineLength)
		return fr, nil
	}
	b := Interval{Start: r.win.Start, End: start}
	fr.base, fr.source = &b, BaselineChangePoint
	recovered := end.Before(r.win.End)
	fr.win = Interval{Start: start, End: end}
	if !recovered {
		r.note("baseline from the window itself: the %v-quantile series changes at %s; window narrowed to %s", r.q, start.UTC().Format(time.RFC3339), fmtInterval(fr.win))
	} else {
		r.note("baseline from the window itself: the %v-quantile series changes at %s and recovers at %s; window narrowed to %s", r.q, start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), fmtInterval(fr.win))
	}
	return fr, nil
}

// breachStart finds where the breach began inside the window from the
// per-bucket log-quantile series (BreachStart).
func (r *run) breachStart() (start, end time.Time, ok bool, err error) {
	series, starts, err := r.quantileSeries()
	if err != nil || len(series) == 0 {
		return start, end, false, err
	}
	i, j, ok := stats.BreachStretch(series, math.Log1p(math.Max(r.cfg.MinRelIncrease, 0.05)), nil)
	if !ok || !starts[i].After(r.win.Start) {
		return start, end, false, nil
	}
	end = r.win.End
	if j < len(starts) {
		end = starts[j]
	}
	return starts[i], end, true, nil
}

// tailScan is the scope's own time scan, for a window with no baseline
// and no step in its quantile series: the window cut into scanBuckets
// stretches, the requests above the window's quantile (and above the
// lower scan threshold) counted in each, and every run of stretches
// after the first tested against the scope's own rate before it
// (ownPastSF), Bonferroni-corrected over the runs, both thresholds and the
// sweep's scopes (Request.Scopes) at Config.EntityAlpha. It returns the significant run, at least
// MinBreachStretch long, with the most excess tail (scopeScan); whether
// it is a breach (material) is for the breach rule, against the time
// before it.
//
// With against (a baseline before the window), the thresholds are the
// baseline's quantiles and every run, the first stretch's too, is tested
// against the baseline's rate above them instead (baselineTailScan).
func (r *run) tailScan(against *Interval) (from, to time.Time, p float64, ok bool, err error) {
	span := r.win.End.UnixNano() - r.win.Start.UnixNano()
	width := (span + scanBuckets - 1) / scanBuckets
	if time.Duration(width) <= 0 {
		return from, to, 1, false, nil
	}
	thresholdsWhere, bucket, where := r.winWhere(), fmt.Sprintf("toFloat64(intDiv(start_ns - %d, %d))", r.win.Start.UnixNano(), width), r.winWhere()
	if against != nil {
		// The baseline's rows fall in bucket -1.
		thresholdsWhere, where = r.whereIn(*against), r.whereIn(r.win, *against)
		bucket = fmt.Sprintf("if(%s, %s, -1)", r.inWin(), bucket)
	}
	lv := scanThresholds(r.q)
	ts, err := r.floats("scan thresholds", fmt.Sprintf("SELECT toFloat64(quantileExact(%s)(%s)), toFloat64(quantileExact(%s)(%s)) FROM %s WHERE %s",
		dag.FormatFloat(lv[0]), r.y, dag.FormatFloat(lv[1]), r.y, r.table(), thresholdsWhere), 2)
	if err != nil || !finite(ts[0]) || !finite(ts[1]) {
		return from, to, 1, false, err
	}
	var buckets [2][scanBuckets]bucketCounts
	var past [2]bucketCounts
	q := fmt.Sprintf("SELECT %s AS tc_b, toFloat64(count()), toFloat64(countIf(%s > %s)), toFloat64(countIf(%s > %s)) FROM %s WHERE %s GROUP BY tc_b",
		bucket, r.y, dag.FormatFloat(ts[0]), r.y, dag.FormatFloat(ts[1]), r.table(), where)
	err = r.query("scope buckets", q, func(rows Rows) error {
		var b, n, k0, k1 float64
		if err := rows.Scan(&b, &n, &k0, &k1); err != nil {
			return err
		}
		switch i := int(b); {
		case b < 0 && against != nil:
			past = [2]bucketCounts{{n: n, k: k0}, {n: n, k: k1}}
		case b >= 0 && i < scanBuckets:
			buckets[0][i] = bucketCounts{n: buckets[0][i].n + n, k: buckets[0][i].k + k0}
			buckets[1][i] = bucketCounts{n: buckets[1][i].n + n, k: buckets[1][i].k + k1}
		}
		return nil
	})
	if err != nil {
		return from, to, 1, false, err
	}
	base := &past
	if against == nil {
		base = nil
	}
	minLen := int((r.cfg.MinBreachStretch + time.Duration(width) - 1) / time.Duration(width))
	lo, hi, best, found := scopeScan(buckets, [2]float64{1 - lv[0], 1 - lv[1]}, minLen, scopeScanAlpha(r.cfg.EntityAlpha, r.req.Scopes), base)
	if !found {
		return from, to, best, false, nil
	}
	from = time.Unix(0, r.win.Start.UnixNano()+int64(lo)*width).UTC()
	to = time.Unix(0, min(r.win.Start.UnixNano()+int64(hi+1)*width, r.win.End.UnixNano())).UTC()
	return from, to, best, true, nil
}

// scopeScanAlpha is the level of each test of a scope's time scan: the
// false-alarm rate alpha shared among the runs of stretches, both
// thresholds and the scopes a sweep asks together.
func scopeScanAlpha(alpha float64, scopes int) float64 {
	return alpha / float64(2*scanBuckets*(scanBuckets+1)*max(scopes, 1))
}

// outsideSpread is the coefficient of variation of the tail rate between
// the stretches outside [l, h] beyond binomial noise: Pearson's dispersion
// φ of their counts, a Beta-Binomial's intra-class correlation
// ρ = (φ − 1)/(n̄ − 1), CV² = ρ(1 − p)/p (method of moments). 0 with fewer
// than four such stretches, no tail request among them, or no excess
// spread. Replayed traffic is bursty: a fault-free tuning fleet's ten
// stretches held 4, 0, 10, 19, 6, 3, 1, 11, 1 and 2 requests above the
// window's P99 (seed 6173: a CV near 0.9, where the MinCV floor says 0.25).
func outsideSpread(bs []bucketCounts, l, h int) float64 {
	var n, k, m float64
	for j, b := range bs {
		if (j < l || j > h) && b.n > 0 {
			n, k, m = n+b.n, k+b.k, m+1
		}
	}
	if m < 4 || k == 0 || k == n {
		return 0
	}
	p := k / n
	var x2 float64
	for j, b := range bs {
		if (j < l || j > h) && b.n > 0 {
			e := b.n * p
			x2 += (b.k - e) * (b.k - e) / (e * (1 - p))
		}
	}
	phi, nbar := x2/(m-1), n/m
	if phi <= 1 || nbar <= 1 {
		return 0
	}
	return math.Sqrt((phi - 1) / (nbar - 1) * (1 - p) / p)
}

// scopeScan is tailScan's search over its counts (one row per scan
// threshold, tails[i] the share of the window above threshold i): among
// the runs of at least minLen stretches, after the first, whose tail count
// is significant (p ≤ alpha) against the scope's own rate before it
// (ownPastSF), the one with the most excess tail requests, each counted
// in units of its threshold's share (an excess over the P95 counts a fifth
// of one over the P99). The most significant run is not the breach's
// extent: the last three minutes of a power cap that lasted 26 (its worst,
// over the P99, p 10⁻¹¹) outscored the whole of it (over the P95, p 10⁻⁸),
// and the analysis of that end named another cause. A run counts only
// when the other threshold's count rises in it too. ok is false when no
// run is significant; p is then the smallest p-value.
//
// With base, every run (the first stretch's too) is tested against base,
// the counts of a baseline before the window above the same thresholds,
// instead.
func scopeScan(buckets [2][scanBuckets]bucketCounts, tails [2]float64, minLen int, alpha float64, base *[2]bucketCounts) (lo, hi int, p float64, ok bool) {
	// sum is the counts of threshold ti over stretches [a, b).
	sum := func(ti, a, b int) (c bucketCounts) {
		for _, x := range buckets[ti][a:b] {
			c.n, c.k = c.n+x.n, c.k+x.k
		}
		return c
	}
	p = 1
	best := math.Inf(-1)
	first := 1
	if base != nil {
		first = 0
	}
	for ti := range buckets {
		for l := first; l < scanBuckets; l++ {
			past := sum(ti, 0, l)
			if base != nil {
				past = base[ti]
			}
			for h := l + minLen - 1; h < scanBuckets; h++ {
				cur := sum(ti, l, h+1)
				// Without a baseline the yardstick is the window's own
				// stretches, whose tail counts swing as the traffic does.
				cv := 0.0
				if base == nil {
					cv = outsideSpread(buckets[ti][:], l, h) / math.Sqrt(float64(h-l+1))
				}
				q, tested := ownPastSF(cur, past, cv)
				if !tested {
					continue
				}
				if !ok {
					p = min(p, q)
				}
				if q > alpha {
					continue
				}
				// The other threshold must rise in the same run too
				// (one-sided, 5%, no floor): a slowdown moves the tail,
				// not a handful of requests above one quantile. A
				// fault-free tuning run's last three minutes had 19
				// requests above the window's P99 against 40 in the 27
				// before (p 10⁻⁵), and above its P95 33 against 5% before.
				oc, op := sum(1-ti, l, h+1), sum(1-ti, 0, l)
				if base != nil {
					op = base[1-ti]
				}
				if omu, os := ownPastPrior(op, 1); betaBinomialSF(oc.k, oc.n, omu*os, (1-omu)*os) > 0.05 {
					continue
				}
				mu, _ := ownPastPrior(past, 1)
				if score := (cur.k - cur.n*mu) / tails[ti]; !ok || score > best {
					lo, hi, p, ok, best = l, h, q, true, score
				}
			}
		}
	}
	return lo, hi, p, ok
}

// breachRecovery finds where a breach that was on from the window's start
// ended inside it (BreachRecovery).
func (r *run) breachRecovery() (time.Time, bool, error) {
	series, starts, err := r.quantileSeries()
	if err != nil || len(series) == 0 {
		return time.Time{}, false, err
	}
	i, ok := stats.BreachRecovery(series, math.Log1p(math.Max(r.cfg.MinRelIncrease, 0.05)), nil)
	if !ok || !starts[i].After(r.win.Start) {
		return time.Time{}, false, nil
	}
	return starts[i], true, nil
}

// quantileSeries is the window's per-bucket log-quantile series (about 40
// buckets of 100+ requests, at least 10 s; buckets of fewer than 50 rows
// left out) and each bucket's start; memoized.
func (r *run) quantileSeries() ([]float64, []time.Time, error) {
	if r.qseries != nil {
		return r.qseries.v, r.qseries.t, nil
	}
	n, err := r.count(r.winWhere())
	if err != nil || n == 0 {
		return nil, nil, err
	}
	span := r.win.End.Sub(r.win.Start)
	// About 40 buckets, each expected to hold 100+ requests, at least 10 s.
	w := span / 40
	if per := time.Duration(float64(span) * 100 / float64(n)); per > w {
		w = per
	}
	w = max(w.Round(time.Second), 10*time.Second)
	const minBucketRows = 50
	// Buckets count from the window's start, not from the epoch: a window
	// asked at any time ("the last 30 minutes") would otherwise begin and
	// end in partial buckets, dropped under minBucketRows or noisier than
	// the rest, and its change points would move with the clock (the same
	// data replayed from a start off the grid gave another narrowing).
	from := r.win.Start.UnixNano()
	q := fmt.Sprintf(`SELECT toFloat64(intDiv(start_ns - %d, %d)) AS tc_b, toFloat64(count()), toFloat64(quantileExact(%s)(%s))
FROM %s WHERE %s GROUP BY tc_b ORDER BY tc_b`, from, w.Nanoseconds(), dag.FormatFloat(r.q), r.y, r.table(), r.winWhere())
	var series []float64
	var starts []time.Time
	err = r.query("quantile series", q, func(rows Rows) error {
		var b, c, v float64
		if err := rows.Scan(&b, &c, &v); err != nil {
			return err
		}
		if c >= minBucketRows && v > 0 {
			series = append(series, math.Log(v))
			starts = append(starts, time.Unix(0, from+int64(b)*w.Nanoseconds()))
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	r.qseries = &qseries{series, starts}
	return series, starts, nil
}

type qseries struct {
	v []float64
	t []time.Time
}

func (r *run) result() *Analysis {
	slo := r.req.SLO
	if slo.Scope == nil {
		slo.Scope = map[string]string{}
	}
	in := Incident{
		Status:        StatusOK,
		SLO:           slo,
		Window:        r.win,
		ObservedP99MS: r.winQ.Estimate,
		BaselineP99MS: r.baseQ.Estimate,
		Requests:      int64(r.nWin),
		TailRequests:  int64(r.nWinTail),
		Method:        Method{Estimator: Estimator, DAG: r.a.dag.Version(), Version: r.cfg.Version},
	}
	if r.base != nil {
		in.Baseline = *r.base
	} else {
		in.Baseline = Interval{Start: r.win.Start, End: r.win.Start}
	}
	an := &Analysis{
		Insufficient:     r.insufficient,
		Breach:           r.breach,
		BaselineSource:   r.baseSource,
		WindowQuantile:   r.winQ,
		BaselineQuantile: r.baseQ,
		TailThresholdMS:  r.tailT,
		Notes:            r.notes,
		Queries:          r.queries,
		QueryTime:        r.qtime,
	}
	if r.breach.Breached {
		in.Status = StatusFiring
		in.IncidentID = r.req.IncidentID
		if in.IncidentID == "" {
			in.IncidentID = IncidentID(slo.Scope, r.win.Start)
		}
		var cs []Culprit
		for _, c := range r.all() {
			an.Candidates = append(an.Candidates, c.cand)
			if c.cand.Culprit {
				cs = append(cs, c.culprit())
			}
		}
		RankCulprits(cs)
		cs = dedupeCulprits(cs, an.Candidates)
		cs = orderByMechanism(r.a.dag, cs, an.Candidates, r.mediates, r.evicts)
		an.Queries, an.QueryTime, an.Notes = r.queries, r.qtime, r.notes
		if f := r.req.Focus; f != nil {
			cs = focusCulprits(cs, an.Candidates, f.Entity)
		}
		if len(cs) > r.cfg.MaxCulprits {
			for i := r.cfg.MaxCulprits; i < len(cs); i++ {
				for k := range an.Candidates {
					if an.Candidates[k].Cause == cs[i].Cause && an.Candidates[k].Entity == cs[i].Entity {
						an.Candidates[k].Culprit = false
					}
				}
			}
			cs = cs[:r.cfg.MaxCulprits]
		}
		if unexplainedCount(r.breach.Reasons, cs) {
			r.note("the tail requests gather in %s (%.0f of %d past %.0f ms), but no cause's attributable fraction there is significantly above %v: a count of tail requests with nothing to explain it is not a breach",
				fmtInterval(r.win), r.nWinTail, r.nWin, r.tailT, r.cfg.MinAF)
			an.Notes, an.Breach.Breached = r.notes, false
			in.Status, in.IncidentID, cs = StatusOK, "", nil
		} else if demandOnly(r.breach.Reasons, cs) {
			r.note("the tail requests gather in %s, but what the analysis finds there is the demand (%s): a swing of load, not a breach", fmtInterval(r.win), cs[0].Cause)
			an.Notes, an.Breach.Breached = r.notes, false
			in.Status, in.IncidentID, cs = StatusOK, "", nil
		} else if q, ok := r.loadSwing(cs); ok {
			r.note("the %v-quantile is up %.0f%% on its baseline with the %s of the whole scope first, but the queue explains %.0f%% of the tail (not significantly past %.0f%%): the load was served in bigger batches, not left waiting for capacity; a swing of load, not a breach",
				r.q, 100*(r.winQ.Estimate/r.baseQ.Estimate-1), cs[0].Cause, 100*q, 100*r.cfg.SwingQueueShare)
			an.Notes, an.Breach.Breached = r.notes, false
			in.Status, in.IncidentID, cs = StatusOK, "", nil
		} else {
			in.EntityHealth = r.entityHealth()
		}
		in.Culprits = cs
		if len(cs) == 0 && in.Status == StatusFiring {
			r.note("breach without a credible culprit: no cause's attributable fraction is significantly above %v", r.cfg.MinAF)
			an.Notes = r.notes
		}
	}
	if f := r.req.Focus; f != nil {
		w := *f
		in.Breach = &w
	}
	in.Notes = an.Notes
	an.Incident = in
	return an
}

// focusCulprits puts the culprits acting on the breached entity first
// (stable); the others follow. A mechanism acting on the whole scope acts
// on the entity too: it keeps its place among them when no measured
// mechanism acts on the entity and it explains more of the tail than the
// entity's entity.degraded (scopeWideFirst). Ranks are renumbered.
func focusCulprits(cs []Culprit, cands []Candidate, e Entity) []Culprit {
	wide := scopeWideFirst(cs, cands, e)
	var on, off []Culprit
	for _, c := range cs {
		if c.Entity.ActsOn(e) || wide && scopeWide(c.Entity) {
			on = append(on, c)
		} else {
			off = append(off, c)
		}
	}
	out := append(on, off...)
	for i := range out {
		out[i].Rank = i + 1
	}
	return out
}

// dedupeCulprits keeps the best-ranked culprit of each (cause, entity):
// two DAG nodes may measure one cause (the engine's prompt mix and the
// request's own prompt both measure workload.long_prompts). The other
// candidates are marked as not culprits, and the ranks renumbered.
func dedupeCulprits(cs []Culprit, cands []Candidate) []Culprit {
	type key struct {
		cause  Cause
		entity Entity
	}
	seen := map[key]bool{}
	out := cs[:0]
	for _, c := range cs {
		k := key{c.Cause, c.Entity}
		if strings.HasPrefix(string(c.Cause), "workload.") {
			// One workload shift is one culprit, whether it was measured
			// on the scope or concentrated on an engine.
			k.entity = Entity{}
		}
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, c)
	}
	kept := map[key]float64{}
	for _, c := range out {
		kept[key{c.Cause, c.Entity}] = c.AttributableFraction
	}
	for i := range cands {
		c := &cands[i]
		if af, ok := kept[key{c.Cause, c.Entity}]; ok && c.Culprit && round(c.Estimate.Attributed.Value, 4) != af {
			c.Culprit = false
		}
	}
	for i := range out {
		out[i].Rank = i + 1
	}
	return out
}

// orderByMechanism refines the ranking with what the DAG says about how
// culprits relate, after RankCulprits ordered them by attributable fraction:
//
//   - Upstream first: a culprit whose DAG node is an ancestor of another
//     culprit's, acting on the same reach (both scope-wide, or the same
//     engine or GPU), with at least 0.3 of its attributable fraction (its
//     total effect, through the other included), outranks it: prefill load, KV usage or the prefix
//     cache moving because the workload changed, or prefill load rising
//     because a backlog keeps the engine prefilling, are consequences, not
//     the root.
//   - A workload culprit localized to one engine (that engine alone got the
//     long requests: a routing matter) ranks below the engine mechanisms
//     downstream of it on that engine.
//   - A symptom (Candidate.Symptom: a queue where arrivals did not rise)
//     ranks below every other culprit on the same engine, GPU or host (an
//     engine's GPUs are not all in its entity), or below all of them when
//     either acts on the whole scope: that other culprit
//     slowed the service the queue waits for. An entity.degraded that
//     work moved to from its peers (Candidate.MovedLoad) ranks below every
//     culprit of the scope: the cause is where the work left. This rule
//     wins over the others.
//   - KV pressure before the prefix-cache misses it causes (evicts): a
//     full cache evicts the cached prefixes, so a prefix-miss culprit on
//     the same reach whose shift is absent where the cache had room ranks
//     below the KV culprit. (No DAG edge: a prefix cache that stops
//     hitting fills the KV cache too, and the edge cost prefix faults
//     their rank in tuning runs.)
//   - entity.degraded ("slow and no measured mechanism explains it") ranks
//     below every measured mechanism that is a culprit on the same engine
//     or GPU, or on any engine or GPU of a degraded host: that mechanism
//     explains at least part of it.
//
// Ranks are renumbered; the order is otherwise kept.
func orderByMechanism(g *dag.DAG, cs []Culprit, cands []Candidate, mediates func(upNode, downNode string, up, down Culprit) bool, evicts func(kv, prefix Culprit) bool) []Culprit {
	if len(cs) < 2 {
		return cs
	}
	cand := func(c Culprit) Candidate {
		for _, k := range cands {
			if k.Culprit && k.Cause == c.Cause && k.Entity == c.Entity {
				return k
			}
		}
		return Candidate{}
	}
	nodes := make([]string, len(cs))
	symptom, moved := make([]bool, len(cs)), make([]bool, len(cs))
	whole := map[Entity]bool{} // entities that are the whole scope
	for i, c := range cs {
		k := cand(c)
		nodes[i], symptom[i], moved[i] = k.Node, k.Symptom, k.MovedLoad
		if k.WholeScope {
			whole[c.Entity] = true
		}
	}
	localized := func(e Entity) bool {
		return (e.Pod != "" || e.GPU != "" || e.Engine != "" || e.Host != "") && !whole[e]
	}
	hostOnly := func(e Entity) bool { return e.Host != "" && e.Pod == "" && e.GPU == "" && e.Engine == "" }
	overlaps := func(a, b Entity) bool {
		return (a.Pod != "" && a.Pod == b.Pod) || (a.GPU != "" && a.GPU == b.GPU) || (a.Engine != "" && a.Host != "" && a.Host == b.Host && a.Engine == b.Engine && a.Pod == b.Pod) ||
			((hostOnly(a) || hostOnly(b)) && a.Host == b.Host) // a whole host holds its engines and GPUs
	}
	workload := func(c Culprit) bool { return strings.HasPrefix(string(c.Cause), "workload.") }
	// sameReach: both act on the whole scope, or on one and the same
	// engine or GPU.
	sameReach := func(a, b Entity) bool {
		if !localized(a) || !localized(b) {
			return !localized(a) && !localized(b)
		}
		return overlaps(a, b)
	}
	// before reports whether j must come before i.
	before := func(i, j int) bool {
		a, b := cs[i], cs[j]
		if nodes[i] == "" || nodes[j] == "" {
			return false
		}
		if symptom[i] != symptom[j] && (moved[i] || moved[j] || !localized(a.Entity) || !localized(b.Entity) || overlaps(a.Entity, b.Entity) || a.Entity.Host != "" && a.Entity.Host == b.Entity.Host) {
			return symptom[i] // the symptom last, whatever the other rules say
		}
		switch {
		case a.Cause == schemas.CauseEntityDegraded && b.Cause != schemas.CauseEntityDegraded && !workload(b) && overlaps(a.Entity, b.Entity):
			return true
		case a.Cause == schemas.CauseEntityDegraded && whole[a.Entity] && b.Cause != schemas.CauseEntityDegraded && !localized(b.Entity) && b.AttributableFraction >= 0.5*a.AttributableFraction:
			// The scope's only host, judged against its own baseline, is
			// the scope's change net of the mechanisms, which shares the
			// window with every mechanism of the whole scope: one that
			// explains half as much of the tail is the better answer.
			return true
		case workload(a) && localized(a.Entity) && !workload(b) && overlaps(a.Entity, b.Entity) && descends(g, nodes[i], nodes[j]):
			return true // a routing matter: the engine mechanism first
		case a.Cause == schemas.CausePrefixMiss && b.Cause == schemas.CauseKVPreemption && sameReach(a.Entity, b.Entity) && evicts != nil && evicts(b, a):
			return true // a full cache evicts the cached prefixes: the misses are the KV fault's
		case b.Cause != schemas.CauseEntityDegraded && !(workload(b) && localized(b.Entity)) && sameReach(a.Entity, b.Entity) && descends(g, nodes[j], nodes[i]) &&
			(b.AttributableFraction >= 0.3*a.AttributableFraction || mediates != nil && mediates(nodes[j], nodes[i], b, a)):
			// Upstream first: b's mechanism drives a's. b's share of the
			// tail is its total effect, through a included: when it is
			// far below a's, most of a is not b's doing, unless b's shift
			// explains most of a's (mediates: b's measure is noisy).
			return true
		}
		return false
	}
	// Bubble the few culprits into place; every move follows one rule, and
	// a bound stops any cycle the rules could form.
	for pass := 0; pass < len(cs)*len(cs); pass++ {
		moved := false
		for i := 0; i < len(cs); i++ {
			for j := i + 1; j < len(cs); j++ {
				if before(i, j) && !before(j, i) {
					c, n, s := cs[j], nodes[j], symptom[j]
					copy(cs[i+1:j+1], cs[i:j])
					copy(nodes[i+1:j+1], nodes[i:j])
					copy(symptom[i+1:j+1], symptom[i:j])
					cs[i], nodes[i], symptom[i] = c, n, s
					moved = true
				}
			}
		}
		if !moved {
			break
		}
	}
	for i := range cs {
		cs[i].Rank = i + 1
	}
	return cs
}

// descends reports whether node b is a descendant of node a in g.
func descends(g *dag.DAG, a, b string) bool {
	seen := map[string]bool{}
	stack := []string{a}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range g.Children(n) {
			if c == b {
				return true
			}
			if !seen[c] {
				seen[c] = true
				stack = append(stack, c)
			}
		}
	}
	return false
}
