package causal

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/gonum/mathext"

	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/causal/stats"
	"github.com/tailcause/tailcause/schemas"
)

// SweepRequest is the fleet-wide question "why was the tail bad in this
// window, and where?": no scope is given; the sweep finds every scope and
// entity whose tail broke.
type SweepRequest struct {
	// SLO: Signal, Quantile and ThresholdMS as for Request. Scope, when
	// set, restricts the sweep to the requests it selects (every scope and
	// entity found inside it).
	SLO      SLO
	Window   Interval
	Baseline *Interval
	// LookBack: when nothing broke in the window and requests before it
	// make a history (no Baseline given), ask again over the window with
	// its history ([A − Config.BaselineLength, B], from the first request
	// there) and report the breaches that last into the window: a tail
	// that broke before the window began and is still broken (the page an
	// on-call engineer opens minutes into a fault). The baseline the
	// window alone would get holds the fault's start and hides it.
	LookBack bool
}

// Breach levels, as Where.Level reports them.
const (
	LevelScope  = "scope"
	LevelEngine = "engine"
	LevelHost   = "host"
)

// Where says where a breach was found: its scope's P99 (LevelScope), or
// one entity far worse than its peers in the scope (LevelEngine,
// LevelHost). An extra field of v1 ("breach").
type Where struct {
	Level  string `json:"level"`
	Entity Entity `json:"entity"`
	// Window tail requests of the entity (or scope) above the scope's tail
	// threshold, out of Requests; PeerTailRate is the peers' rate.
	Requests     int64   `json:"requests"`
	TailRequests int64   `json:"tail_requests"`
	PeerTailRate float64 `json:"peer_tail_rate"`
	// PValue is the one-sided p-value of the entity's tail count against
	// its peers' rate, before the multiplicity correction.
	PValue float64 `json:"p_value,omitempty"`
	// ExcessTail is the tail requests above what the peers' rate (or the
	// baseline) predicts: the severity the sweep orders breaches by.
	ExcessTail float64 `json:"excess_tail"`
	// TailThresholdMS defines the tail requests counted here; QuantileMS
	// and PeerQuantileMS are the entity's own window quantile and its
	// peers' median (entity breaches).
	TailThresholdMS float64 `json:"tail_threshold_ms"`
	QuantileMS      float64 `json:"quantile_ms,omitempty"`
	PeerQuantileMS  float64 `json:"peer_quantile_ms,omitempty"`
	// Stretch is the part of the window where the entity is most
	// significantly worse, when the time scan found it: against its peers
	// in the same stretch ("peers") or against its own earlier requests,
	// net of its peers' drift ("own_past"); StretchPValue its p-value
	// before the correction.
	Stretch       *Interval `json:"stretch,omitempty"`
	StretchVs     string    `json:"stretch_vs,omitempty"`
	StretchPValue float64   `json:"stretch_p_value,omitempty"`
}

// SweepResult is the outcome of Sweep.
type SweepResult struct {
	// Breaches are the firing analyses, most severe first.
	Breaches []*Analysis
	// Scopes are the scopes examined, in the order examined.
	Scopes []map[string]string
	// Examined are the scope analyses (firing or not), in Scopes order.
	Examined []*Analysis
	// Insufficient are the scopes with too few window requests to judge.
	Insufficient []map[string]string
	// Notes are remarks about the sweep itself.
	Notes []string
	// Queries counts the SQL queries sent; QueryTime their total latency.
	Queries   int
	QueryTime time.Duration
	// Reads says whether the sweep's queries read a snapshot or the table.
	Reads Reads
	// Workers is the number of workers the scopes (or the entity
	// breaches) were spread over: Config.SweepParallel, at most one per
	// scope, fewer when the copies of the snapshot would exceed
	// Config.SweepCopyRows or one differed. CopyQueries counts the statements,
	// included in Queries, that made and checked the workers' copies of
	// the snapshot; the rest of Queries does not depend on the workers.
	Workers     int
	CopyQueries int

	ok       *Analysis         // the status-ok answer when nothing broke
	services map[string]string // model → its one service, where it has one
}

// Answer is what `rank` prints: the breaches, most severe first, or one
// status-ok document (the fleet, or the sweep's scope) when nothing broke.
func (s *SweepResult) Answer() []*Analysis {
	if len(s.Breaches) > 0 {
		return s.Breaches
	}
	return []*Analysis{s.ok}
}

// Sweep answers the fleet-wide question. Every model scope with requests
// in the window is examined twice:
//
//   - its own quantile against its baseline (Analyze: a scope breach);
//   - every engine and host of it against its peers in the same window
//     (screenScope): the entity's count of requests above the scope's
//     window quantile against the peers' Beta-Binomial rate, one-sided,
//     Bonferroni-corrected over every entity the sweep tests, and its own
//     quantile above its peers' by the breach margin. An entity far worse
//     than its peers is a breach of its own even when its scope's
//     quantile barely moved (one slow pod among 16 lifts the model's P99 by
//     a few percent while its own users wait several times longer).
//
// A scope breach whose window tail sits mostly (Config.FocusShare) on one
// breached entity is that entity's breach; other entity breaches are
// attributed within their scope with the entity as the focus
// (Request.Focus). Breaches are returned most severe first (excess tail
// requests). A window with no breach anywhere gives no breaches.
func (a *Analyzer) Sweep(ctx context.Context, req SweepRequest) (*SweepResult, error) {
	res, err := a.sweep(ctx, req)
	if err != nil || len(res.Breaches) > 0 || !req.LookBack || req.Baseline != nil {
		return res, err
	}
	from, ok, err := a.historyStart(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	if !ok {
		return res, nil
	}
	ext := req
	ext.Window.Start = from
	back, err := a.sweep(ctx, ext)
	if err != nil {
		return nil, err
	}
	var kept []*Analysis
	for _, an := range back.Breaches {
		if end := breachEnd(an, ext.Window.End); end.After(req.Window.Start) {
			note := fmt.Sprintf("the tail broke before the window asked (%s) and stayed broken into it, to %s: asked again over %s, the window with its history",
				fmtInterval(req.Window), end.UTC().Format(time.RFC3339), fmtInterval(ext.Window))
			an.Notes, an.Incident.Notes = append(an.Notes, note), append(an.Incident.Notes, note)
			kept = append(kept, an)
		}
	}
	res.Queries += back.Queries
	res.QueryTime += back.QueryTime
	res.CopyQueries += back.CopyQueries
	if len(kept) == 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("nothing broke in the window; asked again over %s, the window with its history: nothing broke that lasts into the window", fmtInterval(ext.Window)))
		return res, nil
	}
	res.Breaches = kept
	res.Notes = append(res.Notes, fmt.Sprintf("nothing broke against the window's own baseline; over %s, the window with its history, %d breach(es) that began before the window and last into it", fmtInterval(ext.Window), len(kept)))
	return res, nil
}

// historyStart is where the look-back sweep of req starts: the first
// request of the sweep's scope in [A − BaselineLength, A), when there are
// at least MinBaselineRequests there (ok).
func (a *Analyzer) historyStart(ctx context.Context, req SweepRequest) (time.Time, bool, error) {
	h := Interval{Start: req.Window.Start.Add(-a.cfg.BaselineLength), End: req.Window.Start}
	where := prune(h) + " AND " + inInterval(h)
	if len(req.SLO.Scope) > 0 {
		where += " AND " + scopeWhere(req.SLO.Scope)
	}
	v, err := queryFloats(ctx, a.db, "history", fmt.Sprintf("SELECT toFloat64(count()), toFloat64(min(start_ns)) FROM %s WHERE %s", a.table(), where), 2)
	if err != nil {
		return time.Time{}, false, err
	}
	if v[0] < float64(a.cfg.MinBaselineRequests) {
		return time.Time{}, false, nil
	}
	return time.Unix(0, int64(v[1])).UTC(), true, nil
}

// breachEnd is when a breach of a look-back sweep over a window ending at
// asked ends: the later of the entity's stretch (the time scan's run of
// buckets, the one with the most excess tail, which may stop short of
// the fault's end) and the recovery its analysis found (a window narrowed
// to end before asked: the quantile series recovers there); without a
// stretch, the (narrowed) window of its analysis. A host whose stretch
// ended at 14:38:30 while its analysis saw the series recover at 14:45:57
// lasted into a window from 14:44 (tuning seed 4019, a 55-minute run).
func breachEnd(an *Analysis, asked time.Time) time.Time {
	end := an.Incident.Window.End
	if w := an.Incident.Breach; w != nil && w.Stretch != nil && (!end.Before(asked) || w.Stretch.End.After(end)) {
		end = w.Stretch.End
	}
	return end
}

// sweep is Sweep without the look-back.
func (a *Analyzer) sweep(ctx context.Context, req SweepRequest) (*SweepResult, error) {
	if !req.Window.End.After(req.Window.Start) {
		return nil, fmt.Errorf("sweep: invalid request: window %s is empty", fmtInterval(req.Window))
	}
	if req.SLO.Signal == "" {
		req.SLO.Signal = "e2e_latency"
	}
	if req.SLO.Quantile == 0 {
		req.SLO.Quantile = 0.99
	}
	out, ok := a.dag.Outcome(req.SLO.Signal)
	if !ok {
		return nil, fmt.Errorf("sweep: invalid request: signal %q: no outcome node of the DAG measures it", req.SLO.Signal)
	}
	res := &SweepResult{services: map[string]string{}}
	// One snapshot of the sweep's rows serves every scope's analyses and
	// screens (snapshot.go).
	store, cov := a, a.coverage(req.Window, req.Baseline)
	a, made, release, err := a.withSnapshot(ctx, req.SLO.Scope, out.Covariate(), true, cov)
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	defer release()
	res.Reads = a.reads
	if made {
		res.Queries += snapshotStatements
		res.QueryTime += a.reads.SnapshotTime
	}
	scopes, err := a.discoverScopes(ctx, req, res)
	if err != nil {
		return nil, err
	}
	// The scopes are analyzed by up to Config.SweepParallel workers
	// (sweeppool.go), each result in its own slot, merged below in scope
	// order: the answer of the sequential loop.
	pool := newSweepPool(store, a, req.SLO.Scope, out.Covariate(), cov)
	defer pool.close()
	type scoped struct {
		sc       map[string]string
		an       *Analysis
		entities []*screened
		tested   int
		screenT  time.Duration
	}
	all := make([]*scoped, len(scopes))
	err = pool.run(ctx, len(scopes), func(ctx context.Context, a *Analyzer, i int) error {
		sc := scopes[i]
		r := Request{SLO: req.SLO, Window: req.Window, Baseline: req.Baseline, Scopes: len(scopes)}
		r.SLO.Scope = sc
		an, err := a.Analyze(ctx, r)
		if err != nil {
			return fmt.Errorf("sweep %s: %w", ScopeString(sc), err)
		}
		s := &scoped{sc: sc, an: an}
		if an.WindowQuantile.N > 0 {
			t0 := time.Now()
			var pre *Interval
			if an.BaselineSource == BaselinePreceding {
				b := an.Incident.Baseline
				pre = &b
			}
			ents, n, err := a.screenScope(ctx, sc, req.Window, pre, out.Covariate(), req.SLO.Quantile, an.WindowQuantile.Estimate)
			if err != nil {
				return fmt.Errorf("sweep %s: %w", ScopeString(sc), err)
			}
			s.entities, s.tested, s.screenT = ents, n, time.Since(t0)
		}
		all[i] = s
		return nil
	})
	if err != nil {
		return nil, err
	}
	tested := 0
	for _, s := range all {
		an := s.an
		res.Scopes = append(res.Scopes, s.sc)
		res.Examined = append(res.Examined, an)
		if an.Insufficient {
			res.Insufficient = append(res.Insufficient, s.sc)
		}
		res.Queries += an.Queries
		res.QueryTime += an.QueryTime
		if an.WindowQuantile.N > 0 {
			res.Queries += 4 // two GROUP BYs, the lower quantile, the stretches
			res.QueryTime += s.screenT
			tested += s.tested
		}
	}
	alpha := a.cfg.EntityAlpha / float64(max(tested, 1))
	// Which entity breaches each scope examines, and whether its own
	// breach comes first (decided from the scope's analysis and screen
	// alone); then their focused analyses, concurrently; then the
	// decisions, in scope order.
	type plan struct {
		breached             []*screened
		strict               int // breached[:strict] at the scan's level, the rest only explained (explainedOnly)
		deferred, scopeFirst bool
		focus                int // index of its first focused analysis
	}
	plans := make([]plan, len(all))
	var focus []Request
	for si, s := range all {
		p := &plans[si]
		p.breached = pickEntityBreaches(s.entities, alpha, a.cfg.MinRelIncrease)
		loose := explainedOnly(pickEntityBreaches(s.entities, alpha*a.cfg.ExplainedScanFactor, a.cfg.MinRelIncrease), p.breached)
		// Too few requests hurt to page for (Config.MinEntityExcess):
		// named in the notes, not examined further.
		small := func(e *screened) bool {
			if e.excessTail() >= a.cfg.MinEntityExcess {
				return false
			}
			res.Notes = append(res.Notes, fmt.Sprintf("%s %s looked worse than its peers (p %.2g in %s) but by %.1f tail requests, fewer than %g: not reported",
				e.kind, EntityString(e.ent), e.scanP, ScopeString(s.sc), e.excessTail(), a.cfg.MinEntityExcess))
			return true
		}
		p.breached = slices.DeleteFunc(p.breached, small)
		loose = slices.DeleteFunc(loose, small)
		var totalTail, totalN float64
		for _, e := range s.entities {
			if e.kind == LevelEngine {
				totalTail, totalN = totalTail+e.k, totalN+e.n
			}
		}
		// The scope's breach is one entity's when that entity holds most
		// of the scope's window tail at a higher rate than the rest of the
		// scope (deferred: confirmed below, when a culprit acts on that
		// entity). A host that serves most of the requests holds most of
		// the tail of a surge on the whole model, at the same rate.
		if s.an.Incident.Status == StatusFiring {
			if len(p.breached) > 0 && totalTail > 0 && p.breached[0].k >= a.cfg.FocusShare*totalTail && worseThanRest(p.breached[0], totalTail, totalN) {
				p.deferred = true
			} else {
				p.scopeFirst = true
				p.breached = uncovered(p.breached, s.an.Incident.Culprits)
				loose = uncovered(loose, s.an.Incident.Culprits)
			}
		}
		p.strict = len(p.breached)
		p.breached = append(p.breached, loose...)
		p.focus = len(focus)
		for _, e := range p.breached {
			w := e.where()
			r := Request{SLO: req.SLO, Window: req.Window, Baseline: req.Baseline, Focus: &w}
			r.SLO.Scope = s.sc
			r.IncidentID = IncidentID(entityScope(s.sc, w), req.Window.Start)
			focus = append(focus, r)
		}
	}
	focused := make([]*Analysis, len(focus))
	err = pool.run(ctx, len(focus), func(ctx context.Context, a *Analyzer, i int) error {
		an, err := a.Analyze(ctx, focus[i])
		if err != nil {
			return fmt.Errorf("sweep %s %s: %w", ScopeString(focus[i].SLO.Scope), EntityString(focus[i].Focus.Entity), err)
		}
		focused[i] = an
		return nil
	})
	if err != nil {
		return nil, err
	}
	for si, s := range all {
		p := plans[si]
		scopeBreach := func() {
			s.an.Incident.Breach = &Where{Level: LevelScope, Entity: scopeEntity(s.sc), Requests: s.an.Incident.Requests,
				TailRequests: s.an.Incident.TailRequests, ExcessTail: scopeExcess(s.an), TailThresholdMS: s.an.TailThresholdMS}
			res.Breaches = append(res.Breaches, s.an)
		}
		deferred := p.deferred
		if p.scopeFirst {
			scopeBreach()
		}
		for i := range p.breached {
			w := *focus[p.focus+i].Focus
			an := focused[p.focus+i]
			res.Queries += an.Queries
			res.QueryTime += an.QueryTime
			v := confirmEntity(an, w.Entity, deferred && i == 0)
			if i >= p.strict && v == entityReported && !explainedOn(an, w.Entity) {
				v = entityUnmeasured
			}
			switch v {
			case entityReported:
				res.Breaches = append(res.Breaches, an)
			case entityIsScope:
				scopeBreach()
			case entityScopeWide, entityUnexplained, entityUnmeasured:
				why := "no culprit acts on it"
				switch v {
				case entityScopeWide:
					why = "what acts on it acts on the whole scope"
				case entityUnmeasured:
					why = "short of the scan's level, and no measured mechanism on it comes first"
				}
				res.Notes = append(res.Notes, fmt.Sprintf("%s %s looked worse than its peers (p %.2g in %s) but %s: not reported",
					w.Level, EntityString(w.Entity), w.StretchPValue, ScopeString(s.sc), why))
			}
		}
	}
	// The statements that made and checked the workers' copies of the
	// snapshot.
	res.Workers, res.CopyQueries = pool.workers, pool.queries
	res.Queries += pool.queries
	res.QueryTime += pool.qtime
	sort.SliceStable(res.Breaches, func(i, j int) bool { return severity(res.Breaches[i]) > severity(res.Breaches[j]) })
	// A culprit of a model names its service too (workload and queue
	// causes are the service's to scale), when the model has one.
	for _, an := range res.Breaches {
		for i := range an.Incident.Culprits {
			e := &an.Incident.Culprits[i].Entity
			if svc := res.services[e.Model]; svc != "" && e.Service == "" {
				e.Service = svc
			}
		}
		if w := an.Incident.Breach; w != nil && w.Entity.Service == "" {
			w.Entity.Service = res.services[w.Entity.Model]
		}
	}
	res.ok = a.okAnswer(req, res)
	return res, nil
}

// entityVerdict is what a breached entity's focused analysis reports
// (confirmEntity).
type entityVerdict int

const (
	entityReported    entityVerdict = iota // the entity's own breach
	entityIsScope                          // the scope's breach, deferred to the entity
	entityNotFiring                        // the focused analysis found no breach
	entityScopeWide                        // what acts on it acts on the whole scope
	entityUnexplained                      // no culprit acts on it
	entityUnmeasured                       // only within ExplainedScanFactor of the level, and no measured mechanism explains it
)

// confirmEntity decides what the focused analysis an of a breached entity
// b reports; deferred says the scope's own breach was handed to b (b holds
// most of the scope's tail at a higher rate than the rest), so the scope's
// breach is reported in b's stead when b's is not confirmed.
func confirmEntity(an *Analysis, b Entity, deferred bool) entityVerdict {
	if an.Incident.Status != StatusFiring {
		if deferred {
			return entityIsScope
		}
		return entityNotFiring
	}
	if scopeWideFirst(an.Incident.Culprits, an.Candidates, b) {
		// A cause acting on the whole scope explains more of the entity's
		// tail than any acting on the entity alone. Deferred, that is the
		// scope's breach. Otherwise the scope did not breach (or its
		// breach is reported already): a burst of the scope's own load
		// that fell on one entity by chance. A fault-free tuning run (seed
		// 952) paged a pod for 90 s of its model's traffic swing, with a
		// model-wide prefill-interference culprit at 0.42 against the
		// pod's entity.degraded at 0.11.
		if deferred {
			return entityIsScope
		}
		return entityScopeWide
	}
	if !slices.ContainsFunc(an.Incident.Culprits, func(c Culprit) bool { return c.Entity.ActsOn(b) && credible(c, an.Candidates) }) {
		// Nothing measured or tested on the entity explains its tail: not
		// confirmed (a fault-free holdout run fired with no culprit at
		// all). Deferred, what acts on it acts on the whole scope: the
		// scope's breach.
		if deferred {
			return entityIsScope
		}
		return entityUnexplained
	}
	return entityReported
}

// explainedOnly is the entities of wide (picked at the scan's level times
// Config.ExplainedScanFactor) that strict (picked at the level) lacks,
// less the engines of a host strict holds: breaches only when a measured
// mechanism on them explains them (explainedOn). A host and an engine on
// it are one breach: the strict one stands.
func explainedOnly(wide, strict []*screened) []*screened {
	var out []*screened
	for _, e := range wide {
		if slices.ContainsFunc(strict, func(s *screened) bool {
			return s == e || s.ent.Host == e.ent.Host && s.kind != e.kind // a host and an engine on it
		}) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// explainedOn reports whether the first culprit of a focused analysis
// that acts on the breached entity b is a measured mechanism there: not
// entity.degraded, not a symptom, its exposure enriched in the tail
// (credible). The culprits acting on b come first (focusCulprits).
func explainedOn(an *Analysis, b Entity) bool {
	for _, c := range an.Incident.Culprits {
		if !c.Entity.ActsOn(b) {
			continue
		}
		if c.Cause == schemas.CauseEntityDegraded || !credible(c, an.Candidates) {
			return false
		}
		return !slices.ContainsFunc(an.Candidates, func(k Candidate) bool {
			return k.Culprit && k.Cause == c.Cause && k.Entity == c.Entity && k.Symptom
		})
	}
	return false
}

// worseThanRest reports whether entity e's window tail rate is above the
// rest of its scope's (tail of n requests in all); an entity that is the
// whole scope is.
func worseThanRest(e *screened, tail, n float64) bool {
	if n-e.n <= 0 || e.n <= 0 {
		return true
	}
	return e.k/e.n > (tail-e.k)/(n-e.n)
}

// okAnswer is the status-ok document of a sweep with no breach.
func (a *Analyzer) okAnswer(req SweepRequest, res *SweepResult) *Analysis {
	slo := req.SLO
	if slo.Scope == nil {
		slo.Scope = map[string]string{}
	}
	in := Incident{
		Status: StatusOK, SLO: slo, Window: req.Window,
		Baseline: Interval{Start: req.Window.Start, End: req.Window.Start},
		Method:   Method{Estimator: Estimator, DAG: a.dag.Version(), Version: a.cfg.Version},
		Notes:    append([]string(nil), res.Notes...),
	}
	if req.Baseline != nil {
		in.Baseline = *req.Baseline
	}
	for _, sc := range res.Scopes {
		in.Notes = append(in.Notes, "examined "+ScopeString(sc)+": no breach of its quantile, no engine or host far worse than its peers")
	}
	return &Analysis{Incident: in, BaselineSource: BaselineNone, Queries: res.Queries, QueryTime: res.QueryTime}
}

// entityScope is the scope of an entity breach, for its incident id: the
// scope plus the entity's identifying fields.
func entityScope(sc map[string]string, w Where) map[string]string {
	out := map[string]string{"breach": w.Level}
	for k, v := range sc {
		out[k] = v
	}
	if w.Entity.Host != "" {
		out["host"] = w.Entity.Host
	}
	if w.Entity.Pod != "" {
		out["pod"] = w.Entity.Pod
	}
	if w.Entity.Engine != "" {
		out["engine"] = w.Entity.Engine
	}
	return out
}

func scopeEntity(sc map[string]string) Entity {
	return Entity{Model: sc["model"], Service: sc["service"]}
}

// scopeExcess is a scope breach's excess tail: its window tail requests
// beyond the share the quantile allows.
func scopeExcess(an *Analysis) float64 {
	in := an.Incident
	return math.Max(float64(in.TailRequests)-(1-in.SLO.Quantile)*float64(in.Requests), 0)
}

// uncovered drops the entity breaches a scope incident's culprits already
// name (the scope breach explains them).
func uncovered(es []*screened, cs []Culprit) []*screened {
	var out []*screened
	for _, e := range es {
		covered := false
		for _, c := range cs {
			if c.Entity.ActsOn(e.ent) {
				covered = true
			}
		}
		if !covered {
			out = append(out, e)
		}
	}
	return out
}

// scopeWideFirst reports whether a measured mechanism acting on the whole
// scope (no host, engine, pod or GPU) should keep its attributable-fraction
// rank ahead of the culprits the focus puts first, those acting on the
// breached entity b: when it explains more of the tail than an
// entity.degraded on b (slow, with nothing measured explaining it) and
// more than twice what any measured mechanism on b explains (a symptom on
// b, such as the queue its slower service built, is no rival). A measured
// mechanism on the entity keeps the focus as long as it explains half as
// much: a scope-wide mechanism's larger fraction there is often the
// entity's own fault seen through a mediator (a PCIe-starved host's
// engine prefilling in bursts). A tuning run's KV-cache collapse on a
// whole model (seed 981: attributable fraction 0.88) was paged on one of
// its pods because a PCIe culprit of 0.07 acted on that pod's host.
func scopeWideFirst(cs []Culprit, cands []Candidate, b Entity) bool {
	cand := func(c Culprit) (Candidate, bool) {
		for _, k := range cands {
			if k.Culprit && k.Cause == c.Cause && k.Entity == c.Entity {
				return k, true
			}
		}
		return Candidate{}, false
	}
	var degraded, measured, wide float64
	for _, c := range cs {
		k, ok := cand(c)
		switch {
		case !ok || k.Symptom:
		case c.Entity.ActsOn(b) && c.Cause == schemas.CauseEntityDegraded:
			degraded = math.Max(degraded, c.AttributableFraction)
		case c.Entity.ActsOn(b):
			measured = math.Max(measured, c.AttributableFraction)
		case scopeWide(c.Entity) && c.Cause != schemas.CauseEntityDegraded:
			wide = math.Max(wide, c.AttributableFraction)
		}
	}
	return wide > degraded && wide > 2*measured
}

// credible reports whether a culprit can stand for an entity breach: an
// entity.degraded (the entity is slow, nothing measured explains it), or a
// mechanism whose exposure is more common in the window's tail than in the
// baseline (TailEnriched). A fault-free tuning run's host breach was
// confirmed by a memory-bandwidth culprit on 3% of the tail against 5% of
// the baseline.
func credible(c Culprit, cands []Candidate) bool {
	if c.Cause == schemas.CauseEntityDegraded {
		return true
	}
	for _, k := range cands {
		if k.Culprit && k.Cause == c.Cause && k.Entity == c.Entity {
			return k.TailEnriched
		}
	}
	return false
}

// scopeWide reports whether a culprit's entity is its whole scope (no
// host, engine, pod or GPU).
func scopeWide(e Entity) bool { return e.Host == "" && e.Pod == "" && e.GPU == "" && e.Engine == "" }

// ActsOn reports whether a culprit's entity c acts on the breached entity
// b (an engine or a host), as the sweep attributes breaches.
func (c Entity) ActsOn(b Entity) bool {
	switch {
	case b.Pod != "" || b.Engine != "":
		return c.Host == b.Host && (c.Pod != "" && c.Pod == b.Pod || c.Pod == "" && c.Engine != "" && c.Engine == b.Engine) ||
			c.Host == b.Host && c.Pod == "" && c.Engine == "" && c.GPU == "" // the whole host
	case b.Host != "":
		return c.Host == b.Host
	}
	return false
}

// severity orders breaches: the excess tail requests of the breach.
func severity(an *Analysis) float64 {
	if w := an.Incident.Breach; w != nil {
		return w.ExcessTail
	}
	return scopeExcess(an)
}

// screened is one engine or host of a scope, tested against its peers.
type screened struct {
	kind       string // LevelEngine or LevelHost
	key        string
	ent        Entity
	n, k       float64 // window requests, of which above the scope's quantile
	quantile   float64 // the entity's own window quantile
	peerQ      float64 // the median of its peers' quantiles
	peerRate   float64
	pval       float64
	excess     float64
	thresholdT float64
	engines    int  // a host's engines in the scope
	tested     bool // scored against at least one peer
	// The time scan (scanEntities): the stretch of the window where the
	// entity is most significantly worse than its peers or its own past.
	scanP      float64 // its one-sided p-value (before the correction)
	scanTests  int     // intervals tested
	scanFrom   time.Time
	scanTo     time.Time
	scanExcess float64
	scanWhy    string         // "peers" or "own past"
	buckets    []bucketCounts // counts above the threshold being scanned
	pre        bucketCounts   // the same before the window (the scope's preceding baseline)
	// byT holds the counts above each scanned threshold (the scope's
	// window quantile, and a lower one: scanThresholds).
	byT [2]struct {
		buckets []bucketCounts
		pre     bucketCounts
	}
	scanT float64 // the threshold of the best stretch
	// The best stretch as bucket indices and the threshold's index in byT.
	scanLo, scanHi, scanTi int
	win                    Interval
}

// bucketCounts are an entity's requests and tail requests in one stretch.
type bucketCounts struct{ n, k float64 }

// excessTail is the entity's excess tail requests: the larger of the whole
// window's against its peers and its worst stretch's against the scan's
// yardstick.
func (e *screened) excessTail() float64 { return math.Max(e.excess, e.scanExcess) }

func (e *screened) where() Where {
	w := Where{Level: e.kind, Entity: e.ent, Requests: int64(e.n), TailRequests: int64(e.k), PeerTailRate: round(e.peerRate, 6),
		PValue: e.pval, ExcessTail: round(e.excessTail(), 1), TailThresholdMS: e.thresholdT, QuantileMS: round(e.quantile, 1), PeerQuantileMS: round(e.peerQ, 1)}
	if e.scanWhy != "" {
		w.Stretch = &Interval{Start: e.scanFrom, End: e.scanTo}
		w.StretchVs = e.scanWhy
		w.StretchPValue = e.scanP
	}
	return w
}

// screenScope tests every engine and every host of the scope against its
// peers: tail is the count of window requests above t, the scope's window
// quantile. It returns the entities (tested or not) and how many were
// tested.
func (a *Analyzer) screenScope(ctx context.Context, sc map[string]string, win Interval, pre *Interval, y string, q, t float64) ([]*screened, int, error) {
	where := scopeWhere(sc) + " AND isFinite(" + y + ") AND " + prune(win) + " AND " + inInterval(win)
	tail := fmt.Sprintf("toFloat64(countIf(%s > %s))", y, dag.FormatFloat(t))
	qq := fmt.Sprintf("toFloat64(quantileExact(%s)(%s))", dag.FormatFloat(q), y)
	var out []*screened
	read := func(kind, group, labels string) error {
		qs := fmt.Sprintf("SELECT %s, toFloat64(count()), %s, %s FROM %s WHERE %s GROUP BY %s", labels, tail, qq, a.table(), where, group)
		return QueryRows(ctx, a.db, "entity screen", qs, func(rows Rows) error {
			e := &screened{kind: kind, thresholdT: t}
			var host, pod, engine string
			var dest []any
			if kind == LevelEngine {
				dest = []any{&host, &pod, &engine, &e.n, &e.k, &e.quantile}
			} else {
				var engines float64
				defer func() { e.engines = int(engines) }()
				dest = []any{&host, &engines, &e.n, &e.k, &e.quantile}
			}
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			e.ent = Entity{Host: host, Pod: pod, Engine: engine, Model: sc["model"], Service: sc["service"]}
			e.key = host + "/" + pod + "/" + engine
			if kind == LevelHost {
				e.key = host
			}
			out = append(out, e)
			return nil
		})
	}
	if err := read(LevelEngine, "host, pod, engine", "toString(host), toString(pod), toString(engine)"); err != nil {
		return nil, 0, err
	}
	if err := read(LevelHost, "host", "toString(host), toFloat64(uniqExact(host, pod, engine))"); err != nil {
		return nil, 0, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].kind+out[i].key < out[j].kind+out[j].key })
	qs := scanThresholds(q)
	lower, err := queryFloats(ctx, a.db, "scope lower quantile", fmt.Sprintf("SELECT toFloat64(quantileExact(%s)(%s)) FROM %s WHERE %s", dag.FormatFloat(qs[1]), y, a.table(), where), 1)
	if err != nil {
		return nil, 0, err
	}
	ts := [2]float64{t, t}
	if finite(lower[0]) && lower[0] < t {
		ts[1] = lower[0]
	}
	if err := a.readBuckets(ctx, out, sc, win, pre, y, ts); err != nil {
		return nil, 0, err
	}
	tested := 0
	for _, kind := range []string{LevelEngine, LevelHost} {
		var set []*screened
		for _, e := range out {
			if e.kind == kind && e.n >= float64(a.cfg.MinEntityRows) && (e.ent.Host != "" || kind == LevelEngine) {
				set = append(set, e)
			}
		}
		if len(set) < 2 {
			continue
		}
		for i, e := range set {
			var peers []stats.EntityCounts
			var pq []float64
			var pk, pn float64
			for j, o := range set {
				if j != i {
					peers = append(peers, stats.EntityCounts{Key: o.key, Tail: o.k, N: o.n})
					pq = append(pq, o.quantile)
					pk += o.k
					pn += o.n
				}
			}
			prior, err := stats.FitBetaPrior(peers, nil)
			if err != nil {
				return nil, 0, err
			}
			e.peerRate = pk / pn
			e.peerQ = stats.Median(pq)
			e.pval = betaBinomialSF(e.k, e.n, prior.Alpha, prior.Beta)
			e.excess = math.Max(e.k-e.n*prior.Mean(), 0)
			e.tested = true
			tested++
		}
		scanEntities(set, ts)
	}
	return out, tested, nil
}

// scanBuckets is the number of stretches the window is cut into for the
// time scan.
const scanBuckets = 10

// scanTests is how many tests an entity's time scan makes at most: every
// run of consecutive buckets, at each of the two thresholds (scanOnce).
const scanTests = scanBuckets * (scanBuckets + 1)

// ownPastPeersRatio is how far above its peers' rate a stretch must be
// (less than the peers test's 3 times) when its own past decides: at
// least 3 times its ratio to the peers before, and significant against
// its own rate before, net of the peers' drift.
const ownPastPeersRatio = 1.5

// readBuckets fills each entity's per-stretch counts (and those before the
// window, when the scope has a preceding baseline).
func (a *Analyzer) readBuckets(ctx context.Context, ents []*screened, sc map[string]string, win Interval, pre *Interval, y string, ts [2]float64) error {
	byKey := map[string]*screened{}
	for _, e := range ents {
		for i := range e.byT {
			e.byT[i].buckets = make([]bucketCounts, scanBuckets)
		}
		e.win = win
		byKey[e.kind+"|"+e.key] = e
	}
	width := (win.End.UnixNano() - win.Start.UnixNano() + scanBuckets - 1) / scanBuckets
	ivs := []Interval{win}
	cond := inInterval(win)
	if pre != nil {
		ivs = append(ivs, *pre)
		cond = "(" + cond + " OR " + inInterval(*pre) + ")"
	}
	bucket := fmt.Sprintf("if(start_ns < %d, -1, intDiv(start_ns - %d, %d))", win.Start.UnixNano(), win.Start.UnixNano(), width)
	where := scopeWhere(sc) + " AND isFinite(" + y + ") AND " + prune(ivs...) + " AND " + cond
	q := fmt.Sprintf("SELECT toString(host), toString(pod), toString(engine), toFloat64(%s) AS tc_b, toFloat64(count()), toFloat64(countIf(%s > %s)), toFloat64(countIf(%s > %s)) FROM %s WHERE %s GROUP BY host, pod, engine, tc_b",
		bucket, y, dag.FormatFloat(ts[0]), y, dag.FormatFloat(ts[1]), a.table(), where)
	return QueryRows(ctx, a.db, "entity buckets", q, func(rows Rows) error {
		var host, pod, engine string
		var b, n float64
		var k [2]float64
		if err := rows.Scan(&host, &pod, &engine, &b, &n, &k[0], &k[1]); err != nil {
			return err
		}
		for _, key := range []string{LevelEngine + "|" + host + "/" + pod + "/" + engine, LevelHost + "|" + host} {
			e := byKey[key]
			if e == nil {
				continue
			}
			for i := range e.byT {
				bt := &e.byT[i]
				switch {
				case b < 0:
					bt.pre.n += n
					bt.pre.k += k[i]
				case int(b) < scanBuckets:
					bt.buckets[int(b)].n += n
					bt.buckets[int(b)].k += k[i]
				}
			}
		}
		return nil
	})
}

// scanThresholds are the quantile levels of the tail definitions the time
// scan counts against: the SLO's (e.g. the P99: the scope's window
// quantile), and the one five times further from the top (the P95), where
// a slowdown that moves an entity's whole distribution shows with five
// times the counts.
func scanThresholds(q float64) [2]float64 { return [2]float64{q, math.Max(1-5*(1-q), 0.5)} }

// scanEntities looks, for every entity of set (one kind, one scope), for
// the stretch of consecutive buckets where its tail count is least likely:
//
//   - against its peers in the same stretch: Beta-Binomial with the peers'
//     prior (method of moments, the MinCV floor), with at least 3 times
//     their rate (material); or, from 1.5 to 3 times their rate and at
//     least 3 times its own ratio to them before, against its own past as
//     below (significant there): a pod that was faster than its peers and
//     turned twice as slow as them changed, though the peers' spread
//     cannot show it (tuning seeds 1330, 1334, 1368: power caps and a
//     prefix-cache fault at 1.5–2.2 times the peers' rate, p 10⁻¹⁰–10⁻²⁵
//     against the pod's own past);
//   - against its own past, when it has fewer than two peers: its own
//     rate before the stretch (the earlier buckets, and the preceding
//     baseline when there is one), scaled by its peer's drift over the same
//     times, as a Beta-Binomial predictive (Jeffreys posterior, its
//     concentration capped by the MinCV floor), with at least 3 times that
//     rate.
//
// A fault that starts midway through the window, or hits a model of two
// engines whose peer tells little, shows in a stretch long before it
// shows in the whole window.
func scanEntities(set []*screened, ts [2]float64) {
	type found struct {
		p, ex      float64
		why        string
		from, to   time.Time
		tests      int
		lo, hi, ti int
	}
	best := make([]found, len(set))
	for i := range best {
		best[i].p = 1
	}
	for ti := range ts {
		for _, e := range set {
			e.buckets, e.pre, e.scanWhy, e.scanP = e.byT[ti].buckets, e.byT[ti].pre, "", 1
		}
		scanOnce(set)
		for i, e := range set {
			best[i].tests += e.scanTests
			if e.scanWhy != "" && e.scanP < best[i].p {
				best[i] = found{p: e.scanP, ex: e.scanExcess, why: e.scanWhy, from: e.scanFrom, to: e.scanTo, tests: best[i].tests, lo: e.scanLo, hi: e.scanHi, ti: ti}
				e.scanT = ts[ti]
			}
		}
	}
	for i, e := range set {
		b := best[i]
		e.scanTests, e.scanWhy, e.scanP, e.scanExcess, e.scanFrom, e.scanTo = b.tests, b.why, b.p, b.ex, b.from, b.to
		e.scanLo, e.scanHi, e.scanTi = b.lo, b.hi, b.ti
		e.buckets, e.pre = e.byT[0].buckets, e.byT[0].pre
	}
}

// scanOnce is one threshold's scan (scanEntities).
func scanOnce(set []*screened) {
	rates := ratesBefore(set)
	for i, e := range set {
		best, bestEx := 1.0, 0.0
		var from, to int
		why := ""
		tests := 0
		for lo := 0; lo < scanBuckets; lo++ {
			var ke, ne float64
			peerK := make([]float64, len(set))
			peerN := make([]float64, len(set))
			like := likePeers(rates[lo], i)
			likeBefore, likeOK := ratioBefore(set, like, i, lo)
			ownBefore, peersBefore := past(set, nil, i, lo)
			before, beforeOK := ratioBefore(set, nil, i, lo)
			for hi := lo; hi < scanBuckets; hi++ {
				ke += e.buckets[hi].k
				ne += e.buckets[hi].n
				for j, o := range set {
					if j != i {
						peerK[j] += o.buckets[hi].k
						peerN[j] += o.buckets[hi].n
					}
				}
				if ne < 20 || ke < 5 {
					continue
				}
				tests++
				pk, pn, peers := peerSums(set, i, nil, peerK, peerN)
				// Against the peers in the same stretch, and worse than it
				// was against them before (a change: an engine on slower
				// hardware is always behind its peers, and that is not a
				// breach).
				if len(peers) >= 2 && pn > 0 && beforeOK {
					rate := (pk + 0.5) / (pn + 1)
					// Its own rate must rise too: a pod always behind (23
					// tail requests of 737 before, its peers 22 of 2,946)
					// looked three times further behind when its peers
					// had, by chance, 9 of 2,956 in the window, its own
					// rate barely moved (28 of 738), in a fault-free tuning
					// run.
					if ke/ne >= 2*rate*before && ke/ne >= 2*(ownBefore.k+0.5)/(ownBefore.n+1) {
						switch {
						case ke/ne >= 3*rate:
							// The yardstick is the like peers' rate there
							// (likePeers) times the entity's own ratio to
							// them before (at least 1): an entity that was
							// always behind must fall further behind,
							// significantly, to count.
							yk, yn, ys, yBefore := pk, pn, peers, before
							if lk, ln, ls := peerSums(set, i, like, peerK, peerN); len(ls) >= 2 && ln > 0 && likeOK {
								yk, yn, ys, yBefore = lk, ln, ls, likeBefore
							}
							prior := stats.MomentsPrior(ys, minCVConc)
							mu := math.Min(prior.Mean()*math.Max(yBefore, 1), 0.5)
							conc := prior.Alpha + prior.Beta
							if ke/ne < 2*(yk+0.5)/(yn+1)*yBefore {
								break // no change against the like peers
							}
							if p := betaBinomialSF(ke, ne, mu*conc, (1-mu)*conc); p < best {
								best, from, to, why, bestEx = p, lo, hi, "peers", ke-ne*mu
							}
						case ke/ne >= ownPastPeersRatio*rate && ke/ne >= 3*rate*before:
							if p, muOwn, ok := driftedPastSF(ke, ne, pk, pn, ownBefore, peersBefore); ok && p < best {
								best, from, to, why, bestEx = p, lo, hi, "own_past", ke-ne*muOwn
							}
						}
					}
				}
				// Against its own past, net of the peers' drift: only where
				// fewer than two peers make a yardstick (a model of one or
				// two engines). With more, a scope-wide shift moves peers
				// unevenly and the peers in the same stretch are the fairer
				// comparison. (Tried with any number of peers: it found a
				// tuning run's degraded host, one engine of twelve that rose
				// fourfold on its own past but never to three times its
				// peers' rate, seed 944, and paged four healthy engines of
				// TestLifecycle's sixteen after its faults ended.)
				if len(set) > 2 {
					continue
				}
				if p, mu, ok := driftedPastSF(ke, ne, pk, pn, ownBefore, peersBefore); ok && p < best {
					best, from, to, why, bestEx = p, lo, hi, "own_past", ke-ne*mu
				}
			}
		}
		e.scanTests = tests
		if why != "" {
			e.scanP, e.scanWhy, e.scanExcess = best, why, math.Max(bestEx, 0)
			e.scanFrom, e.scanTo = bucketBounds(e, from, to)
			e.scanLo, e.scanHi = from, to
		}
	}
}

// driftedPastSF is a stretch's own-past test (scanOnce): its ke tail
// requests of ne against its own rate before it (own), scaled by its peers'
// drift from before (peersPast) to the stretch (pk of pn), as a
// Beta-Binomial predictive with at least 3 times that rate. mu is the
// yardstick's rate; ok is false under the floors (100 requests before, 3
// times the rate).
func driftedPastSF(ke, ne, pk, pn float64, own, peersPast bucketCounts) (p, mu float64, ok bool) {
	if own.n < 100 {
		return 1, 0, false
	}
	ppN, ppK := peersPast.n, peersPast.k
	drift := 1.0
	if ppN > 0 && pn > 0 {
		drift = ((pk + 0.5) / (pn + 1)) / ((ppK + 0.5) / (ppN + 1))
	}
	mu, sPast := ownPastPrior(own, drift)
	if ke/ne < 3*mu {
		return 1, mu, false
	}
	if ppN > 0 && pn > 0 {
		// The drift is measured, not known: a burst that lifts both
		// engines' tails shows in the peer's few tail requests, and
		// scaling by their rate as if exact makes a chance split of the
		// burst look like a change. The yardstick's spread is the past
		// rate's and the drift's together (log-normal: their log
		// variances, trigamma of the Jeffreys counts, add).
		cv2 := (1+1/(mu*sPast))*math.Exp(trigamma(pk+0.5)+trigamma(ppK+0.5)) - 1
		sPast = math.Min(1/(cv2*mu), sPast)
	}
	return betaBinomialSF(ke, ne, mu*sPast, (1-mu)*sPast), mu, true
}

// minCVConc is the MinCV floor of the scans' Beta yardsticks: the
// largest concentration a Beta of mean mu may have, so that its CV stays
// at least 0.25 (tail rates drift more than binomial noise says).
func minCVConc(mu float64) float64 { return cvConc(mu, minCV) }

// minCV is the scans' MinCV floor.
const minCV = 0.25

// cvConc is the concentration of a Beta of mean mu and coefficient of
// variation cv.
func cvConc(mu, cv float64) float64 { return math.Max((1-mu)/(mu*cv*cv)-1, 1e-3) }

// ownPastPrior is the yardstick of an own-past test: the Jeffreys
// posterior of the past tail rate, scaled by drift, as a Beta of mean mu
// and concentration s (the same counts' concentration, under the MinCV
// floor).
func ownPastPrior(past bucketCounts, drift float64) (mu, s float64) {
	mu = math.Min((past.k+0.5)/(past.n+1)*drift, 0.5)
	return mu, math.Min(past.n+1, minCVConc(mu))
}

// ownPastSF is the one-sided p-value of a stretch's tail count against its
// own past's rate (ownPastPrior, no drift; its CV at least cv when cv is
// past the MinCV floor), with scanOnce's floors: at least 20 requests and
// 5 tail ones in the stretch, 100 before it, and 3 times the past rate. ok
// is false where a floor is not met.
func ownPastSF(cur, past bucketCounts, cv float64) (float64, bool) {
	if cur.n < 20 || cur.k < 5 || past.n < 100 {
		return 1, false
	}
	mu, s := ownPastPrior(past, 1)
	if cv > minCV {
		s = math.Min(s, cvConc(mu, cv))
	}
	if cur.k/cur.n < 3*mu {
		return 1, false
	}
	return betaBinomialSF(cur.k, cur.n, mu*s, (1-mu)*s), true
}

// pickEntityBreaches keeps the entities the time scan found significantly
// (p ≤ alpha, corrected for the stretches too) and materially worse than
// their peers or their own past (scanEntities). A host is a breach of its
// own when at least two of its engines in the scope are elevated (each
// worse than its peers over the window, p ≤ 0.05 and half the margin, or in
// a stretch at p ≤ 0.001, breached or not): the slowness is the host's. A host
// whose excess comes from one engine is that engine's matter. Most severe
// first.
func pickEntityBreaches(all []*screened, alpha, margin float64) []*screened {
	// The time scan tests up to B(B+1)/2 stretches per entity at each of
	// two thresholds, one yardstick per stretch (the peers', or its own
	// past where the peers' ratio or their number calls for it: never
	// both): B(B+1) tests (scanTests). Its p-value is corrected for twice
	// that: the yardsticks' Beta spreads are estimates, and at the plain
	// count a healthy pod of a tuning fleet breached on a 90 s stretch
	// (seed 4620, p 2.0e-6) while one more fault was found (4627).
	scanAlpha := alpha / float64(2*scanTests)
	bad := func(e *screened) bool {
		// The whole-window comparison with the peers cannot tell a change
		// from an entity that is always slower: only the scan decides
		// (significant, at least 3 times the yardstick's rate in the
		// stretch, and against peers at least twice its earlier ratio).
		return e.tested && e.scanWhy != "" && e.scanP <= scanAlpha
	}
	elevated := func(e *screened) bool {
		return e.tested && (e.pval <= 0.05 && e.quantile > e.peerQ*(1+margin/2) || e.scanWhy != "" && e.scanP <= 0.001)
	}
	elevatedOnHost := map[string]int{}
	for _, e := range all {
		if e.kind == LevelEngine && elevated(e) {
			elevatedOnHost[e.ent.Host]++
		}
	}
	var out []*screened
	hostBreach := map[string]bool{}
	for _, e := range all {
		if e.kind == LevelHost && bad(e) && e.engines >= 2 && (elevatedOnHost[e.ent.Host] >= 2 || sharedOnHost(e, all)) {
			hostBreach[e.ent.Host] = true
			out = append(out, e)
		}
	}
	for _, e := range all {
		if e.kind == LevelEngine && bad(e) && !hostBreach[e.ent.Host] {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].excessTail() > out[j].excessTail()
	})
	return out
}

// sharedOnHost reports whether a host's excess tail in its worst stretch
// is shared by its engines: against the other hosts' engines' rate there,
// the second largest engine excess is at least half the largest. When a
// whole host is slow its engines are each other's peers and mask one
// another in the engine tests; judged against the other hosts they are
// all elevated, whereas one bad engine leaves the others at the rate.
func sharedOnHost(h *screened, all []*screened) bool {
	var otherK, otherN float64
	var own []*screened
	for _, e := range all {
		if e.kind != LevelEngine || len(e.byT[h.scanTi].buckets) <= h.scanHi {
			continue
		}
		if e.ent.Host == h.ent.Host {
			own = append(own, e)
			continue
		}
		for b := h.scanLo; b <= h.scanHi; b++ {
			otherK += e.byT[h.scanTi].buckets[b].k
			otherN += e.byT[h.scanTi].buckets[b].n
		}
	}
	if len(own) < 2 || otherN == 0 {
		return false
	}
	rate := (otherK + 0.5) / (otherN + 1)
	excess := make([]float64, 0, len(own))
	for _, e := range own {
		var k, n float64
		for b := h.scanLo; b <= h.scanHi; b++ {
			k += e.byT[h.scanTi].buckets[b].k
			n += e.byT[h.scanTi].buckets[b].n
		}
		excess = append(excess, math.Max(0, k-n*rate))
	}
	_, _, ok := sharedExcess(excess)
	return ok
}

// trigamma is ψ₁(x), the variance of log X for X ~ Gamma(x): the
// recurrence up to 10, then the asymptotic series.
func trigamma(x float64) float64 {
	var acc float64
	for ; x < 10; x++ {
		acc += 1 / (x * x)
	}
	x2 := 1 / (x * x)
	return acc + 1/x + x2/2 + x2/x*(1.0/6-x2*(1.0/30-x2/42))
}

// betaBinomialSF is P(X ≥ k) for X ~ BetaBinomial(n, α, β).
func betaBinomialSF(k, n, alpha, beta float64) float64 {
	if k <= 0 {
		return 1
	}
	// P(X ≤ k−1), summed in log space from the pmf.
	lb := mathext.Lbeta(alpha, beta)
	lc := func(x float64) float64 {
		a, _ := math.Lgamma(n + 1)
		b, _ := math.Lgamma(x + 1)
		c, _ := math.Lgamma(n - x + 1)
		return a - b - c
	}
	var cdf float64
	for x := 0.0; x < k; x++ {
		cdf += math.Exp(lc(x) + mathext.Lbeta(x+alpha, n-x+beta) - lb)
	}
	if cdf >= 1 {
		// Rounding: compute the upper tail directly.
		var sf float64
		for x := k; x <= n && x < k+2000; x++ {
			sf += math.Exp(lc(x) + mathext.Lbeta(x+alpha, n-x+beta) - lb)
		}
		return sf
	}
	return 1 - cdf
}

func scopeWhere(sc map[string]string) string {
	conds := []string{"1"}
	for _, k := range sortedKeys(sc) {
		conds = append(conds, k+" = "+dag.QuoteString(sc[k]))
	}
	return strings.Join(conds, " AND ")
}

// discoverScopes lists the model scopes with requests in the window.
func (a *Analyzer) discoverScopes(ctx context.Context, req SweepRequest, res *SweepResult) ([]map[string]string, error) {
	// The busiest MaxScopes models (a flood of fake model names must not
	// make a sweep unbounded); the rest are named in a note.
	q := fmt.Sprintf("SELECT toString(model) AS m, toFloat64(count()) AS n, toString(any(service)), toFloat64(uniqExact(service)) FROM %s WHERE %s AND %s AND %s GROUP BY m ORDER BY n DESC, m LIMIT %d",
		a.table(), scopeWhere(req.SLO.Scope), prune(req.Window), inInterval(req.Window), a.cfg.MaxScopes+1)
	var out []map[string]string
	err := QueryRows(ctx, a.db, "scopes", q, func(rows Rows) error {
		var m, svc string
		var n, nsvc float64
		if err := rows.Scan(&m, &n, &svc, &nsvc); err != nil {
			return err
		}
		if nsvc == 1 && svc != "" {
			res.services[m] = svc
		}
		sc := map[string]string{}
		for k, v := range req.SLO.Scope {
			sc[k] = v
		}
		sc["model"] = m
		out = append(out, sc)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sweep: discover scopes: %w", err)
	}
	res.Queries++
	if len(out) == 0 {
		res.Notes = append(res.Notes, "no requests in the window")
	}
	if len(out) > a.cfg.MaxScopes {
		out = out[:a.cfg.MaxScopes]
		res.Notes = append(res.Notes, fmt.Sprintf("more than %d models in the window: the %d busiest were examined", a.cfg.MaxScopes, a.cfg.MaxScopes))
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["model"] < out[j]["model"] })
	return out, nil
}

// ratioBefore is entity i's tail rate over its peers' before bucket lo
// (the earlier buckets and the preceding baseline); ok is false without
// 100 earlier requests: nothing then shows a change, and the stretch is
// not judged against the peers.
func ratioBefore(set []*screened, in []bool, i, lo int) (float64, bool) {
	own, peers := past(set, in, i, lo)
	if own.n < 100 || peers.n == 0 {
		return 0, false
	}
	return ((own.k + 0.5) / (own.n + 1)) / ((peers.k + 0.5) / (peers.n + 1)), true
}

// past sums entity i's counts, and those of its peers in (every other
// entity when in is nil), before bucket lo: the preceding baseline and the
// earlier buckets.
func past(set []*screened, in []bool, i, lo int) (own, peers bucketCounts) {
	add := func(dst *bucketCounts, c bucketCounts) { dst.n, dst.k = dst.n+c.n, dst.k+c.k }
	for j, o := range set {
		if in != nil && !in[j] {
			continue
		}
		dst := &peers
		if j == i {
			dst = &own
		}
		add(dst, o.pre)
		for b := 0; b < lo; b++ {
			add(dst, o.buckets[b])
		}
	}
	return own, peers
}

// peerSums returns the tail requests and requests of entity i's peers in
// (every other entity when in is nil) over a stretch, from each entity's
// counts there, and the peers with requests as EntityCounts.
func peerSums(set []*screened, i int, in []bool, peerK, peerN []float64) (pk, pn float64, peers []stats.EntityCounts) {
	for j, o := range set {
		if j == i || in != nil && !in[j] {
			continue
		}
		pk += peerK[j]
		pn += peerN[j]
		if peerN[j] > 0 {
			peers = append(peers, stats.EntityCounts{Key: o.key, Tail: peerK[j], N: peerN[j]})
		}
	}
	return pk, pn, peers
}

// likePeers returns the peers whose yardstick entity i's stretches from
// a bucket are judged by, in the peers test (at least 3 times the peers'
// rate), given every entity's tail rate before that bucket (the preceding
// baseline and the earlier buckets: ratesBefore): its like peers, those
// whose rate was within a factor likePeerFactor of its own, when there are
// at least two; else all of them. A model served by two-GPU and one-GPU
// engines (or by two GPU generations) has two tail rates, several times
// apart, all day long. Judged against the mixture's spread, a one-GPU pod
// whose tail rate rose fivefold over its like peers looked like one more
// draw from it (tuning seed 8756: a prefix-cache fault on one pod of 13,
// not found over the whole run). Whether the stretch is 3 times the peers'
// rate, and the own-past test, still count every peer: a pod faster than
// its peers that turns slower than all of them is a change its few like
// peers may not show (tuning seed 8769). Each rate is shrunk toward the
// others' by likePeerPseudo tail requests at their rate, and an entity
// with fewer than 100 requests before is like every other (nothing says
// otherwise).
func likePeers(rates []float64, i int) []bool {
	in := make([]bool, len(rates))
	like := 0
	for j := range rates {
		ratio := rates[j] / rates[i]
		in[j] = j == i || math.IsNaN(ratio) || (ratio <= likePeerFactor && ratio >= 1/likePeerFactor)
		if j != i && in[j] {
			like++
		}
	}
	if like < 2 {
		for j := range in {
			in[j] = true
		}
	}
	return in
}

// ratesBefore returns, for each first bucket lo of a stretch, each
// entity's tail rate before lo as likePeers compares them (NaN: fewer than
// 100 requests before).
func ratesBefore(set []*screened) [][]float64 {
	out := make([][]float64, scanBuckets)
	for lo := range out {
		out[lo] = make([]float64, len(set))
		for j := range set {
			own, others := past(set, nil, j, lo)
			out[lo][j] = math.NaN()
			if own.n >= 100 && others.k > 0 {
				r := others.k / others.n
				out[lo][j] = (own.k + likePeerPseudo) / (own.n + likePeerPseudo/r)
			}
		}
	}
	return out
}

// likePeerFactor is how far apart two entities' tail rates before a
// stretch may be for them to be like peers (likePeers); likePeerPseudo the
// tail requests that shrink a rate toward the others'.
const (
	likePeerFactor float64 = 2
	likePeerPseudo float64 = 5
)

// bucketBounds is the time span of buckets [from, to] of e's window (equal
// cuts of the window, as readBuckets makes them).
func bucketBounds(e *screened, from, to int) (time.Time, time.Time) {
	w := e.win
	width := (w.End.UnixNano() - w.Start.UnixNano() + scanBuckets - 1) / scanBuckets
	start := time.Unix(0, w.Start.UnixNano()+int64(from)*width).UTC()
	end := time.Unix(0, min(w.Start.UnixNano()+int64(to+1)*width, w.End.UnixNano())).UTC()
	return start, end
}
