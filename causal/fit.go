package causal

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/causal/sqlgen"
	cstats "github.com/tailcause/tailcause/causal/stats" // the fits name their sufficient statistics "stats"
	"github.com/tailcause/tailcause/schemas"
)

// fitResult is a fitted design: both models, their targeted meats (of
// coefficient 1, the treatment) and the extra sums.
type fitResult struct {
	design sqlgen.Design
	fits   []*cstats.OLS
	meats  []*cstats.Meats
	sums   []float64
}

// fitDesign runs the two passes of d (regressor 1 is the treatment):
// the sufficient statistics, FitOLS (dropping columns that are collinear
// with earlier ones, from the same statistics: no new pass), then the
// targeted meats. A treatment without variation, or collinear with its
// adjusters, is errSkip.
func (r *run) fitDesign(d sqlgen.Design) (*fitResult, error) {
	groups, err := r.passSuffStats("sufficient statistics", d)
	if err != nil {
		return nil, err
	}
	stats, sums, err := d.AssembleSuffStats(groups)
	if err != nil {
		return nil, err
	}
	if stats[0].N <= float64(d.P()) {
		return nil, fmt.Errorf("%w: %v rows for %d regressors", errSkip, stats[0].N, d.P())
	}
	var fits []*cstats.OLS
	for attempt := 0; ; attempt++ {
		f, err := cstats.FitOLS(stats[0], nil)
		var ce *cstats.CollinearError
		if errors.As(err, &ce) && attempt < 4 {
			names := d.ColumnNames()
			drop := map[int]bool{}
			for _, c := range ce.Columns {
				if c <= 1 {
					return nil, fmt.Errorf("%w: treatment has no variation of its own once %s are accounted for", errSkip, strings.Join(names[2:], ", "))
				}
				drop[c] = true
			}
			// A column that is collinear only together with the treatment
			// is aliased with it: dropping it would hand its effect to the
			// treatment. The effect is then not identified.
			if alias := aliased(stats[0], ce.Columns); alias >= 0 {
				return nil, fmt.Errorf("%w: the treatment cannot be told apart from %s in these rows", errSkip, names[alias])
			}
			var keep []int
			for j := 0; j < d.P(); j++ {
				if !drop[j] {
					keep = append(keep, j)
				}
			}
			for k := range stats {
				stats[k] = subStats(stats[k], keep)
			}
			d = d.Keep(keep)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errSkip, err)
		}
		fits = append(fits, f)
		break
	}
	for _, s := range stats[1:] {
		f, err := cstats.FitOLS(s, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errSkip, err)
		}
		fits = append(fits, f)
	}
	row2, err := r.passMeats("meats", d, fits, 1)
	if err != nil {
		return nil, err
	}
	if !(row2[1] < 1-1e-9) {
		return nil, fmt.Errorf("%w: a request has leverage %v (a fixed-effect level with a single row?): HC3 undefined", errSkip, row2[1])
	}
	meats, err := d.ParseMeats(row2, 1)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errSkip, err)
	}
	if meats[0].N != stats[0].N {
		// Rows arrived (or merged away) between the passes: live windows
		// should end a join delay before now.
		if math.Abs(meats[0].N-stats[0].N) > 0.01*stats[0].N {
			return nil, fmt.Errorf("%w: the two passes read different rows (%v vs %v)", errSkip, stats[0].N, meats[0].N)
		}
		r.note("the two passes read %v and %v rows: data arrived meanwhile", stats[0].N, meats[0].N)
	}
	return &fitResult{design: d, fits: fits, meats: meats, sums: sums}, nil
}

// aliased returns the first of the collinear columns cols (all > 1) that is
// no longer collinear once the treatment (column 1) is left out, or -1.
func aliased(s *cstats.SuffStats, cols []int) int {
	keep := []int{0}
	for j := 2; j < s.P(); j++ {
		keep = append(keep, j)
	}
	_, err := cstats.FitOLS(subStats(s, keep), nil)
	var ce *cstats.CollinearError
	still := map[int]bool{}
	if errors.As(err, &ce) {
		for _, c := range ce.Columns {
			still[keep[c]] = true
		}
	}
	for _, c := range cols {
		if !still[c] {
			return c
		}
	}
	return -1
}

func pick(s []string, keep []int) []string {
	if s == nil {
		return nil
	}
	out := make([]string, len(keep))
	for i, k := range keep {
		out[i] = s[k]
	}
	return out
}

// subStats restricts statistics to the regressors keep.
func subStats(s *cstats.SuffStats, keep []int) *cstats.SuffStats {
	out := cstats.NewSuffStats(len(keep), pick(s.Names, keep))
	out.N, out.YtY = s.N, s.YtY
	for i, a := range keep {
		for j := i; j < len(keep); j++ {
			out.XtX.SetSym(i, j, s.XtX.At(a, keep[j]))
		}
		out.XtY.SetVec(i, s.XtY.AtVec(a))
	}
	return out
}

// fixedEffects returns the factor of placement node n: a level for each
// entity with at least MinEntityRows pooled rows, largest first, the
// largest (the reference) left out, at most MaxEntities. exclude is left
// out as well (the caller adds its own column).
func (r *run) fixedEffects(n dag.Node, exclude ...string) (sqlgen.Factor, error) {
	set, ok := r.entitySet(n)
	if !ok {
		return sqlgen.Factor{}, fmt.Errorf("%w: placement node %q has no entity counts (only engine and gpu are supported)", errSkip, n.Name)
	}
	type kv struct {
		key string
		n   float64
	}
	var ents []kv
	for _, k := range sortedKeys(set) {
		es := set[k]
		if tot := es.nw + es.nb; tot >= float64(r.cfg.MinEntityRows) {
			ents = append(ents, kv{k, tot})
		}
	}
	sort.SliceStable(ents, func(i, j int) bool { return ents[i].n > ents[j].n })
	// The reference level: the largest entity other than exclude.
	kept := ents[:0:0]
	ref := false
	for _, e := range ents {
		switch {
		case slices.Contains(exclude, e.key):
		case !ref:
			ref = true
		default:
			kept = append(kept, e)
		}
	}
	ents = kept
	if len(ents) > r.cfg.MaxEntities {
		r.note("%s: %d entities, fixed effects kept for the %d largest", n.Name, len(ents)+1, r.cfg.MaxEntities)
		ents = ents[:r.cfg.MaxEntities]
	}
	f := sqlgen.Factor{Name: n.Name, Expr: n.Expr}
	for _, e := range ents {
		f.Levels = append(f.Levels, e.key)
	}
	return f, nil
}

func (r *run) entitySet(n dag.Node) (map[string]*entityStats, bool) {
	switch n.Name {
	case "engine":
		return r.engines, true
	case "gpu":
		return r.gpus, true
	}
	return nil, false
}

// adjusterColumns expands the adjustment set: a factor (one indicator per
// entity) for placement nodes, the level and hinges at pooled quantiles
// for continuous nodes. It also returns the finiteness conditions of the
// rows.
func (r *run) adjusterColumns(adjust []string) (regs, names []string, factors []sqlgen.Factor, finite []string, err error) {
	for _, z := range adjust {
		n, _ := r.a.dag.Node(z)
		if n.Categorical {
			f, err := r.fixedEffects(n)
			if err != nil {
				return nil, nil, nil, nil, err
			}
			factors = append(factors, f)
			continue
		}
		nq := r.quant[z]
		if nq != nil && nq.nBase+nq.nWin == 0 {
			// Adjusting for a node no request measures would leave no row.
			return nil, nil, nil, nil, fmt.Errorf("%w: no request measures %s, which its adjustment set needs", errSkip, z)
		}
		finite = append(finite, "isFinite("+n.Covariate()+")")
		var knots []float64
		if nq != nil && len(nq.pooled) == len(gridProbs) {
			knots = nq.knots(r.cfg.KnotQuantiles)
		}
		h := sqlgen.Hinges(n.Expr, knots)
		regs = append(regs, h...)
		names = append(names, z)
		for _, k := range knots {
			names = append(names, z+">"+fmtNum(k))
		}
	}
	return regs, names, factors, finite, nil
}

// estimate fits one mechanism cause and runs the estimators.
func (r *run) estimate(c *causeRun) error {
	regs, names, factors, finite, err := r.adjusterColumns(c.adjust)
	if err != nil {
		return err
	}
	where := r.pooledWhere() + " AND isFinite(" + c.node.Covariate() + ")"
	for _, f := range finite {
		where += " AND " + f
	}
	w := r.inWin01()
	d := sqlgen.Design{
		Table:      r.table(),
		Where:      where,
		Regressors: append([]string{"1", c.treatment}, regs...),
		Names:      append([]string{"intercept", c.node.Name}, names...),
		Factors:    factors,
		Outcomes:   []string{r.tailExpr(), r.logExpr()},
		Sums:       []string{w, w + " * " + r.tailExpr(), w + " * " + c.treatment},
	}
	if c.affectedN == 0 {
		return fmt.Errorf("%w: no window request is affected (%s)", errSkip, c.label)
	}
	fr, err := r.fitDesign(d)
	if err != nil {
		return err
	}
	nw := fr.sums[0]
	if nw <= 0 {
		return fmt.Errorf("%w: no window rows with finite %s", errSkip, c.node.Name)
	}
	in := cstats.CauseInput{
		LPM: fr.fits[0], Log: fr.fits[1], LPMMeats: fr.meats[0], LogMeats: fr.meats[1], Treatment: 1,
		Delta: 1, MeanDelta: fr.sums[2] / nw, TailRate: fr.sums[1] / nw, N: nw,
		AffectedMS: c.affectedMS,
		Rows:       r.deltaRows(c), RowsTotal: r.nWin, Quantile: r.q,
	}
	if c.continuous {
		in.Delta, in.MeanDelta = c.typDelta, c.meanDelta
		if in.Delta <= 0 {
			return fmt.Errorf("%w: %s is not higher in the window than in the baseline", errSkip, c.node.Name)
		}
	}
	if ff, err := r.focalFit(c, d); err != nil {
		return err
	} else if ff != nil {
		fr = ff
		in.LPM, in.Log, in.LPMMeats, in.LogMeats = ff.fits[0], ff.fits[1], ff.meats[0], ff.meats[1]
	}
	return r.finishEstimate(c, fr, in)
}

// focalFit refits a GPU-state mechanism with a level treatment on the
// requests of the entity a focused analysis is about (Request.Focus: an
// engine or a host) when the mechanism's level moves there: its effect
// where it acted, not the slope pooled over every GPU of the scope. A
// GPU's own range (DRAM active, PCIe traffic) bites near saturation: the
// pooled slope mixes the focused GPU's rise into saturation with the
// noise of dozens of peers in their normal range, where it costs nothing,
// and comes out a fraction of the focused GPU's (a tuning run's memory-
// bandwidth fault on one GPU among 36: DRAM active 0.60 → 0.83, its pod's
// TPOT 22 → 36 ms, the pooled fit 65 ms and an attributable fraction of
// 0.017, ranked below the pod's entity.degraded). The scope's counts
// (window rows, tail rate, mean Δ) stay those of the pooled fit, so the
// fraction is still of the scope's tail. nil (the pooled fit stands) when
// there is no focus, the mechanism does not vary on the entity once its
// adjusters are accounted for, or the entity has too few rows.
func (r *run) focalFit(c *causeRun, d sqlgen.Design) (*fitResult, error) {
	if c.kind != kindGPU || !c.continuous {
		return nil, nil
	}
	where, outside, ok := r.focalRows()
	if !ok {
		return nil, nil
	}
	fd := d
	fd.Where = d.Where + " AND " + where
	fd.Factors = nil
	for _, f := range d.Factors {
		if f.Name == "gpu" {
			n, _ := r.a.dag.Node("gpu")
			var err error
			if f, err = r.fixedEffects(n, outside...); err != nil {
				return nil, nil
			}
		}
		fd.Factors = append(fd.Factors, f)
	}
	fr, err := r.fitDesign(fd)
	if errors.Is(err, errSkip) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("focal fit of %s: %w", c.node.Name, err)
	}
	if fr.fits[0].N < float64(r.cfg.MinEntityRows) {
		return nil, nil
	}
	c.focalRows = fr.fits[0].N
	return fr, nil
}

// focalRows is the row condition of the engine or host a focused analysis
// is about and the GPUs outside it (left out of a GPU factor), ok false
// without a focus on one.
func (r *run) focalRows() (where string, outside []string, ok bool) {
	es := r.focusedEntity()
	if es == nil {
		return "", nil, false
	}
	on := func(g *entityStats) bool { return g.host == es.key }
	where = "host = " + dag.QuoteString(es.key)
	if r.req.Focus.Level == LevelEngine {
		on = func(g *entityStats) bool { return g.engines[es.key] > 0 }
		where = r.onEngineSQL(es)
	}
	for _, k := range sortedKeys(r.gpus) {
		if !on(r.gpus[k]) {
			outside = append(outside, k)
		}
	}
	return where, outside, true
}

// focusedEntity is the engine or host a focused analysis is about (nil
// without a focus, or when the focus is on neither of the scope's).
func (r *run) focusedEntity() *entityStats {
	f := r.req.Focus
	if f == nil {
		return nil
	}
	switch f.Level {
	case LevelEngine:
		for _, k := range sortedKeys(r.engines) {
			if es := r.engines[k]; r.focusOn(kindEngine, es) {
				return es
			}
		}
	case LevelHost:
		if es := r.hosts[f.Entity.Host]; es != nil && r.focusOn(kindHost, es) {
			return es
		}
	}
	return nil
}

func (r *run) finishEstimate(c *causeRun, fr *fitResult, in cstats.CauseInput) error {
	est, err := cstats.EstimateCause(in)
	if err != nil {
		return fmt.Errorf("%w: %v", errSkip, err)
	}
	c.cand.Estimate = est
	c.cand.Regressors = fr.design.P()
	c.cand.Rows = fr.fits[0].N
	c.cand.MaxLeverage = fr.meats[0].MaxLeverage
	if fr.meats[0].MaxLeverage > 0.99 {
		r.note("%s: max leverage %.4f: HC3 intervals are unreliable (a nearly unique row dominates)", c.cand.Cause, fr.meats[0].MaxLeverage)
	}
	return nil
}

// guard makes a Float64 expression safe for pooled rows where it is
// unknown (NaN): 0 there. Used only for covariates of the degraded check,
// whose rows must not shrink to those where every mechanism is measured.
func guard(expr string) string {
	return "if(isFinite(toFloat64(" + expr + ")), toFloat64(" + expr + "), 0)"
}

// examineDegraded looks at each engine and GPU whose health is below
// DegradedHealth: is it slower during the window than its peers, beyond
// what the measured mechanisms explain? The design is a
// difference-in-differences of the entity against its peers and against
// its own baseline, adjusted for every mechanism's treatment; without a
// baseline it is the entity's level against its peers, adjusted likewise.
// attribute calls it only when Config.Causes wants entity.degraded.
func (r *run) examineDegraded() ([]*causeRun, error) {
	var mechRegs, mechNames []string
	// focalFit's mechanisms that explain part of the focused entity's tail
	// by their own fit there: their slopes on it. (Every focal slope would
	// cost the check its power on a small entity: a slow tensor-parallel
	// engine's 31 tail requests left its interval 0..0.62.)
	var focalRegs, focalNames []string
	for _, c := range r.causes {
		if c.cand.Skipped != "" {
			continue
		}
		mechRegs = append(mechRegs, guard(c.treatment))
		mechNames = append(mechNames, c.node.Name)
		if c.focalRows > 0 && isCulprit(c.cand.Cause, c.cand.Estimate, r.cfg.MinAF) {
			focalRegs = append(focalRegs, guard(c.treatment))
			focalNames = append(focalNames, c.node.Name)
		}
	}
	engNode, okE := r.a.dag.Node("engine")
	gpuNode, okG := r.a.dag.Node("gpu")
	type cand struct {
		node dag.Node
		es   *entityStats
		kind string
		host *degradedHost // kindHost
		sole bool          // the scope's only host, against its own baseline
	}
	var cands []cand
	var degraded []*causeRun
	engCand := map[string]bool{}
	if okE && engNode.Categorical {
		if h, ok := r.soleHost(); ok {
			cands = append(cands, cand{node: engNode, es: h.es, kind: kindHost, host: &h, sole: true})
			for _, k := range h.engines {
				engCand[k] = true
			}
		}
		for _, h := range r.degradedHosts() {
			cands = append(cands, cand{node: engNode, es: h.es, kind: kindHost, host: &h})
			for _, k := range h.engines {
				engCand[k] = true // examined as part of the host
			}
		}
		for _, k := range sortedKeys(r.engines) {
			es := r.engines[k]
			if !engCand[k] && (es.healthOK && es.health < r.cfg.DegradedHealth || r.focusOn(kindEngine, es)) && es.nw >= float64(r.cfg.MinEntityRows) {
				cands = append(cands, cand{node: engNode, es: es, kind: kindEngine})
				engCand[k] = true
			}
		}
	}
	if okG && gpuNode.Categorical {
		for _, k := range sortedKeys(r.gpus) {
			es := r.gpus[k]
			if !es.healthOK || es.health >= r.cfg.DegradedHealth || es.nw < float64(r.cfg.MinEntityRows) {
				continue
			}
			if engCand[dominant(es.engines)] {
				continue // the same requests as an engine (or host) candidate
			}
			cands = append(cands, cand{node: gpuNode, es: es, kind: kindGPU})
		}
	}
	for _, cd := range cands {
		n := cd.node
		c := &causeRun{placement: &n, entityKey: cd.es.key, kind: cd.kind, col: -1}
		c.cand = Candidate{Cause: schemas.CauseEntityDegraded, Node: n.Name, WholeScope: cd.sole}
		degraded = append(degraded, c)
		// A host is one indicator against the engine fixed effects of the
		// other hosts' engines: the shared effect of its engines.
		ind, label, exclude := n.Indicator(cd.es.key), n.Name+"="+cd.es.key, []string{cd.es.key}
		if cd.kind == kindHost {
			ind, label, exclude = "toFloat64(host = "+dag.QuoteString(cd.es.key)+")", "host="+cd.es.key, cd.host.engines
		}
		regs := []string{"1"}
		names := []string{"intercept"}
		var adjusted []string
		switch {
		case cd.sole:
			// Every request of the scope ran on the host: its change from
			// its own baseline, beyond what the mechanisms explain, with
			// each engine's own level as a fixed effect.
			ind, exclude = "1", nil
			regs = append(regs, r.inWin01())
			names = append(names, label+"×window")
		case r.base != nil:
			w := r.inWin01()
			regs = append(regs, ind+" * "+w, w, ind)
			names = append(names, label+"×window", "window", label)
			adjusted = append(adjusted, "window")
		default:
			regs = append(regs, ind)
			names = append(names, label)
		}
		fe, err := r.fixedEffects(n, exclude...)
		if err != nil {
			c.cand.Skipped = strings.TrimPrefix(err.Error(), errSkip.Error()+": ")
			continue
		}
		adjusted = append(adjusted, n.Name)
		regs, names = append(regs, mechRegs...), append(names, mechNames...)
		adjusted = append(adjusted, mechNames...)
		if cd.kind != kindGPU && !cd.sole && r.focusOn(cd.kind, cd.es) {
			// The mechanisms fitted on the focused entity's own requests
			// (focalFit) are adjusted for with their slopes there: the
			// pooled slope leaves most of a saturating GPU's effect to
			// the entity's indicator.
			for i, m := range focalRegs {
				regs = append(regs, ind+" * "+m)
				names = append(names, label+"×"+focalNames[i])
			}
		}
		c.cand.AdjustedFor = adjusted
		w := r.inWin01()
		d := sqlgen.Design{
			Table: r.table(), Where: r.pooledWhere(),
			Regressors: regs, Names: names, Factors: []sqlgen.Factor{fe},
			Outcomes: []string{r.tailExpr(), r.logExpr()},
			Sums:     []string{w, w + " * " + r.tailExpr(), w + " * " + ind},
		}
		fr, err := r.fitDesign(d)
		if errors.Is(err, errSkip) {
			c.cand.Skipped = strings.TrimPrefix(err.Error(), errSkip.Error()+": ")
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("examine %s %s: %w", n.Name, cd.es.key, err)
		}
		nw := fr.sums[0]
		in := cstats.CauseInput{
			LPM: fr.fits[0], Log: fr.fits[1], LPMMeats: fr.meats[0], LogMeats: fr.meats[1], Treatment: 1,
			Delta: 1, MeanDelta: fr.sums[2] / nw, TailRate: fr.sums[1] / nw, N: nw,
			AffectedMS: cd.es.p99w,
			Rows:       r.deltaRows(c), RowsTotal: r.nWin, Quantile: r.q,
		}
		if err := r.finishEstimate(c, fr, in); err != nil {
			if errors.Is(err, errSkip) {
				c.cand.Skipped = strings.TrimPrefix(err.Error(), errSkip.Error()+": ")
				continue
			}
			return nil, err
		}
		r.describeDegraded(c, cd.es, mechNames)
		if !cd.sole && cd.kind != kindGPU {
			if err := r.movedLoad(c, cd.es); err != nil {
				return nil, err
			}
		}
		if h := cd.host; h != nil && cd.sole {
			c.cand.Evidence = append(c.cand.Evidence, fmt.Sprintf("every request of the scope ran on its %d engine(s): the host is judged against its own baseline (%s of %s requests in the tail then, %s of %s now), there being no peer host",
				len(h.engines), fmtNum(cd.es.nbTail), fmtNum(cd.es.nb), fmtNum(cd.es.nwTail), fmtNum(cd.es.nw)))
		} else if h != nil {
			c.cand.Evidence = append(c.cand.Evidence, fmt.Sprintf("its %d engines share the excess tail over the other hosts' rate (the two largest %.0f%% and %.0f%%): the host, not one engine, is slow",
				len(h.engines), 100*h.largest, 100*h.second))
		}
	}
	return degraded, nil
}

// focusOn reports whether es (an engine or a host) is the entity the
// analysis focuses on (Request.Focus). Its time scan found it worse than
// its peers or its own past in a stretch: it is examined for
// entity.degraded whatever its health over the window, which scores its
// level against peers that may always be slower (a host whose engines
// raised their P99 by half, to that of two slower hosts: health 0.34, no
// culprit, the breach dropped).
func (r *run) focusOn(kind string, es *entityStats) bool {
	f := r.req.Focus
	if f == nil || es.host != f.Entity.Host {
		return false
	}
	switch kind {
	case kindHost:
		return f.Level == LevelHost
	case kindEngine:
		return f.Level == LevelEngine && es.pod == f.Entity.Pod && es.engine == f.Entity.Engine
	}
	return false
}

// soleHost is the scope's one host when every engine of the scope runs on
// it and there is a baseline: a model served from one host has no peer
// host, so a slow host shows only as the scope's change from its own
// baseline (its queue then grows as a symptom). Its health is its window
// tail rate scored against its baseline's; with several engines, they must
// share its excess tail over its baseline rate (degradedHosts' rule).
func (r *run) soleHost() (degradedHost, bool) {
	if r.base == nil {
		return degradedHost{}, false
	}
	var host string
	var engines []string
	for _, k := range sortedKeys(r.engines) {
		e := r.engines[k]
		if e.nw+e.nb < float64(r.cfg.MinEntityRows) {
			continue
		}
		if e.host == "" || host != "" && e.host != host {
			return degradedHost{}, false
		}
		host = e.host
		engines = append(engines, k)
	}
	es := r.hosts[host]
	if host == "" || es == nil || es.nw < float64(r.cfg.MinEntityRows) || es.nb < float64(r.cfg.MinEntityRows) {
		return degradedHost{}, false
	}
	hs, err := cstats.Health([]cstats.EntityCounts{{Key: "window", Tail: es.nwTail, N: es.nw}, {Key: "baseline", Tail: es.nbTail, N: es.nb}}, nil)
	if err != nil || len(hs) == 0 {
		return degradedHost{}, false
	}
	for _, h := range hs {
		if h.Key == "window" {
			es.health, es.healthOK = h.Health, true
		}
	}
	if es.health >= r.cfg.DegradedHealth {
		return degradedHost{}, false
	}
	h := degradedHost{es: es, engines: engines, largest: 1}
	if len(engines) < 2 {
		return h, true
	}
	// As for a host among others: its engines must share the excess (here
	// over the host's own baseline tail rate); one slow engine of the host
	// is that engine's matter.
	var ok bool
	if h.largest, h.second, ok = sharedExcess(r.engineExcess(engines, (es.nbTail+0.5)/(es.nb+1))); !ok {
		return degradedHost{}, false
	}
	return h, true
}

// engineExcess is each engine's window tail beyond rate × its requests
// (at least 0).
func (r *run) engineExcess(engines []string, rate float64) []float64 {
	out := make([]float64, 0, len(engines))
	for _, k := range engines {
		e := r.engines[k]
		out = append(out, max(0, e.nwTail-e.nw*rate))
	}
	return out
}

// sharedExcess reports whether an excess is shared: at least two parts,
// the second largest at least half the largest; largest and second are
// their shares of the total.
func sharedExcess(excess []float64) (largest, second float64, ok bool) {
	if len(excess) < 2 {
		return 0, 0, false
	}
	excess = slices.Clone(excess)
	slices.SortFunc(excess, func(a, b float64) int { return cmp.Compare(b, a) })
	var total float64
	for _, x := range excess {
		total += x
	}
	if total <= 0 || excess[1] < excess[0]/2 {
		return 0, 0, false
	}
	return excess[0] / total, excess[1] / total, true
}

// degradedHost is a host examined as one entity (examineDegraded).
type degradedHost struct {
	es              *entityStats
	engines         []string // its engines in the scope (engine keys)
	largest, second float64  // the two largest engine shares of its excess window tail
}

// degradedHosts are the hosts to examine as a whole: unhealthy against the
// other hosts, with at least two engines in the scope that share its
// excess tail (window tail beyond the other hosts' rate): the second
// largest share at least half the largest. Several slow engines on one
// host also mask one another in the engine scores (each one's peers
// include the others), so a slow host must be seen at the host level; a
// host with one slow engine stays an engine matter.
func (r *run) degradedHosts() []degradedHost {
	var out []degradedHost
	for _, h := range sortedKeys(r.hosts) {
		es := r.hosts[h]
		if h == "" || !(es.healthOK && es.health < r.cfg.DegradedHealth || r.focusOn(kindHost, es)) || es.nw < float64(r.cfg.MinEntityRows) {
			continue
		}
		var engines []string
		var otherTail, otherN float64
		for _, k := range sortedKeys(r.engines) {
			e := r.engines[k]
			switch {
			case e.host != h:
				otherTail, otherN = otherTail+e.nwTail, otherN+e.nw
			case e.nw >= float64(r.cfg.MinEntityRows):
				engines = append(engines, k)
			}
		}
		if len(engines) < 2 || otherN == 0 {
			continue
		}
		largest, second, ok := sharedExcess(r.engineExcess(engines, otherTail/otherN))
		if !ok {
			continue
		}
		out = append(out, degradedHost{es: es, engines: engines, largest: largest, second: second})
	}
	return out
}

// mostExposed is the entity of set carrying the most affected window-tail
// requests of cause pidx (the first in key order on a tie), nil when set
// is empty. The "" key (no single GPU: a multi-GPU engine's rows, see
// gpuInEngine, or unresolved placement) is never one.
func mostExposed(set map[string]*entityStats, pidx int) *entityStats {
	var best *entityStats
	for _, k := range sortedKeys(set) {
		es := set[k]
		if k == "" {
			continue
		}
		if best == nil || es.exp[pidx].wTailExp > best.exp[pidx].wTailExp {
			best = es
		}
	}
	return best
}

func dominant(m map[string]float64) string {
	best, bn := "", -1.0
	for _, k := range sortedKeys(m) {
		if m[k] > bn {
			best, bn = k, m[k]
		}
	}
	return best
}

// localize names the entity a mechanism acts on: the engine or GPU that
// carries at least LocalizeShare of the cause's exposed tail requests,
// else the scope. It also writes health, evidence and exemplars. A cause
// spread over several entities returns one split culprit per entity
// (splitCause).
func (r *run) localize(c *causeRun) (splits []*causeRun) {
	var set map[string]*entityStats
	switch c.kind {
	case kindEngine:
		set = r.engines
	case kindGPU:
		set = r.gpus
	}
	total := c.exp.wTailExp
	best := mostExposed(set, c.pidx)
	var ev []string
	base := "baseline requests"
	bShare := pct(c.exp.bExp, r.baseTotal())
	c.cand.TailEnriched = c.exp.wTailExp/math.Max(r.nWinTail, 1) > c.exp.bExp/math.Max(r.baseTotal(), 1)
	if r.base == nil {
		base = "the window's other requests"
		bShare = pct(c.exp.wExp-c.exp.wTailExp, float64(r.nWin)-r.nWinTail)
		c.cand.TailEnriched = c.exp.wTailExp/math.Max(r.nWinTail, 1) > (c.exp.wExp-c.exp.wTailExp)/math.Max(float64(r.nWin)-r.nWinTail, 1)
	}
	ev = append(ev, fmt.Sprintf("%s on %s of window tail requests (%s > %s ms) vs %s of %s",
		c.label, pct(c.exp.wTailExp, r.nWinTail), r.outcome.Name, fmtNum(r.tailT), bShare, base))
	share := 0.0
	if best != nil && total > 0 {
		share = best.exp[c.pidx].wTailExp / total
	}
	var spread []*entityStats // entities sharing a cause spread over several
	var spreadShare float64
	for _, k := range sortedKeys(set) {
		es := set[k]
		if sh := es.exp[c.pidx].wTailExp / math.Max(total, 1); k != "" && sh >= r.cfg.SplitShare && es.nw+es.nb >= float64(r.cfg.MinEntityRows) {
			spread = append(spread, es)
			spreadShare += sh
		}
	}
	// An entity (or a set of them) is the cause's only when its exposure is
	// its own: its requests are exposed far more often than the other
	// entities' of the scope (concentrated). A model-wide fault exposes
	// every engine alike, and the one that happens to carry most of the
	// affected tail is not its entity.
	concentrated := func(es ...*entityStats) bool {
		var in, inN, allN, inB, inNb, allNb float64
		for _, e := range es {
			in += e.exp[c.pidx].wExp
			inN += e.nw
			inB += e.exp[c.pidx].bExp
			inNb += e.nb
		}
		for k, e := range set {
			if k != "" {
				allN += e.nw
				allNb += e.nb
			}
		}
		outN := allN - inN
		if outN < float64(r.cfg.MinEntityRows) || inN == 0 {
			// No peers to differ from: one entity is the scope itself
			// (named, with the scope's model); several are the scope.
			c.cand.WholeScope = len(es) == 1
			return len(es) == 1
		}
		out := math.Max(c.exp.wExp-in, 0)
		if in/inN < 3*out/outN {
			return false
		}
		// Whether the others' exposure shows the mechanism on them: read
		// while es was exposed when it can be; when the others served
		// (almost) nothing then, nothing shows it.
		shown := false
		baseExp, baseN := math.Max(c.exp.bExp-inB, 0), allNb-inNb
		if rate, ok, known := r.othersWhileExposed(c, es); !known {
			shown = r.othersExposed(in/inN, out/outN, baseExp, baseN)
		} else if ok {
			shown = r.othersExposed(in/inN, rate, baseExp, baseN)
		}
		return !shown && !r.othersLevelRose(c, es)
	}
	// The engine a focused analysis is about (the sweep found it breached
	// against its peers) needs only SplitShare of the affected tail when
	// its exposure is its own (concentrated): the more peers, the more of
	// their natural exposure dilutes its share (a tuning run's pod among
	// 27, exposed at 3 times their rate, carried 49% of a prefix-cache
	// loss's affected tail, and the culprit went to the whole model). A
	// peer that also carries SplitShare does not spread it: with one peer,
	// the peer's natural exposure is a fifth of a weak fault's affected
	// tail (tuning seed 5591).
	need, focus := r.cfg.LocalizeShare, best != nil && r.focusOn(c.kind, best)
	if focus {
		need = r.cfg.SplitShare
	}
	engines := countEntities(set, r.cfg.MinEntityRows)
	switch {
	case (len(spread) <= 1 || focus) && best != nil && share >= need && best.nw+best.nb >= float64(r.cfg.MinEntityRows) && concentrated(best):
		c.entityKey = best.key
		ev = append(ev, fmt.Sprintf("%s of the affected tail requests ran on %s %s", pct(share*total, total), c.kind, best.key))
	case len(spread) >= 2 && spreadShare >= r.cfg.LocalizeShare && c.kind == kindEngine && 2*len(spread) >= engines:
		// An engine-state cause on half of the scope's engines or more
		// is the scope's: a setting of the model that bites hardest
		// where its engines have least room (fresh tuning seed 6394: a
		// model's KV cache cut on all five pods collapsed three, and the
		// culprit was named on one of them).
		ev = append(ev, fmt.Sprintf("%s of the affected tail requests ran on %d of the scope's %d engines (%s): the scope's", pct(spreadShare, 1), len(spread), engines, strings.Join(entityKeys(spread), ", ")))
	case len(spread) >= 2 && spreadShare >= r.cfg.LocalizeShare && concentrated(spread...):
		ev = append(ev, fmt.Sprintf("%s of the affected tail requests ran on %d %ss (%s): one culprit each", pct(spreadShare, 1), len(spread), c.kind, strings.Join(entityKeys(spread), ", ")))
		defer func() { splits = r.splitCause(c, spread, set) }()
	case set != nil && best != nil && share > 0:
		ev = append(ev, fmt.Sprintf("affected tail requests spread over %d %ss (largest share %s, %s)", countPositive(set, c.pidx), c.kind, pct(share, 1), best.key))
	}
	if none := set[""]; none != nil && none.exp[c.pidx].wTailExp > 0 && c.kind == kindGPU {
		ev = append(ev, fmt.Sprintf("%s of the affected tail requests ran on engines of several GPUs (a row names no single GPU)", pct(none.exp[c.pidx].wTailExp, total)))
	}
	c.cand.Entity = r.entityOf(c, set)
	c.cand.Health = r.healthOf(c, set)
	e := c.cand.Estimate
	unit := "when affected"
	if c.continuous {
		unit = "per unit of " + c.node.Expr
	}
	on := ""
	if c.focalRows > 0 {
		on = fmt.Sprintf(", fitted on the breached %s's %s requests alone", r.req.Focus.Level, fmtNum(c.focalRows))
	}
	ev = append(ev, fmt.Sprintf("adjusted for %s%s: P(%s > %s ms) %+.3g %s (95%% CI %.3g..%.3g), latency ×%.2f on affected requests",
		listOr(c.adjust, "nothing (no backdoor path)"), on, r.outcome.Name, fmtNum(r.tailT), e.LPM.Beta, unit, e.LPM.CI(0)[0], e.LPM.CI(0)[1], math.Exp(e.Log.Beta*r.typDelta(c))))
	if c.entityKey != "" && set[c.entityKey].healthOK {
		es := set[c.entityKey]
		ev = append(ev, r.healthEvidence(es, set))
	}
	c.cand.Evidence = ev
	c.cand.Exemplars = r.exemplars(c)
	return nil // the deferred splitCause's, when spread
}

// othersExposed reports whether the exposure of the other entities of
// the scope rose from the baseline too: to at least OthersExposedRise
// times their baseline rate and by at least OthersExposedMin, and to at
// least OthersExposedOfEntity of the entity's own window rate (inRate).
// A mechanism that turned on across the scope is the scope's, even when
// the tail gathers on the entity where it bit hardest: a tuning run's
// KV cache lost on a whole model (seed 2595) preempted on four of its six
// pods, none before, and one pod, more loaded, carried 88% of the
// affected tail at 4 times their exposure. The other pods of a one-pod
// fault stay as exposed as they were — or about: a peer's ordinary
// exposure next to a short baseline may rise past three times it, and
// then it is a small fraction of the entity's (fresh tuning seed 5723, no
// earlier data: a pod's prefix cache lost, 99% of its window requests
// exposed, its one peer's 3.6% against 0 of its 1,120 baseline requests in
// the run's first three minutes; the culprit went to the model and the pod
// was named entity.degraded). False without a baseline (or too few
// baseline rows).
func (r *run) othersExposed(inRate, winRate, baseExp, baseN float64) bool {
	if r.base == nil || baseN < float64(r.cfg.MinEntityRows) {
		return false
	}
	baseRate := baseExp / baseN
	return winRate >= OthersExposedRise*baseRate && winRate-baseRate >= OthersExposedMin && winRate >= OthersExposedOfEntity*inRate
}

// othersWhileExposed is the exposure rate of the scope's other entities
// (not es) while es's requests were exposed: each window minute's rate
// among the others' requests, weighted by es's exposed requests in that
// minute. A mechanism that turned on across the scope exposes the others
// when it exposes the entity; a peer's exposure at another time is its
// own load's (fresh tuning seeds 8707 and 8726, no earlier data: a pod
// given all of its model's traffic, queue.saturation; its one peer, whose
// requests above the load's P95 came before the fault, 12% and 5% of its
// window against 2.5% and 1.5% of its baseline, made the queue the
// model's). ok is false when fewer than MinEntityRows of the others'
// requests fall in minutes where es was exposed, or those minutes carry
// under half of es's exposed requests: the others served too little then
// to show the mechanism on them. known is false without an exposure
// predicate or when the query fails (the window's rates decide);
// memoized per cause and entity set.
func (r *run) othersWhileExposed(c *causeRun, es []*entityStats) (rate float64, ok, known bool) {
	if r.base == nil || c.exposed == "" || len(es) == 0 {
		return 0, false, false
	}
	on, kinds := r.onEntitiesSQL(c, es)
	if !kinds {
		return 0, false, false
	}
	key := "while\x00" + c.node.Name + "\x00" + strings.Join(on, "\x00")
	if v, hit := r.concurrent[key]; hit {
		return v.rate, v.ok, v.known
	}
	in := "(" + strings.Join(on, " OR ") + ")"
	vs, err := r.byMinute("others while exposed", fmt.Sprintf("toFloat64(countIf(%[1]s AND %[2]s)), toFloat64(countIf(NOT %[1]s)), toFloat64(countIf(NOT %[1]s AND %[2]s))", in, c.exposed), r.winWhere())
	res := concurrentRate{}
	if err != nil {
		r.note("others' exposure while %s was exposed: %v", c.node.Name, err)
	} else {
		ms := make([]minuteOthers, 0, len(vs))
		for _, v := range vs {
			if v[0] >= 0 {
				ms = append(ms, minuteOthers{own: v[1], others: v[2], othersExposed: v[3]})
			}
		}
		res.rate, res.ok = othersRateWhileExposed(ms, float64(max(r.cfg.MinEntityRows, 1)))
		res.known = true
	}
	if r.concurrent == nil {
		r.concurrent = map[string]concurrentRate{}
	}
	r.concurrent[key] = res
	return res.rate, res.ok, res.known
}

// onEntitiesSQL is one SQL predicate per entity of es (engines or GPUs,
// by c's kind) selecting its requests; not ok for another kind.
func (r *run) onEntitiesSQL(c *causeRun, es []*entityStats) (on []string, ok bool) {
	for _, e := range es {
		switch c.kind {
		case kindEngine:
			on = append(on, r.onEngineSQL(e))
		case kindGPU:
			on = append(on, "gpu = "+dag.QuoteString(e.key))
		default:
			return nil, false
		}
	}
	return on, true
}

// concurrentRate memoizes othersWhileExposed.
type concurrentRate struct {
	rate      float64
	ok, known bool
}

// minuteOthers is one window minute of othersWhileExposed: the entity's
// exposed requests, the others' requests and the others' exposed ones.
type minuteOthers struct{ own, others, othersExposed float64 }

// othersRateWhileExposed is othersWhileExposed's arithmetic.
func othersRateWhileExposed(ms []minuteOthers, minRows float64) (rate float64, ok bool) {
	var w, wCovered, rows, weighted float64
	for _, m := range ms {
		w += m.own
		if m.own <= 0 || m.others <= 0 {
			continue
		}
		wCovered += m.own
		rows += m.others
		weighted += m.own * m.othersExposed / m.others
	}
	if w <= 0 || rows < minRows || wCovered < w/2 {
		return 0, false
	}
	return weighted / wCovered, true
}

// othersLevelRose reports whether the level a threshold exposure reads
// (the node's expression: KV usage for kv_usage_max >= 0.9) rose on the
// scope's other entities (not es) from the baseline to the window: to at
// least OthersExposedRise times its baseline mean and by at least
// OthersLevelMin. A model-wide cut of the KV cache under least-loaded
// routing fills the cache of the engine the router favours past the
// threshold while its peers' usage climbs toward it without crossing
// (tuning seeds 7596 and 7731: peers ×25–30, to 0.06–0.15, none exposed;
// the culprit went to one pod). Load moved off one slow engine raises its
// peers' usage by about the load's share. False for a node without a
// threshold exposure (its exposure is its level above the baseline's P95,
// which othersExposed already reads), without a baseline, or without
// enough rows, and for an indicator node (thermal, power cap, XID), whose
// mean is the exposure rate; memoized per cause and entity set.
func (r *run) othersLevelRose(c *causeRun, es []*entityStats) bool {
	if r.base == nil || c.continuous || c.node.Exposed == "" || c.node.Expr == "" || len(es) == 0 {
		return false
	}
	if c.node.Expr == "toFloat64("+c.node.Exposed+")" {
		return false // an indicator: its mean is the exposure rate othersExposed reads
	}
	on, ok := r.onEntitiesSQL(c, es)
	if !ok {
		return false
	}
	key := "level\x00" + c.node.Name + "\x00" + strings.Join(on, "\x00")
	if v, ok := r.mediated[key]; ok {
		return v
	}
	x := "toFloat64(" + c.node.Expr + ")"
	others := "NOT (" + strings.Join(on, " OR ") + ") AND isFinite(" + x + ")"
	q := fmt.Sprintf(`SELECT toFloat64(avgIf(%[1]s, %[2]s AND %[3]s)), toFloat64(avgIf(%[1]s, %[4]s AND %[3]s)), toFloat64(countIf(%[2]s AND %[3]s)), toFloat64(countIf(%[4]s AND %[3]s))
FROM %[5]s WHERE %[6]s`, x, r.inWin(), others, inInterval(*r.base), r.table(), r.pooledWhere())
	v, err := r.floats("peer levels", q, 4)
	rose := false
	switch {
	case err != nil:
		r.note("peer levels of %s: %v", c.node.Name, err)
	case v[2] >= float64(r.cfg.MinEntityRows) && v[3] >= float64(r.cfg.MinEntityRows):
		rose = v[0] >= OthersExposedRise*v[1] && v[0]-v[1] >= OthersLevelMin
		r.note("%s on the other %ss: mean %.3g in the window vs %.3g in the baseline", c.node.Expr, c.kind, v[0], v[1])
	}
	if r.mediated == nil {
		r.mediated = map[string]bool{}
	}
	r.mediated[key] = rose
	return rose
}

// OthersLevelMin is how much a threshold exposure's level must rise on
// the other entities, in the node's units (KV usage: 5 points of the
// cache), besides OthersExposedRise times, for the mechanism to be the
// scope's (othersLevelRose).
const OthersLevelMin = 0.05

// OthersExposedRise, OthersExposedMin and OthersExposedOfEntity: how much
// the other entities' exposure must rise from the baseline, and how close
// to the entity's it must come, for a mechanism to be the scope's
// (othersExposed).
const (
	OthersExposedRise     = 3.0
	OthersExposedMin      = 0.01
	OthersExposedOfEntity = 0.1
)

// splitCause turns a cause spread over several engines or GPUs into one
// culprit per entity: the same adjusted effect, the attributable fraction
// scaled by the entity's share of the affected window requests, the
// counterfactual with Δ restricted to the entity's requests.
func (r *run) splitCause(c *causeRun, ents []*entityStats, set map[string]*entityStats) (splits []*causeRun) {
	for _, es := range ents {
		s := *c
		s.split, s.entityKey, s.splitInto = true, es.key, 0
		s.cand.Split = true
		f := 0.0
		if c.exp.wExp > 0 {
			f = es.exp[c.pidx].wExp / c.exp.wExp
		}
		a := &s.cand.Estimate.Attributed
		a.Value, a.CI = a.Value*f, [2]float64{a.CI[0] * f, a.CI[1] * f}
		r.counterfactual(&s)
		s.cand.Entity = r.entityOf(&s, set)
		s.cand.Health = r.healthOf(&s, set)
		ex := es.exp[c.pidx]
		s.cand.Evidence = []string{
			fmt.Sprintf("%s on %s of the window tail requests of %s %s vs %s of its baseline requests", c.label, pct(ex.wTailExp, es.nwTail), c.kind, es.key, pct(ex.bExp, es.nb)),
			fmt.Sprintf("%s carries %s of the cause's affected tail requests and %s of its affected requests", es.key, pct(ex.wTailExp, c.exp.wTailExp), pct(f, 1)),
		}
		s.cand.Evidence = append(s.cand.Evidence, c.cand.Evidence[len(c.cand.Evidence)-1])
		if es.healthOK {
			s.cand.Evidence = append(s.cand.Evidence, r.healthEvidence(es, set))
		}
		s.cand.Exemplars = r.exemplars(&s)
		splits = append(splits, &s)
		c.splitInto++
	}
	return splits
}

func (r *run) typDelta(c *causeRun) float64 {
	if c.continuous {
		return c.typDelta
	}
	return 1
}

func (r *run) baseTotal() float64 {
	var n float64
	for _, p := range r.placements {
		n += p.nb
	}
	return n
}

// countEntities is the number of entities of set (the scope's engines or
// GPUs) with at least min window and baseline rows.
func countEntities(set map[string]*entityStats, min int) int {
	n := 0
	for k, es := range set {
		if k != "" && es.nw+es.nb >= float64(min) {
			n++
		}
	}
	return n
}

// entityKeys are the keys of es, in order, for evidence.
func entityKeys(es []*entityStats) []string {
	keys := make([]string, len(es))
	for i, e := range es {
		keys[i] = e.key
	}
	return keys
}

func countPositive(set map[string]*entityStats, pidx int) int {
	n := 0
	for k, es := range set {
		if k != "" && es.exp[pidx].wTailExp > 0 {
			n++
		}
	}
	return n
}

func listOr(s []string, empty string) string {
	if len(s) == 0 {
		return empty
	}
	return strings.Join(s, ", ")
}

func (r *run) healthEvidence(es *entityStats, set map[string]*entityStats) string {
	var pk, pn float64
	peers := 0
	for k, o := range set {
		if k != es.key && o.healthOK {
			pk += o.nwTail
			pn += o.nw
			peers++
		}
	}
	return fmt.Sprintf("health of %s %.2f: window tail rate %s vs %s on its %d peers", es.key, es.health, pct(es.nwTail, es.nw), pct(pk, pn), peers)
}

// entityOf fills the culprit entity: engine → host/engine/pod/model (and
// the GPU when the engine runs on one), gpu → host/gpu, else the scope.
func (r *run) entityOf(c *causeRun, set map[string]*entityStats) Entity {
	if c.entityKey != "" {
		es := set[c.entityKey]
		switch c.kind {
		case kindGPU:
			// The GPU names its engine too when it serves one (its pod, the
			// model): the on-call engineer restarts or drains a pod.
			e := Entity{Host: es.host, GPU: es.gpu}
			var tot float64
			for _, v := range es.engines {
				tot += v
			}
			if k := dominant(es.engines); k != "" && es.engines[k] >= 0.95*tot {
				if eng := r.engines[k]; eng != nil {
					e.Engine, e.Pod, e.Model = eng.engine, eng.pod, eng.model
				}
			}
			return e
		case kindHost:
			return Entity{Host: es.key, Model: r.req.SLO.Scope["model"]}
		}
		e := Entity{Host: es.host, Engine: es.engine, Pod: es.pod, Model: es.model}
		var tot float64
		for _, v := range es.gpus {
			tot += v
		}
		if g := dominant(es.gpus); g != "" && es.gpus[g] >= 0.95*tot {
			e.GPU = g
		}
		return e
	}
	e := Entity{Model: r.req.SLO.Scope["model"], Service: r.req.SLO.Scope["service"]}
	if e.Model == "" {
		models := map[string]float64{}
		for _, p := range r.placements {
			models[p.model] += p.nw
		}
		var tot float64
		for _, v := range models {
			tot += v
		}
		if m := dominant(models); m != "" && models[m] >= 0.95*tot {
			e.Model = m
		}
	}
	return e
}

// healthOf is the localized entity's health; for a scope-wide culprit the
// median health of the engines (or GPUs): a fleet-wide cause leaves every
// entity looking like its peers. 0.9 (no evidence either way) when no
// entity was scored.
func (r *run) healthOf(c *causeRun, set map[string]*entityStats) float64 {
	if c.entityKey != "" {
		if es := set[c.entityKey]; es.healthOK {
			return es.health
		}
		return 0.9
	}
	if set == nil {
		set = r.engines
	}
	var hs []float64
	for _, es := range set {
		if es.healthOK {
			hs = append(hs, es.health)
		}
	}
	if len(hs) == 0 {
		return 0.9
	}
	slices.Sort(hs)
	return hs[len(hs)/2]
}

// exemplars are the slowest affected window requests (on the culprit's
// entity when it has one).
func (r *run) exemplars(c *causeRun) []string {
	out := []string{}
	i := c.col
	for _, t := range r.top {
		if len(out) >= r.cfg.Exemplars {
			break
		}
		affected := false
		switch {
		case c.placement != nil:
			affected = r.onEntity(t, c)
		case c.continuous:
			affected = t.vals[i] > c.elevated
		default:
			affected = t.vals[i] > 0
		}
		if !affected {
			continue
		}
		if c.placement == nil && c.entityKey != "" {
			if (c.kind == kindGPU && t.gpu != c.entityKey) || (c.kind == kindEngine && t.engine != c.entityKey) {
				continue
			}
		}
		out = append(out, t.trace)
	}
	return out
}

func (r *run) describeDegraded(c *causeRun, es *entityStats, mechs []string) {
	set := r.engines
	switch c.kind {
	case kindGPU:
		set = r.gpus
	case kindHost:
		set = r.hosts
	}
	c.cand.Entity = r.entityOf(c, set)
	c.cand.Health = es.health
	e := c.cand.Estimate
	what := "during the window, against its peers and its own baseline"
	if r.base == nil {
		what = "against its peers"
	}
	c.cand.Evidence = []string{
		r.healthEvidence(es, set),
		fmt.Sprintf("unexplained by measured mechanisms: adjusted for %s, P(%s > %s ms) %+.3g on %s %s (95%% CI %.3g..%.3g), latency ×%.2f",
			listOr(mechs, "nothing"), r.outcome.Name, fmtNum(r.tailT), e.LPM.Beta, c.kind, es.key, e.LPM.CI(0)[0], e.LPM.CI(0)[1], math.Exp(e.Log.Beta)) + " " + what,
	}
	c.cand.Exemplars = r.exemplars(c)
}

// culprit is the v1 culprit of an estimated candidate.
func (c *causeRun) culprit() Culprit {
	e := c.cand.Estimate
	adj := c.cand.AdjustedFor
	if adj == nil {
		adj = []string{}
	}
	return Culprit{
		Cause:                c.cand.Cause,
		Entity:               c.cand.Entity,
		EffectMS:             round(e.EffectMS, 1),
		CI95MS:               [2]float64{round(e.EffectCI[0], 1), round(e.EffectCI[1], 1)},
		AttributableFraction: round(e.Attributed.Value, 4),
		CounterfactualP99MS:  round(e.CounterfactualMS, 1),
		Health:               round(c.cand.Health, 4),
		AdjustedFor:          adj,
		Evidence:             c.cand.Evidence,
		ExemplarTraceIDs:     c.cand.Exemplars,
	}
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}
