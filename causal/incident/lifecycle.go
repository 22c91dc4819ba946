package incident

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcause/tailcause/causal"
)

// LifecycleConfig tunes the scheduled mode.
type LifecycleConfig struct {
	// Window is the longest stretch an evaluation analyzes (10m), and the
	// stretch over which the request rate is measured to size it.
	Window time.Duration
	// MinWindow is the shortest (1m).
	MinWindow time.Duration
	// WindowRequests sizes the window by request count, not minutes
	// (3000): the window is the stretch, back from its end, expected to
	// hold that many requests of the scope at the rate of the last Window,
	// clamped to [MinWindow, Window]. A busy model is judged on its last
	// minute, a quiet one on enough requests for its P99.
	WindowRequests int
	// Interval is the time between evaluations (10s). With ConfirmAfter 2
	// a breach found at once pages after one more Interval.
	Interval time.Duration
	// Lag is the least time a window ends before now (5s). The window
	// also ends no later than the data: the end up to which every engine
	// of the scope has been written (causal.Analyzer.ScopeLoad; the
	// enricher writes a request once its metric samples have arrived, a
	// few seconds behind; replayed or stalled input moves the window with
	// it instead of judging minutes that hold no rows yet).
	Lag time.Duration
	// ConfirmAfter is the number of consecutive evaluations a new breach
	// must be found in before its incident opens (2). The detector asks
	// its question again every Interval over windows that mostly overlap,
	// and a breach is a test at a level: a fault-free fleet crosses it now
	// and then for one evaluation, by chance, where a fault holds it. On
	// 30 fault-free tuning fleets replayed in simulated time (seeds
	// 8412–8694) the detector opened 18 incidents in 7.5 hours at 1, 7 at
	// 2 (with the 10-s Interval). It costs one Interval on the first page. A breach that continues an open
	// incident at another level of its scope needs no confirmation.
	// Zero means 1 (open on the first finding).
	ConfirmAfter int
	// ResolveAfter is the number of consecutive evaluations without a
	// breach after which an open incident resolves (12: two minutes at the
	// default Interval). A breach that comes and goes around its level
	// would otherwise resolve and open again, a page each time (one
	// fault-free tuning fleet's pod opened five times in five minutes at
	// 3). An evaluation with too few requests to judge keeps the current
	// state.
	ResolveAfter int
	// UpdateAfter is the number of consecutive evaluations a new top
	// culprit must hold before the incident is updated (2): hysteresis, so
	// that two near-equal culprits alternating do not re-page.
	UpdateAfter int
	// UpdateMargin is how much more of the tail a new top culprit must
	// explain than the standing one before it can replace it (1.5): while
	// the culprit the incident names is still among the evaluation's
	// culprits with at least 1/UpdateMargin of the new top's attributable
	// fraction, the incident keeps it. Two culprits of near-equal weight
	// trade places from one window to the next; a page each time tells
	// the on-call engineer nothing new. Live seed 3 at c879972 re-paged
	// twice in 20 s that way (the pod's KV, the model's prefix misses,
	// the pod's KV again). 1 replaces on any change that holds.
	UpdateMargin float64
	// EntityAlpha is the false-alarm rate of each evaluation's entity
	// breaches and scope scans (0.001), in place of the analyzer's
	// causal.Config.EntityAlpha (0.01), the level of one question. An
	// on-call engineer asks `rank` once; the detector asks again every
	// Interval over windows of one to ten minutes, hundreds of nearly
	// independent questions per scope a day, so its level is ten times
	// stricter. On the 30 fault-free tuning fleets (7.5 simulated hours)
	// the detector opened 7 incidents at 0.01, 4 at 0.001. Zero keeps the
	// analyzer's level.
	EntityAlpha float64
}

// DefaultLifecycleConfig returns the defaults documented on
// LifecycleConfig.
func DefaultLifecycleConfig() LifecycleConfig {
	return LifecycleConfig{Window: 10 * time.Minute, MinWindow: time.Minute, WindowRequests: 3000, Interval: 10 * time.Second,
		Lag: 5 * time.Second, ConfirmAfter: 2, ResolveAfter: 12, UpdateAfter: 2, UpdateMargin: 1.5, EntityAlpha: 0.001}
}

// Validate reports configuration mistakes.
func (c LifecycleConfig) Validate() error {
	var errs []error
	if c.Window <= 0 || c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("window %v and interval %v must be > 0", c.Window, c.Interval))
	}
	if c.MinWindow < 0 || c.MinWindow > c.Window {
		errs = append(errs, fmt.Errorf("min window %v must be in [0, window %v]", c.MinWindow, c.Window))
	}
	if c.WindowRequests < 0 {
		errs = append(errs, fmt.Errorf("window requests %d must be >= 0 (0: always the whole window)", c.WindowRequests))
	}
	if c.Lag < 0 {
		errs = append(errs, fmt.Errorf("lag %v must be >= 0", c.Lag))
	}
	if c.ResolveAfter < 1 {
		errs = append(errs, fmt.Errorf("resolve after %d evaluations: must be >= 1", c.ResolveAfter))
	}
	if c.ConfirmAfter < 0 {
		errs = append(errs, fmt.Errorf("confirm after %d evaluations: must be >= 0 (0: open at once)", c.ConfirmAfter))
	}
	if c.UpdateAfter < 1 {
		errs = append(errs, fmt.Errorf("update after %d evaluations: must be >= 1", c.UpdateAfter))
	}
	if !(c.UpdateMargin == 0 || c.UpdateMargin >= 1) || math.IsInf(c.UpdateMargin, 1) {
		errs = append(errs, fmt.Errorf("update margin %v must be >= 1 and finite (0: 1)", c.UpdateMargin))
	}
	if !(c.EntityAlpha >= 0 && c.EntityAlpha < 1) {
		errs = append(errs, fmt.Errorf("entity alpha %v must be in [0, 1) (0: the analyzer's)", c.EntityAlpha))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid lifecycle config: %w", err)
	}
	return nil
}

// Transition kinds.
const (
	TransitionNone    = ""
	TransitionOpen    = "open"
	TransitionUpdate  = "update"
	TransitionResolve = "resolve"
)

// Transition is what one evaluation did to one incident.
type Transition struct {
	Kind     string           // Transition*
	Record   *Record          // the version written (nil for TransitionNone)
	Analysis *causal.Analysis // nil for a resolve (no breach was found)
}

// openIncident is the lifecycle's memory of an incident that has not
// resolved.
type openIncident struct {
	rec      Record
	last     causal.Incident  // newest firing document (written or not)
	baseline *causal.Interval // pinned at open: later windows compare with it
	okStreak int
	// pending is a new top culprit seen in the last pendingN evaluations
	// in a row, not yet written (UpdateAfter).
	pending  string
	pendingN int
}

// Lifecycle runs the scheduled mode: per scope, every interval, sweep the
// newest window (causal.Analyzer.Sweep: the scope's quantile, and every engine
// and host of it against its peers); open one incident per breach (the
// scope, or an entity far worse than its peers) once it has been found in
// ConfirmAfter evaluations in a row, write a new version when
// the top culprit changed and held, resolve after ResolveAfter
// evaluations in a row without that breach. A round sweeps up to
// causal.Config.SweepParallel scopes at once and applies the rules one scope
// after another (Round). One Lifecycle per process; Evaluate, Round and
// Run must not be called concurrently.
//
// While a scope-level incident is open its baseline stays the one found
// when it opened: the stretch before the breach. A sliding "preceding
// hour" would soon be breached itself and hide the cause. Later windows
// start no earlier than the pinned baseline's end.
type Lifecycle struct {
	an    *causal.Analyzer
	store incidentStore // dbIncidents over the DB given to NewLifecycle
	cfg   LifecycleConfig
	log   *slog.Logger
	open  map[string]*openIncident
	// confirming counts, per breach key with no open incident, the
	// consecutive evaluations of its scope that found it (ConfirmAfter).
	confirming map[string]int
	openN      atomic.Int64
	observe    func(Evaluation)
}

// Evaluation is one scope's evaluation in a Round, as OnEvaluation
// reports it.
type Evaluation struct {
	SLO causal.SLO
	// Duration is the wall time of the evaluation (attribution latency):
	// its window and sweep, and applying the rules; not the time its
	// sweep waited for an earlier scope's in a parallel round.
	Duration    time.Duration
	Transitions []Transition
	// Queries and QueryTime are the ClickHouse queries the evaluation sent.
	Queries   int
	QueryTime time.Duration
	Err       error
}

// OnEvaluation sets f to be called after every evaluation of Round (and
// so of Run), on Round's goroutine, in scope order, once the evaluation's
// rules were applied: metrics of the scheduled mode. Set it before Run.
func (l *Lifecycle) OnEvaluation(f func(Evaluation)) { l.observe = f }

// OpenCount is the number of incidents open now; safe to call while Run
// runs.
func (l *Lifecycle) OpenCount() int { return int(l.openN.Load()) }

// NewLifecycle returns a Lifecycle writing incidents through db. Zero
// UpdateAfter, ConfirmAfter and UpdateMargin mean 1.
func NewLifecycle(an *causal.Analyzer, db causal.DB, cfg LifecycleConfig) (*Lifecycle, error) {
	if an == nil || db == nil {
		return nil, errors.New("new lifecycle: nil analyzer or store")
	}
	if cfg.UpdateAfter == 0 {
		cfg.UpdateAfter = 1
	}
	if cfg.ConfirmAfter == 0 {
		cfg.ConfirmAfter = 1
	}
	if cfg.UpdateMargin == 0 {
		cfg.UpdateMargin = 1
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.EntityAlpha > 0 {
		an = an.WithEntityAlpha(cfg.EntityAlpha)
	}
	return &Lifecycle{an: an, store: dbIncidents{db}, cfg: cfg, log: an.Logger(), open: map[string]*openIncident{}, confirming: map[string]int{}}, nil
}

func lifecycleKey(slo causal.SLO) string {
	sig := slo.Signal
	if sig == "" {
		sig = "e2e_latency"
	}
	return causal.ScopeString(slo.Scope) + "|" + sig
}

// breachKey names one breach of a scope: the scope itself, or the entity.
func breachKey(slo causal.SLO, w *causal.Where) string {
	k := lifecycleKey(slo)
	if w == nil || w.Level == causal.LevelScope {
		return k + "|scope"
	}
	return k + "|" + w.Level + ":" + w.Entity.Host + "/" + w.Entity.Pod + "/" + w.Entity.Engine
}

// Load reads the incidents still firing from the store, so that a
// restarted process continues them (same ids, next versions) instead of
// opening new ones.
func (l *Lifecycle) Load(ctx context.Context) error {
	recs, err := l.store.loadIncidents(ctx, StateFiring)
	if err != nil {
		return fmt.Errorf("load open incidents: %w", err)
	}
	for _, rec := range recs {
		o := &openIncident{rec: rec, last: rec.Incident}
		if b := rec.Incident.Baseline; b.End.After(b.Start) && (rec.Incident.Breach == nil || rec.Incident.Breach.Level == causal.LevelScope) {
			o.baseline = &b
		}
		l.open[breachKey(rec.Incident.SLO, rec.Incident.Breach)] = o
	}
	l.openN.Store(int64(len(l.open)))
	return nil
}

// Open returns the ids of the incidents currently open, sorted.
func (l *Lifecycle) Open() []string {
	var ids []string
	for _, k := range sortedKeys(l.open) {
		ids = append(ids, l.open[k].rec.Incident.IncidentID)
	}
	sort.Strings(ids)
	return ids
}

// window picks the evaluation's window for slo at now: it ends Lag before
// now and no later than the end every engine of the scope has been written
// up to (ScopeLoad); its length follows the request rate (WindowRequests).
func (l *Lifecycle) window(ctx context.Context, an *causal.Analyzer, slo causal.SLO, now time.Time) (causal.Interval, bool, error) {
	end := now.Add(-l.cfg.Lag)
	since := end.Add(-l.cfg.Window)
	requests, complete, err := an.ScopeLoad(ctx, slo, causal.Interval{Start: since, End: end})
	if err != nil {
		return causal.Interval{}, false, fmt.Errorf("size the window of %s: %w", causal.ScopeString(slo.Scope), err)
	}
	n := float64(requests)
	if n == 0 {
		return causal.Interval{}, false, nil
	}
	if complete.Before(end) {
		end = complete
	}
	end = end.UTC().Truncate(time.Second)
	length := l.cfg.Window
	if l.cfg.WindowRequests > 0 {
		length = time.Duration(float64(l.cfg.Window) * float64(l.cfg.WindowRequests) / n)
		length = min(max(length, l.cfg.MinWindow), l.cfg.Window)
	}
	return causal.Interval{Start: end.Add(-length.Round(time.Second)), End: end}, true, nil
}

// Evaluate sweeps the newest window of slo's scope and applies the
// lifecycle rules to every breach found and every incident of the scope
// still open.
func (l *Lifecycle) Evaluate(ctx context.Context, slo causal.SLO, now time.Time) ([]Transition, error) {
	sw := l.sweepScope(ctx, l.an, slo, l.pinned(slo), now)
	return l.decide(ctx, slo, sw, now)
}

// pinned is the baseline of slo's open scope-level incident (nil: none),
// a copy.
func (l *Lifecycle) pinned(slo causal.SLO) *causal.Interval {
	o := l.open[breachKey(slo, nil)]
	if o == nil || o.baseline == nil {
		return nil
	}
	b := *o.baseline
	return &b
}

// scopeSweep is the expensive part of one evaluation, computed without
// touching the lifecycle's state (so several run at once, Round): the
// window and the sweep of one scope, and what they cost.
type scopeSweep struct {
	sw       *causal.SweepResult // nil: nothing to judge (no data, or an empty window)
	queries  int
	qtime    time.Duration
	duration time.Duration
	err      error
}

// sweepScope sizes slo's window at now and sweeps it with an, against
// base (the pinned baseline of the scope's open incident, or nil). It
// reads only its arguments and the analyzer: safe to call concurrently.
func (l *Lifecycle) sweepScope(ctx context.Context, an *causal.Analyzer, slo causal.SLO, base *causal.Interval, now time.Time) (out scopeSweep) {
	t0 := time.Now()
	out.queries = 1
	defer func() { out.duration = time.Since(t0) }()
	win, ok, err := l.window(ctx, an, slo, now)
	if err != nil || !ok {
		out.err = err
		return out // no data: keep the current state
	}
	req := causal.SweepRequest{SLO: slo, Window: win}
	if base != nil {
		req.Baseline = base
		if base.End.After(req.Window.Start) {
			req.Window.Start = base.End // the breach part only: never overlap the pinned baseline
		}
		if !req.Window.End.After(req.Window.Start) {
			return out
		}
	}
	sw, err := an.Sweep(ctx, req)
	if err != nil {
		out.err = fmt.Errorf("evaluate %s: %w", lifecycleKey(slo), err)
		return out
	}
	out.sw, out.queries, out.qtime = sw, out.queries+sw.Queries, sw.QueryTime
	return out
}

// decide applies the lifecycle rules to the sweep of slo's scope: every
// breach found opens or updates its incident, every incident of the scope
// still open and not found again counts towards its resolve.
func (l *Lifecycle) decide(ctx context.Context, slo causal.SLO, s scopeSweep, now time.Time) ([]Transition, error) {
	defer func() { l.openN.Store(int64(len(l.open))) }()
	if s.err != nil || s.sw == nil {
		return nil, s.err
	}
	sw := s.sw
	if len(sw.Insufficient) > 0 && len(sw.Breaches) == 0 {
		return nil, nil // too few requests to judge: keep the current state
	}
	var out []Transition
	seen := map[string]bool{}
	for _, an := range sw.Breaches {
		key := breachKey(slo, an.Incident.Breach)
		if seen[key] {
			continue
		}
		seen[key] = true
		if old := l.carried(slo, key, an, seen); old != "" {
			// The same culprit found at another level of the scope (an
			// engine's breach that grew into its model's, or back): the
			// incident goes on under the new breach, no new page.
			l.open[key] = l.open[old]
			delete(l.open, old)
			seen[old] = true
		}
		if l.open[key] == nil {
			if l.confirming[key]++; l.confirming[key] < l.cfg.ConfirmAfter {
				continue // found, not yet confirmed: no incident yet
			}
		}
		delete(l.confirming, key)
		tr, err := l.apply(ctx, key, an, now)
		if err != nil {
			return out, err
		}
		out = append(out, tr)
	}
	prefix := lifecycleKey(slo) + "|"
	for key := range l.confirming {
		if !seen[key] && strings.HasPrefix(key, prefix) {
			delete(l.confirming, key) // not found again: the count starts over
		}
	}
	for _, key := range sortedKeys(l.open) {
		if seen[key] || !strings.HasPrefix(key, prefix) {
			continue
		}
		o := l.open[key]
		o.okStreak++
		o.pending, o.pendingN = "", 0
		if o.okStreak < l.cfg.ResolveAfter {
			continue
		}
		// The resolved version keeps the culprits of the newest version
		// written: what the incident was about.
		in := o.rec.Incident
		rec := Record{Incident: in, Version: o.rec.Version + 1, State: StateResolved, OpenedAt: o.rec.OpenedAt, UpdatedAt: now, ResolvedAt: now}
		if err := l.store.writeIncident(ctx, rec); err != nil {
			return out, err
		}
		delete(l.open, key)
		out = append(out, Transition{Kind: TransitionResolve, Record: &rec})
		l.log.Info("incident resolved", "incident", in.IncidentID, "version", rec.Version, "after", l.cfg.ResolveAfter)
	}
	return out, nil
}

// carried returns the key of the open incident a new breach of slo
// continues: none is open under key, and an incident of the same scope,
// not found again in this evaluation, has the same top culprit (cause and
// entity) and a breach that contains the new one or lies in it.
func (l *Lifecycle) carried(slo causal.SLO, key string, an *causal.Analysis, seen map[string]bool) string {
	if l.open[key] != nil || len(an.Incident.Culprits) == 0 {
		return ""
	}
	prefix := lifecycleKey(slo) + "|"
	for _, k := range sortedKeys(l.open) {
		o := l.open[k]
		if seen[k] || !strings.HasPrefix(k, prefix) || len(o.rec.Incident.Culprits) == 0 || topChanged(o.rec.Incident, an.Incident, l.cfg.UpdateMargin) {
			continue
		}
		if nested(o.rec.Incident.Breach, an.Incident.Breach) {
			return k
		}
	}
	return ""
}

// nested says whether one breach lies in the other: the scope's holds
// every entity's; a host holds its engines.
func nested(a, b *causal.Where) bool {
	if a == nil || b == nil || a.Level == causal.LevelScope || b.Level == causal.LevelScope {
		return true
	}
	return a.Entity.ActsOn(b.Entity) || b.Entity.ActsOn(a.Entity)
}

// apply is one breach's open or update.
func (l *Lifecycle) apply(ctx context.Context, key string, an *causal.Analysis, now time.Time) (Transition, error) {
	tr := Transition{Analysis: an}
	o := l.open[key]
	if o == nil {
		rec := Record{Incident: an.Incident, Version: 1, State: StateFiring, OpenedAt: now, UpdatedAt: now}
		if err := l.store.writeIncident(ctx, rec); err != nil {
			return tr, err
		}
		o = &openIncident{rec: rec, last: an.Incident}
		if an.BaselineSource != causal.BaselineNone && (an.Incident.Breach == nil || an.Incident.Breach.Level == causal.LevelScope) {
			b := an.Incident.Baseline
			o.baseline = &b
		}
		l.open[key] = o
		tr.Kind, tr.Record = TransitionOpen, &rec
		l.log.Info("incident opened", "incident", rec.Incident.IncidentID, "breach", key, "top", causal.TopCulprit(rec.Incident))
		return tr, nil
	}
	o.okStreak = 0
	// The incident keeps its id whatever window found it again.
	an.Incident.IncidentID = o.rec.Incident.IncidentID
	o.last = an.Incident
	if !topChanged(o.rec.Incident, an.Incident, l.cfg.UpdateMargin) {
		o.pending, o.pendingN = "", 0
		return tr, nil
	}
	top := causal.TopCulprit(an.Incident)
	if top == o.pending {
		o.pendingN++
	} else {
		o.pending, o.pendingN = top, 1
	}
	if o.pendingN < l.cfg.UpdateAfter {
		return tr, nil
	}
	rec := Record{Incident: an.Incident, Version: o.rec.Version + 1, State: StateFiring, OpenedAt: o.rec.OpenedAt, UpdatedAt: now}
	if err := l.store.writeIncident(ctx, rec); err != nil {
		return tr, err
	}
	l.log.Info("incident updated", "incident", rec.Incident.IncidentID, "version", rec.Version, "top", top, "was", causal.TopCulprit(o.rec.Incident))
	o.rec = rec
	o.pending, o.pendingN = "", 0
	tr.Kind, tr.Record = TransitionUpdate, &rec
	return tr, nil
}

// topChanged says whether cur's top culprit differs from old's: the top
// cause changed, or old's top entity is no longer blamed for that cause,
// and old's top culprit no longer stands in cur: it is not among cur's
// culprits with at least 1/margin of the top's attributable fraction. A
// cause spread over two near-equal entities whose order flips is not a
// change (it would churn versions every evaluation), nor are two causes of
// near-equal weight trading places (LifecycleConfig.UpdateMargin).
func topChanged(old, cur causal.Incident, margin float64) bool {
	if len(cur.Culprits) == 0 {
		return false
	}
	if len(old.Culprits) == 0 {
		return true
	}
	o := old.Culprits[0]
	for _, c := range cur.Culprits {
		if c.Cause != o.Cause || c.Entity != o.Entity {
			continue
		}
		if c.Cause == cur.Culprits[0].Cause || c.AttributableFraction*margin >= cur.Culprits[0].AttributableFraction {
			return false
		}
	}
	return true
}

// Run loads the open incidents, then evaluates every SLO each Interval
// until ctx ends. slos is called before each round (scopes may appear);
// clock gives "now" (time.Now in production). An evaluation that fails is
// logged and retried next round; Run returns only ctx's error or a
// failure to load.
func (l *Lifecycle) Run(ctx context.Context, slos func(context.Context) ([]causal.SLO, error), clock func() time.Time) error {
	if err := l.Load(ctx); err != nil {
		return err
	}
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		l.Round(ctx, slos, clock())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Round evaluates every SLO once at now (a scope listed twice, once);
// failures are logged, and the other scopes evaluated.
//
// Up to the analyzer's Config.SweepParallel scopes are swept at once, each
// sweep in a session of its own (the window and the sweep: the expensive
// part); fewer scopes than that share the rest among their sweeps, for the
// entity breaches of each (Sweep). The lifecycle rules (opens, updates,
// resolves, the incident writes and OnEvaluation) are applied on Round's
// goroutine, one scope after another in the order slos gave, each as soon
// as its sweep and every earlier scope's are done: the same transitions
// and incident versions, in the same order, as one scope at a time. A
// sweep reads the lifecycle's state only through the pinned baseline of
// its scope, taken when the round starts (a scope's own evaluation is the
// only one that changes it). At most 2×SweepParallel−1 sweeps are done or
// running and not yet applied. When ctx ends, Round stops applying, waits
// for the running sweeps to return (they end with ctx) and returns the
// transitions applied so far.
func (l *Lifecycle) Round(ctx context.Context, slos func(context.Context) ([]causal.SLO, error), now time.Time) []Transition {
	list, err := slos(ctx)
	if err != nil {
		l.log.Error("list scopes", "err", err)
		return nil
	}
	list = distinctSLOs(list)
	if len(list) == 0 {
		return nil
	}
	parallel := max(l.an.Config().SweepParallel, 1)
	workers := min(parallel, len(list))
	an := l.an
	if workers > 1 {
		an = l.an.WithSweepParallel(parallel / workers)
	}
	bases := make([]*causal.Interval, len(list))
	for i, s := range list {
		bases[i] = l.pinned(s)
	}
	sweeps := make([]scopeSweep, len(list))
	done := make([]chan struct{}, len(list))
	for i := range done {
		done[i] = make(chan struct{})
	}
	// A sweep takes a slot before it starts and Round frees it once the
	// sweep is applied; sweeps start in scope order, so the earliest scope
	// not yet applied always holds one (at one worker, the slot makes the
	// round the sequential loop).
	slots := make(chan struct{}, 2*workers-1)
	wctx, cancel := context.WithCancel(ctx)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	defer func() {
		cancel()
		wg.Wait()
	}()
	for range workers {
		wg.Go(func() {
			for {
				select {
				case slots <- struct{}{}:
				case <-wctx.Done():
					return
				}
				i := int(next.Add(1) - 1)
				if i >= len(list) {
					return
				}
				sweeps[i] = l.sweepScope(wctx, an, list[i], bases[i], now)
				close(done[i])
			}
		})
	}
	var out []Transition
	for i, s := range list {
		select {
		case <-done[i]:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			return out
		}
		t0 := time.Now()
		sw := sweeps[i]
		trs, err := l.decide(ctx, s, sw, now)
		<-slots
		if l.observe != nil {
			l.observe(Evaluation{SLO: s, Duration: sw.duration + time.Since(t0), Transitions: trs, Queries: sw.queries, QueryTime: sw.qtime, Err: err})
		}
		out = append(out, trs...)
		if err != nil {
			l.log.Error("causal evaluation failed", "scope", lifecycleKey(s), "err", err)
		}
	}
	return out
}

// distinctSLOs is list without its repeats (the same scope and signal),
// the first kept: one evaluation per scope and round.
func distinctSLOs(list []causal.SLO) []causal.SLO {
	seen := map[string]bool{}
	out := list[:0:0]
	for _, s := range list {
		if k := lifecycleKey(s); !seen[k] {
			seen[k] = true
			out = append(out, s)
		}
	}
	return out
}
