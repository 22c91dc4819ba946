package causal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"
)

// LifecycleConfig tunes the scheduled mode.
type LifecycleConfig struct {
	// Window is the stretch each evaluation analyzes (10m).
	Window time.Duration
	// Interval is the time between evaluations of one scope (1m).
	Interval time.Duration
	// Lag ends each window this long before now (2m): enrich writes a
	// request once its metric samples have arrived (its max-wait), so the
	// newest minutes are still filling.
	Lag time.Duration
	// ResolveAfter is the number of consecutive evaluations without a
	// breach after which an open incident resolves (3).
	ResolveAfter int
}

// DefaultLifecycleConfig returns the defaults documented on
// LifecycleConfig.
func DefaultLifecycleConfig() LifecycleConfig {
	return LifecycleConfig{Window: 10 * time.Minute, Interval: time.Minute, Lag: 2 * time.Minute, ResolveAfter: 3}
}

// Validate reports configuration mistakes.
func (c LifecycleConfig) Validate() error {
	var errs []error
	if c.Window <= 0 || c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("window %v and interval %v must be > 0", c.Window, c.Interval))
	}
	if c.Lag < 0 {
		errs = append(errs, fmt.Errorf("lag %v must be >= 0", c.Lag))
	}
	if c.ResolveAfter < 1 {
		errs = append(errs, fmt.Errorf("resolve after %d evaluations: must be >= 1", c.ResolveAfter))
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

// Transition is what one evaluation did.
type Transition struct {
	Kind     string          // Transition*
	Record   *IncidentRecord // the version written (nil for TransitionNone)
	Analysis *Analysis
}

// openIncident is the lifecycle's memory of an incident that has not
// resolved.
type openIncident struct {
	rec      IncidentRecord
	last     Incident  // newest firing document (written or not)
	baseline *Interval // pinned at open: later windows compare with it
	okStreak int
}

// Lifecycle runs the scheduled mode: per SLO scope, evaluate the newest
// window every interval; open an incident on a breach, write a new version
// when the top culprit changes, resolve after ResolveAfter evaluations in a
// row without a breach. One Lifecycle per process; Evaluate and Run must
// not be called concurrently.
//
// While an incident is open its baseline stays the one found when it
// opened: the stretch before the breach. A sliding "preceding hour" would
// soon be breached itself and hide the cause.
type Lifecycle struct {
	an      *Analyzer
	db      DB
	cfg     LifecycleConfig
	log     *slog.Logger
	open    map[string]*openIncident
	openN   atomic.Int64
	observe func(Evaluation)
}

// Evaluation is one Evaluate call of a Round, as OnEvaluation reports it.
type Evaluation struct {
	SLO        SLO
	Duration   time.Duration // wall time of the evaluation (attribution latency)
	Transition Transition    // Analysis is nil when Err is set
	Err        error
}

// OnEvaluation sets f to be called after every evaluation of Round (and
// so of Run), on Run's goroutine: metrics of the scheduled mode. Set it
// before Run.
func (l *Lifecycle) OnEvaluation(f func(Evaluation)) { l.observe = f }

// OpenCount is the number of incidents open now; safe to call while Run
// runs.
func (l *Lifecycle) OpenCount() int { return int(l.openN.Load()) }

// NewLifecycle returns a Lifecycle writing incidents through db.
func NewLifecycle(an *Analyzer, db DB, cfg LifecycleConfig) (*Lifecycle, error) {
	if an == nil || db == nil {
		return nil, errors.New("new lifecycle: nil analyzer or store")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Lifecycle{an: an, db: db, cfg: cfg, log: an.log, open: map[string]*openIncident{}}, nil
}

func lifecycleKey(slo SLO) string {
	sig := slo.Signal
	if sig == "" {
		sig = "e2e_latency"
	}
	return ScopeString(slo.Scope) + "|" + sig
}

// Load reads the incidents still firing from the store, so that a
// restarted process continues them (same ids, next versions) instead of
// opening new ones.
func (l *Lifecycle) Load(ctx context.Context) error {
	recs, err := LoadIncidents(ctx, l.db, StateFiring)
	if err != nil {
		return fmt.Errorf("load open incidents: %w", err)
	}
	for _, rec := range recs {
		o := &openIncident{rec: rec, last: rec.Incident}
		if b := rec.Incident.Baseline; b.End.After(b.Start) {
			o.baseline = &b
		}
		l.open[lifecycleKey(rec.Incident.SLO)] = o
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
	return ids
}

// Evaluate analyzes the window ending Lag before now for slo and applies
// the lifecycle rules.
func (l *Lifecycle) Evaluate(ctx context.Context, slo SLO, now time.Time) (Transition, error) {
	end := now.Add(-l.cfg.Lag).UTC().Truncate(time.Second)
	req := Request{SLO: slo, Window: Interval{Start: end.Add(-l.cfg.Window), End: end}}
	key := lifecycleKey(slo)
	defer func() { l.openN.Store(int64(len(l.open))) }()
	o := l.open[key]
	if o != nil {
		req.Baseline = o.baseline
		req.IncidentID = o.rec.Incident.IncidentID
	}
	an, err := l.an.Analyze(ctx, req)
	if err != nil {
		return Transition{}, fmt.Errorf("evaluate %s: %w", key, err)
	}
	tr := Transition{Analysis: an}
	firing := an.Incident.Status == StatusFiring
	switch {
	case firing && o == nil:
		rec := IncidentRecord{Incident: an.Incident, Version: 1, State: StateFiring, OpenedAt: now, UpdatedAt: now}
		if err := WriteIncident(ctx, l.db, rec); err != nil {
			return tr, err
		}
		o = &openIncident{rec: rec, last: an.Incident}
		if an.BaselineSource != BaselineNone {
			b := an.Incident.Baseline
			o.baseline = &b
		}
		l.open[key] = o
		tr.Kind, tr.Record = TransitionOpen, &rec
		l.log.Info("incident opened", "incident", rec.Incident.IncidentID, "scope", key, "top", TopCulprit(rec.Incident))
	case firing:
		o.okStreak = 0
		o.last = an.Incident
		top := TopCulprit(an.Incident)
		if !topChanged(o.rec.Incident, an.Incident) {
			return tr, nil
		}
		rec := IncidentRecord{Incident: an.Incident, Version: o.rec.Version + 1, State: StateFiring, OpenedAt: o.rec.OpenedAt, UpdatedAt: now}
		if err := WriteIncident(ctx, l.db, rec); err != nil {
			return tr, err
		}
		l.log.Info("incident updated", "incident", rec.Incident.IncidentID, "version", rec.Version, "top", top, "was", TopCulprit(o.rec.Incident))
		o.rec = rec
		tr.Kind, tr.Record = TransitionUpdate, &rec
	case o != nil:
		o.okStreak++
		if o.okStreak < l.cfg.ResolveAfter {
			return tr, nil
		}
		// The resolved version keeps the culprits of the newest firing
		// evaluation that changed them: what the incident was about.
		in := o.rec.Incident
		rec := IncidentRecord{Incident: in, Version: o.rec.Version + 1, State: StateResolved, OpenedAt: o.rec.OpenedAt, UpdatedAt: now, ResolvedAt: now}
		if err := WriteIncident(ctx, l.db, rec); err != nil {
			return tr, err
		}
		delete(l.open, key)
		tr.Kind, tr.Record = TransitionResolve, &rec
		l.log.Info("incident resolved", "incident", in.IncidentID, "version", rec.Version, "after", l.cfg.ResolveAfter)
	}
	return tr, nil
}

// topChanged says whether cur's top culprit differs from old's: the top
// cause changed, or old's top entity is no longer blamed for that cause. A
// cause spread over two near-equal entities whose order flips is not a
// change (it would churn versions every evaluation).
func topChanged(old, cur Incident) bool {
	if len(cur.Culprits) == 0 {
		return false
	}
	if len(old.Culprits) == 0 {
		return true
	}
	o := old.Culprits[0]
	if cur.Culprits[0].Cause != o.Cause {
		return true
	}
	for _, c := range cur.Culprits {
		if c.Cause == o.Cause && c.Entity == o.Entity {
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
func (l *Lifecycle) Run(ctx context.Context, slos func(context.Context) ([]SLO, error), clock func() time.Time) error {
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

// Round evaluates every SLO once at now; failures are logged.
func (l *Lifecycle) Round(ctx context.Context, slos func(context.Context) ([]SLO, error), now time.Time) []Transition {
	list, err := slos(ctx)
	if err != nil {
		l.log.Error("list scopes", "err", err)
		return nil
	}
	var out []Transition
	for _, s := range list {
		if ctx.Err() != nil {
			return out
		}
		t0 := time.Now()
		tr, err := l.Evaluate(ctx, s, now)
		if l.observe != nil {
			l.observe(Evaluation{SLO: s, Duration: time.Since(t0), Transition: tr, Err: err})
		}
		if err != nil {
			l.log.Error("causal evaluation failed", "scope", lifecycleKey(s), "err", err)
			continue
		}
		out = append(out, tr)
	}
	return out
}

// DiscoverScopes lists the distinct values of a scope column (e.g. model)
// among the requests of [since, until): one scope per value, for the
// scheduled mode when no scope is configured.
func DiscoverScopes(ctx context.Context, db Querier, table, column string, since, until time.Time) ([]map[string]string, error) {
	ok := false
	for _, c := range scopeColumns {
		ok = ok || c == column
	}
	if !ok || !identifier(table) {
		return nil, fmt.Errorf("discover scopes: column %q (want one of %s), table %q", column, strings.Join(scopeColumns, ", "), table)
	}
	iv := Interval{Start: since, End: until}
	q := fmt.Sprintf("SELECT DISTINCT toString(%s) AS v FROM %s WHERE %s AND %s ORDER BY v", column, table, prune(iv), inInterval(iv))
	var out []map[string]string
	err := queryRows(ctx, db, "scopes", q, func(r Rows) error {
		var v string
		if err := r.Scan(&v); err != nil {
			return err
		}
		out = append(out, map[string]string{column: v})
		return nil
	})
	return out, err
}
