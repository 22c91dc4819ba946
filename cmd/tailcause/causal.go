package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tailcause/tailcause/causal"
	"github.com/tailcause/tailcause/causal/incident"
	"github.com/tailcause/tailcause/internal/obs"
)

// cmdCausal is the scheduled mode: every interval, analyze the newest
// window of each scope and keep the incidents table current (open, update
// on a new top culprit, resolve).
func cmdCausal(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("causal", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var (
		sf     storeFlags
		slo    sloFlags
		scopes scopeFlag
	)
	sf.register(fs, e)
	sf.registerNoMigrate(fs)
	slo.register(fs)
	var of obsFlags
	of.register(fs, e)
	lcfg := incident.DefaultLifecycleConfig()
	fs.DurationVar(&lcfg.Interval, "interval", lcfg.Interval, "time between evaluations")
	fs.DurationVar(&lcfg.Window, "window", lcfg.Window, "longest window an evaluation analyzes")
	fs.DurationVar(&lcfg.MinWindow, "min-window", lcfg.MinWindow, "shortest window an evaluation analyzes")
	fs.IntVar(&lcfg.WindowRequests, "window-requests", lcfg.WindowRequests, "size each window to hold about this many requests of its scope, within [min-window, window] (0: always --window)")
	fs.DurationVar(&lcfg.Lag, "lag", lcfg.Lag, "end each window at least this long before now; it also ends no later than the newest request written (the enricher's progress)")
	fs.IntVar(&lcfg.ConfirmAfter, "confirm-after", lcfg.ConfirmAfter, "open an incident once its breach has been found in this many evaluations in a row (1: at once)")
	fs.IntVar(&lcfg.ResolveAfter, "resolve-after", lcfg.ResolveAfter, "resolve an incident after this many evaluations in a row without its breach (too few requests keeps the state)")
	fs.IntVar(&lcfg.UpdateAfter, "update-after", lcfg.UpdateAfter, "write a new top culprit once it has held for this many evaluations in a row")
	fs.Float64Var(&lcfg.UpdateMargin, "update-margin", lcfg.UpdateMargin, "keep the incident's top culprit while it explains at least 1/this of what the new top explains (attributable fraction; 1: replace it on any change that holds)")
	fs.Float64Var(&lcfg.EntityAlpha, "entity-alpha", lcfg.EntityAlpha, "false-alarm rate of each evaluation's entity breaches and scope scans (one rank question's is 0.01: the detector asks again every --interval; 0: that one)")
	fs.Var(&scopes, "scope", "k=v[,k=v]: one scope to watch (repeatable: one scope each); default: one per --scope-by value seen recently")
	scopeBy := fs.String("scope-by", "model", "column whose values become scopes when no --scope is given")
	baseline := fs.Duration("baseline", causal.DefaultConfig().BaselineLength, "default baseline: this long before the window")
	parallel := fs.Int("sweep-parallel", causal.DefaultConfig().SweepParallel, "sweep this many scopes of a round at once, each in a session of its own (fewer scopes share the rest among their entity breaches); the incidents are still opened, updated and resolved one scope after another in scope order: the same incidents as 1")
	maxScopes := fs.Int("max-scopes", causal.DefaultConfig().MaxScopes, "watch at most this many of the scopes --scope-by finds, the busiest in the newest window (a warning names the cut); also the most models one sweep examines")
	once := fs.Bool("once", false, "evaluate once and exit (a breach found opens its incident: one evaluation is the whole judgement, whatever --confirm-after says)")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: tailcause causal [flags]\n\nWatch the tail latency of each scope; open, update and resolve incidents with ranked culprits.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if err := lcfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *once {
		lcfg.ConfirmAfter = 1
	}
	cfg := causal.DefaultConfig()
	cfg.Version, cfg.Logger, cfg.BaselineLength, cfg.SweepParallel, cfg.MaxScopes = version, e.log, *baseline, *parallel, *maxScopes
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	st, err := sf.open(ctx, e, schemaMigrate)
	if err != nil {
		return err
	}
	defer st.Close()
	db := causal.StoreDB(st)
	an, err := causal.NewAnalyzer(db, cfg)
	if err != nil {
		return err
	}
	lc, err := incident.NewLifecycle(an, db, lcfg)
	if err != nil {
		return err
	}
	cut := false
	slos := func(ctx context.Context) ([]causal.SLO, error) {
		var out []causal.SLO
		for _, s := range scopes {
			out = append(out, slo.slo(s))
		}
		if len(out) > 0 {
			return out, nil
		}
		now := time.Now()
		found, more, err := causal.DiscoverScopes(ctx, db, cfg.Table, *scopeBy, now.Add(-lcfg.Lag-lcfg.Window), now, cfg.MaxScopes)
		if err != nil {
			return nil, err
		}
		if more && !cut {
			e.log.Warn("more scopes than --max-scopes: the busiest are watched", "scope_by", *scopeBy, "max_scopes", cfg.MaxScopes)
		}
		cut = more // warned once per stretch of rounds with the cut
		for _, s := range found {
			out = append(out, slo.slo(s))
		}
		return out, nil
	}
	if *once {
		if err := lc.Load(ctx); err != nil {
			return err
		}
		for _, tr := range lc.Round(ctx, slos, time.Now()) {
			in := tr.Record.Incident
			if tr.Analysis != nil {
				in = tr.Analysis.Incident
			}
			where := "scope"
			if in.Breach != nil && in.Breach.Level != causal.LevelScope {
				where = in.Breach.Level + " " + causal.EntityString(in.Breach.Entity)
			}
			line := fmt.Sprintf("%-12s %s %s P%g %.0f ms (baseline %.0f ms)", orDefault(causal.ScopeString(in.SLO.Scope), "(all)"), where, in.Status, 100*in.SLO.Quantile, in.ObservedP99MS, in.BaselineP99MS)
			if tr.Kind != incident.TransitionNone {
				line += fmt.Sprintf("  %s %s v%d", tr.Kind, tr.Record.Incident.IncidentID, tr.Record.Version)
			}
			if top := causal.TopCulprit(in); top != "" {
				line += "  top: " + top
			}
			fmt.Fprintln(e.stdout, line)
		}
		return nil
	}
	reg := obs.NewRegistry()
	reg.MustRegister(causalCollectors(lc)...)
	obsSrv, err := of.start(ctx, e, reg, obs.ClickHouseCheck(st))
	if err != nil {
		return err
	}
	defer obsSrv.stop()
	e.log.Info("causal scheduler started", "interval", lcfg.Interval, "window", lcfg.Window, "lag", lcfg.Lag, "database", st.Database())
	g := newComponents(ctx)
	g.add("causal scheduler", func(ctx context.Context) error { return lc.Run(ctx, slos, time.Now) })
	g.add("observability server", obsSrv.run)
	return g.wait()
}

// causalCollectors are the scheduled mode's metrics: how long each
// evaluation (breach check and attribution) takes, how many failed, the
// incident transitions, the ClickHouse queries spent, and the incidents
// open now.
func causalCollectors(lc *incident.Lifecycle) []prometheus.Collector {
	dur := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "tailcause_causal_evaluation_seconds",
		Help:    "Wall time of one scope's evaluation: breach detection and, when breached, attribution (attribution latency).",
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160},
	})
	evals := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tailcause_causal_evaluations_total",
		Help: "Scope evaluations by result: ok (breached or not) or error (logged, retried next round).",
	}, []string{"result"})
	trans := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tailcause_causal_transitions_total",
		Help: "Incident transitions written: open, update (new top culprit), resolve.",
	}, []string{"kind"})
	queries := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tailcause_causal_queries_total",
		Help: "ClickHouse queries the evaluations ran.",
	})
	qsec := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tailcause_causal_query_seconds_total",
		Help: "Time the evaluations spent waiting on ClickHouse.",
	})
	for _, r := range []string{"ok", "error"} {
		evals.WithLabelValues(r)
	}
	for _, k := range []string{incident.TransitionOpen, incident.TransitionUpdate, incident.TransitionResolve} {
		trans.WithLabelValues(k)
	}
	lc.OnEvaluation(func(ev incident.Evaluation) {
		dur.Observe(ev.Duration.Seconds())
		if ev.Err != nil {
			evals.WithLabelValues("error").Inc()
			return
		}
		evals.WithLabelValues("ok").Inc()
		for _, tr := range ev.Transitions {
			if tr.Kind != incident.TransitionNone {
				trans.WithLabelValues(tr.Kind).Inc()
			}
		}
		queries.Add(float64(ev.Queries))
		qsec.Add(ev.QueryTime.Seconds())
	})
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tailcause_causal_open_incidents",
		Help: "Incidents firing now.",
	}, func() float64 { return float64(lc.OpenCount()) })
	return []prometheus.Collector{dur, evals, trans, queries, qsec, open}
}
