package causal

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/causal/stats"
)

// gpuUtilMetric is the gpu_samples metric of a GPU's utilization (0–1),
// as enrich writes it; busyGPUUtil is the window mean from which a GPU
// counts as serving.
const (
	gpuUtilMetric = "gpu_util"
	busyGPUUtil   = 0.05
)

// gpuScore is one GPU's mean sample score in the window and the baseline.
type gpuScore struct {
	gpu         string
	win, base   float64
	nWin, nBase float64
	rise        float64 // win − base (win alone without baseline samples)
}

// gpuInEngine localizes a GPU cause whose affected requests ran on a
// multi-GPU (tensor-parallel) engine. Such a request runs on every GPU of
// its engine, so its row carries no single GPU and localize leaves the
// cause on the scope. When one engine carries the cause's affected tail
// (Config.LocalizeShare), the engine's GPU samples (Node.Samples) tell
// which of its GPUs carries the cause: the one whose mean score rose most
// from the baseline, when it rose at least twice as much as any other. The
// culprit then names that GPU (and carries the engine's health); otherwise
// it stays on the scope, with the samples as evidence.
func (r *run) gpuInEngine(c *causeRun) error {
	best := mostExposed(r.engines, c.pidx)
	if best == nil || c.exp.wTailExp == 0 || best.exp[c.pidx].wTailExp < r.cfg.LocalizeShare*c.exp.wTailExp || dominant(best.gpus) != "" || best.pod == "" {
		return nil
	}
	// The node's samples, or its fallback when none of the engine's GPUs
	// reports them.
	var gs []gpuScore
	sp := c.node.Samples
	for ; sp != nil; sp = sp.Fallback {
		var err error
		if gs, err = r.engineGPUScores(sp, best); err != nil {
			return err
		}
		if len(gs) > 0 {
			break
		}
	}
	if len(gs) < 2 {
		return nil
	}
	sort.SliceStable(gs, func(i, j int) bool { return gs[i].rise > gs[j].rise })
	top, next := gs[0], gs[1]
	peerMax := math.Inf(-1)
	for _, g := range gs[1:] {
		peerMax = math.Max(peerMax, g.win)
	}
	what := fmt.Sprintf("GPU samples of engine %s (%d GPUs; its requests run on all of them): %s of %s averages %s on %s in the window vs %s in the baseline; its %d peers at most %s",
		best.key, len(gs), sp.Expr, strings.Join(sp.Metrics, ", "), fmtNum(top.win), top.gpu, fmtNum(top.base), len(gs)-1, fmtNum(peerMax))
	if !(top.rise > 0 && next.rise <= top.rise/2) {
		c.cand.Evidence = append(c.cand.Evidence, what+": no single GPU carries it")
		return nil
	}
	// The GPU of a tensor-parallel engine: name the engine's pod too.
	c.cand.Entity = Entity{Host: best.host, GPU: top.gpu, Engine: best.engine, Pod: best.pod, Model: best.model}
	if best.healthOK {
		c.cand.Health = best.health
	}
	c.cand.Evidence = append(c.cand.Evidence, what)
	return nil
}

// engineGPUScores reads sp's score of each GPU of engine e in the window
// and the baseline (GPUs with a window sample only).
func (r *run) engineGPUScores(sp *dag.SampleSpec, e *entityStats) ([]gpuScore, error) {
	score, winCond, baseCond, metrics, prune := r.sampleSQL(sp)
	if st, ok := r.focusStretch(); ok {
		winCond = sampleInterval(st)
	}
	q := fmt.Sprintf(`SELECT toString(gpu), toFloat64(avgIf(%[1]s, %[2]s)), toFloat64(avgIf(%[1]s, %[3]s)), toFloat64(countIf(%[2]s)), toFloat64(countIf(%[3]s))
FROM %[4]s FINAL
WHERE host = %[5]s AND pod = %[6]s AND metric IN (%[7]s) AND %[8]s AND (%[2]s OR %[3]s) AND isFinite(%[1]s)
GROUP BY gpu ORDER BY gpu`, score, winCond, baseCond, r.cfg.SamplesTable, dag.QuoteString(e.host), dag.QuoteString(e.pod),
		metrics, prune)
	var gs []gpuScore
	err := r.query("engine gpu samples", q, func(rows Rows) error {
		var g gpuScore
		if err := rows.Scan(&g.gpu, &g.win, &g.base, &g.nWin, &g.nBase); err != nil {
			return err
		}
		if g.nWin == 0 || g.gpu == "" {
			return nil
		}
		g.rise = g.win
		if g.nBase > 0 {
			g.rise = g.win - g.base
			// Equal samples averaged over different counts differ in
			// their last bits: that is no rise.
			if math.Abs(g.rise) <= 1e-9*math.Max(math.Abs(g.win), math.Abs(g.base)) {
				g.rise = 0
			}
		}
		gs = append(gs, g)
		return nil
	})
	return gs, err
}

// focusStretch is the time an entity breach's scan found it worse, when
// the focused analysis's window runs on past it: the stretch holds the
// fault, while the narrowed window may hold mostly the recovery after it
// (tuning seed 5098: a power cap on one GPU of a two-GPU engine for
// 14:05–14:13, the engine's stretch 14:09–14:12, the window 14:09–14:30
// against 14:00–14:09; the faulty GPU's clock averaged higher in that
// window than in that baseline).
func (r *run) focusStretch() (Interval, bool) {
	f := r.req.Focus
	if f == nil || f.Stretch == nil {
		return Interval{}, false
	}
	st := *f.Stretch
	if st.Start.Before(r.win.Start) || st.End.After(r.win.End) || !st.End.After(st.Start) {
		return Interval{}, false
	}
	return st, true
}

// sampleSQL is what a gpu_samples query of a cause's samples needs: the
// score, the window and baseline conditions ("0" without a baseline), the
// quoted metric list and the partition pruning.
func (r *run) sampleSQL(sp *dag.SampleSpec) (score, winCond, baseCond, metrics, prune string) {
	ivs := []Interval{r.win}
	baseCond = "0"
	if r.base != nil {
		ivs = append(ivs, *r.base)
		baseCond = sampleInterval(*r.base)
	}
	quoted := make([]string, len(sp.Metrics))
	for i, m := range sp.Metrics {
		quoted[i] = dag.QuoteString(m)
	}
	return "toFloat64(" + sp.Expr + ")", sampleInterval(r.win), baseCond, strings.Join(quoted, ", "), samplePrune(ivs...)
}

// sampleInterval is the gpu_samples condition of iv (time_ns).
func sampleInterval(iv Interval) string {
	return fmt.Sprintf("(time_ns >= %d AND time_ns < %d)", iv.Start.UnixNano(), iv.End.UnixNano())
}

// samplePrune bounds gpu_samples' DateTime column (partition pruning).
func samplePrune(ivs ...Interval) string {
	return strings.ReplaceAll(prune(ivs...), "start_time", "time")
}

// hostWideGPU names the host of a GPU cause that acts on a whole host (a
// rack's power cap, a host's cooling, a driver's XIDs, a host's PCIe
// switch): the candidate host is the one of the culprit's GPU, of all the
// GPUs it was split over, or, for a cause left on the scope, the host that
// carries LocalizeShare of its affected tail. The GPU samples of every GPU
// (any scope: the host's other GPUs may serve other models) say whether
// the cause is the host's: at least two of the host's busy GPUs (an idle
// one shows no throttling, heat or traffic whatever its host suffers), and
// at least half of them, show a rise of the cause's sample score of at least half
// the most affected GPU's rise, above the rise typical of other hosts'
// GPUs, and that GPU's rise exceeds their drift (hostWideNoise). The
// culprit then names the host (and the scope's model); its split per-GPU
// culprits are dropped.
func (r *run) hostWideGPU(c *causeRun) error {
	sp := c.node.Samples
	if sp == nil || c.exp.wTailExp == 0 {
		return nil
	}
	host := ""
	switch {
	case c.splitInto > 0:
		for _, s := range r.splits {
			if s.node.Name != c.node.Name {
				continue
			}
			h := r.gpus[s.entityKey].host
			if host != "" && h != host {
				return nil // split over hosts: per-GPU culprits stand
			}
			host = h
		}
	case c.cand.Entity.GPU != "":
		host = c.cand.Entity.Host
	default:
		if best := mostExposed(r.hosts, c.pidx); best != nil && best.exp[c.pidx].wTailExp >= r.cfg.LocalizeShare*c.exp.wTailExp {
			host = best.key
		}
	}
	if host == "" {
		return nil
	}
	// The node's samples, or its fallback when no GPU reports them.
	var rows []hostGPUScore
	anyUtil, anyScore := false, false
	for ; sp != nil; sp = sp.Fallback {
		var err error
		if rows, anyUtil, anyScore, err = r.hostGPUScores(sp); err != nil {
			return err
		}
		if anyScore {
			break
		}
	}
	var mine []hostGPUScore
	var others []float64
	for _, g := range rows {
		if g.nWin == 0 || anyUtil && !(g.nUtil > 0 && g.util >= busyGPUUtil) {
			continue
		}
		g.rise = g.win
		if g.nBase > 0 {
			g.rise = g.win - g.base
		}
		if g.host == host {
			mine = append(mine, g)
		} else {
			others = append(others, g.rise)
		}
	}
	if len(mine) < 2 {
		return nil
	}
	ref := 0.0
	if len(others) > 0 {
		ref = stats.Median(others)
	}
	top := math.Inf(-1)
	for _, g := range mine {
		top = math.Max(top, g.rise)
	}
	if !(top > ref) || top-ref <= hostWideNoise(others, ref) {
		return nil
	}
	elevated := 0
	for _, g := range mine {
		if g.rise-ref >= 0.5*(top-ref) {
			elevated++
		}
	}
	if elevated < 2 || 2*elevated < len(mine) {
		return nil
	}
	if c.splitInto > 0 {
		kept := r.splits[:0]
		for _, s := range r.splits {
			if s.node.Name != c.node.Name {
				kept = append(kept, s)
			}
		}
		r.splits, c.splitInto = kept, 0
	}
	c.cand.Entity = Entity{Host: host, Model: r.req.SLO.Scope["model"]}
	if es := r.hosts[host]; es != nil && es.healthOK {
		c.cand.Health = es.health
	}
	c.cand.Evidence = append(c.cand.Evidence, fmt.Sprintf("GPU samples: %s of %s rose on %d of the %d GPUs of host %s (by at least half of its most affected GPU's rise, %s, over the %s typical of other hosts' GPUs): the host, not one GPU",
		sp.Expr, strings.Join(sp.Metrics, ", "), elevated, len(mine), host, fmtNum(top), fmtNum(ref)))
	return nil
}

// hostWideNoise is how far other hosts' GPUs' rises stray from their
// median ref: the 90th percentile of their distances from it, 0 with fewer
// than HostWideNoiseMin of them. A host's most affected GPU must rise
// further to make the cause its host's: a memory-bandwidth fault on one GPU
// that covered a minute of a six-minute window raised its mean by 0.019,
// less than other hosts' GPUs drifted (up to 0.035), and three of its
// host's four GPUs, drifting as much, made it the host's (tuning seed 4734).
func hostWideNoise(others []float64, ref float64) float64 {
	if len(others) < HostWideNoiseMin {
		return 0
	}
	d := make([]float64, len(others))
	for i, o := range others {
		d[i] = math.Abs(o - ref)
	}
	sort.Float64s(d)
	return stats.Quantile(0.9, d)
}

// HostWideNoiseMin is the fewest other hosts' GPUs that measure the
// noise of hostWideGPU's rises (hostWideNoise).
const HostWideNoiseMin = 5

// hostGPUScore is one GPU's sample score with its host and its window
// utilization.
type hostGPUScore struct {
	host string
	gpuScore
	util, nUtil float64
}

// hostGPUScores reads sp's score of every GPU in the window and the
// baseline, with its window utilization: a GPU that serves nothing shows no
// throttling, heat or traffic whatever its host suffers, so only busy GPUs
// are counted (every GPU when none reports utilization). anyScore says
// whether any GPU has a window sample of sp.
func (r *run) hostGPUScores(sp *dag.SampleSpec) (rows []hostGPUScore, anyUtil, anyScore bool, err error) {
	score, winCond, baseCond, metrics, prune := r.sampleSQL(sp)
	isCause := fmt.Sprintf("metric IN (%s) AND isFinite(%s)", metrics, score)
	util := fmt.Sprintf("metric = %s AND %s", dag.QuoteString(gpuUtilMetric), winCond)
	q := fmt.Sprintf(`SELECT toString(host), toString(gpu), toFloat64(avgIf(%[1]s, %[7]s AND %[2]s)), toFloat64(avgIf(%[1]s, %[7]s AND %[3]s)), toFloat64(countIf(%[7]s AND %[2]s)), toFloat64(countIf(%[7]s AND %[3]s)),
    toFloat64(avgIf(value, %[8]s)), toFloat64(countIf(%[8]s))
FROM %[4]s FINAL
WHERE metric IN (%[5]s, %[9]s) AND %[6]s AND (%[2]s OR %[3]s) AND gpu != ''
GROUP BY host, gpu ORDER BY host, gpu LIMIT 100000`, score, winCond, baseCond, r.cfg.SamplesTable, metrics, prune, isCause, util, dag.QuoteString(gpuUtilMetric))
	err = r.query("host gpu samples", q, func(rs Rows) error {
		var g hostGPUScore
		if err := rs.Scan(&g.host, &g.gpu, &g.win, &g.base, &g.nWin, &g.nBase, &g.util, &g.nUtil); err != nil {
			return err
		}
		anyUtil = anyUtil || g.nUtil > 0
		anyScore = anyScore || g.nWin > 0
		rows = append(rows, g)
		return nil
	})
	return rows, anyUtil, anyScore, err
}
