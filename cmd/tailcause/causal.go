package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/tailcause/tailcause/causal"
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
	slo.register(fs)
	var of obsFlags
	of.register(fs, e)
	lcfg := causal.DefaultLifecycleConfig()
	fs.DurationVar(&lcfg.Interval, "interval", lcfg.Interval, "time between evaluations")
	fs.DurationVar(&lcfg.Window, "window", lcfg.Window, "window each evaluation analyzes")
	fs.DurationVar(&lcfg.Lag, "lag", lcfg.Lag, "end each window this long before now (the enricher's join delay)")
	fs.IntVar(&lcfg.ResolveAfter, "resolve-after", lcfg.ResolveAfter, "resolve an incident after this many evaluations in a row without a breach")
	fs.Var(&scopes, "scope", "k=v[,k=v]: one scope to watch (repeatable: one scope each); default: one per --scope-by value seen recently")
	scopeBy := fs.String("scope-by", "model", "column whose values become scopes when no --scope is given")
	baseline := fs.Duration("baseline", causal.DefaultConfig().BaselineLength, "default baseline: this long before the window")
	once := fs.Bool("once", false, "evaluate once and exit")
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
	cfg := causal.DefaultConfig()
	cfg.Version, cfg.Logger, cfg.BaselineLength = version, e.log, *baseline
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	st, err := sf.open(ctx, e, true)
	if err != nil {
		return err
	}
	defer st.Close()
	db := causal.StoreDB(st)
	an, err := causal.NewAnalyzer(db, cfg)
	if err != nil {
		return err
	}
	lc, err := causal.NewLifecycle(an, db, lcfg)
	if err != nil {
		return err
	}
	slos := func(ctx context.Context) ([]causal.SLO, error) {
		var out []causal.SLO
		for _, s := range scopes {
			out = append(out, slo.slo(s))
		}
		if len(out) > 0 {
			return out, nil
		}
		now := time.Now()
		found, err := causal.DiscoverScopes(ctx, db, cfg.Table, *scopeBy, now.Add(-lcfg.Lag-lcfg.Window), now)
		if err != nil {
			return nil, err
		}
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
			in := tr.Analysis.Incident
			line := fmt.Sprintf("%-12s %s P%g %.0f ms (baseline %.0f ms)", orDefault(causal.ScopeString(in.SLO.Scope), "(all)"), in.Status, 100*in.SLO.Quantile, in.ObservedP99MS, in.BaselineP99MS)
			if tr.Kind != causal.TransitionNone {
				line += fmt.Sprintf("  %s %s v%d", tr.Kind, tr.Record.Incident.IncidentID, tr.Record.Version)
			}
			if top := causal.TopCulprit(in); top != "" {
				line += "  top: " + top
			}
			fmt.Fprintln(e.stdout, line)
		}
		return nil
	}
	stopObs, err := of.start(ctx, e, obs.NewRegistry(), obs.ClickHouseCheck(st))
	if err != nil {
		return err
	}
	defer stopObs()
	e.log.Info("causal scheduler started", "interval", lcfg.Interval, "window", lcfg.Window, "lag", lcfg.Lag, "database", st.Database())
	err = lc.Run(ctx, slos, time.Now)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
