package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tailcause/tailcause/causal"
	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/faultlab"
)

// evalRun is the outcome of one scenario × seed.
type evalRun struct {
	Scenario   string              `json:"scenario"`
	Seed       uint64              `json:"seed"`
	Truth      []string            `json:"truth"`
	Confounded bool                `json:"confounded"`
	FaultFree  bool                `json:"fault_free"`
	Requests   int64               `json:"requests"`
	SimDays    float64             `json:"sim_days"`
	Fired      []string            `json:"fired_scopes"`
	Rankings   map[string][]string `json:"rankings"` // method → causes, best first
	EntityOK   bool                `json:"entity_ok"`
	Seconds    float64             `json:"seconds"`
	Error      string              `json:"error,omitempty"`
}

// methodMain is the project's own method in the eval tables.
const methodMain = causal.Estimator

var evalMethods = []string{methodMain, causal.MethodUnadjusted, causal.MethodRobustZ}

func cmdEval(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var sf storeFlags
	sf.register(fs, e)
	scenarios := fs.String("scenarios", "", "comma-separated scenario names (default: every built-in scenario)")
	seeds := fs.Int("seeds", 5, "seeds per scenario")
	duration := fs.Duration("duration", 30*time.Minute, "simulated time per run")
	stepShare := fs.Float64("step-span-share", 0.05, "share of engines exporting per-step spans")
	keep := fs.Bool("keep", false, "keep each run's database (<database>_eval_<scenario>_<seed>)")
	jsonOut := fs.String("json", "", "also write every run's result as JSON to this file")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	names, err := evalScenarios(*scenarios)
	if err != nil {
		return err
	}
	var runs []evalRun
	total := len(names) * *seeds
	started := time.Now()
	for _, name := range names {
		for seed := 1; seed <= *seeds; seed++ {
			fmt.Fprintf(e.stderr, "[%d/%d] %s seed %d (%s elapsed)\n", len(runs)+1, total, name, seed, time.Since(started).Round(time.Second))
			r := evalOne(ctx, e, sf, name, uint64(seed), *duration, *stepShare, *keep)
			if r.Error != "" {
				fmt.Fprintf(e.stderr, "  error: %s\n", r.Error)
			} else {
				fmt.Fprintf(e.stderr, "  truth %v; fired %v; ranked %v (%.0fs)\n", r.Truth, r.Fired, top(r.Rankings[methodMain], 3), r.Seconds)
			}
			runs = append(runs, r)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(runs, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", *jsonOut, err)
		}
	}
	printEval(e.stdout, runs)
	for _, r := range runs {
		if r.Error != "" {
			return fmt.Errorf("%d run(s) failed; first: %s seed %d: %s", countErrors(runs), r.Scenario, r.Seed, r.Error)
		}
	}
	return nil
}

func countErrors(runs []evalRun) int {
	n := 0
	for _, r := range runs {
		if r.Error != "" {
			n++
		}
	}
	return n
}

func top(xs []string, k int) []string {
	if len(xs) > k {
		return xs[:k]
	}
	return xs
}

func evalScenarios(list string) ([]string, error) {
	if list != "" {
		return splitList(list), nil
	}
	infos, err := faultlab.ListScenarios()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, in := range infos {
		names = append(names, in.Name)
	}
	return names, nil
}

// evalOne simulates one run through the real pipeline into a fresh
// database and ranks it with the three methods.
func evalOne(ctx context.Context, e *env, sf storeFlags, name string, seed uint64, dur time.Duration, stepShare float64, keep bool) evalRun {
	t0 := time.Now()
	r := evalRun{Scenario: name, Seed: seed, Rankings: map[string][]string{}}
	fail := func(err error) evalRun {
		r.Error = err.Error()
		r.Seconds = time.Since(t0).Seconds()
		return r
	}
	sc, err := faultlab.LoadScenario(name)
	if err != nil {
		return fail(err)
	}
	for _, f := range sc.Faults {
		r.Truth = append(r.Truth, f.Cause)
	}
	r.FaultFree = len(sc.Faults) == 0
	r.Confounded = len(sc.Decoys) > 0 || strings.Contains(name, "decoy")
	cfg := sf.config()
	cfg.Database = fmt.Sprintf("%s_eval_%s_%d", sf.database, name, seed)
	st, err := chstore.Open(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	defer func() {
		if !keep {
			_ = st.Conn().Exec(context.Background(), "DROP DATABASE IF EXISTS "+cfg.Database)
		}
		st.Close()
	}()
	// A fresh database for every run: drop what an earlier eval left.
	for _, tbl := range []string{"requests", "token_stalls", "gpu_samples", "engine_samples", "rejected_input", "incidents", "culprits"} {
		_ = st.Conn().Exec(ctx, "DROP TABLE IF EXISTS "+tbl)
	}
	_ = st.Conn().Exec(ctx, "DROP TABLE IF EXISTS schema_migrations")
	if _, err := st.Migrate(ctx, nil); err != nil {
		return fail(err)
	}
	lc := faultlab.DefaultConfig()
	lc.Scenario, lc.Seed, lc.Duration, lc.StepSpanShare = sc, seed, dur, stepShare
	truth, err := runLab(ctx, e, st, lc, nil)
	if err != nil {
		return fail(err)
	}
	r.Requests = truth.Stats.Requests
	r.SimDays = truth.End.Sub(truth.Start).Hours() / 24
	an, err := causal.NewAnalyzer(causal.StoreDB(st), causal.DefaultConfig())
	if err != nil {
		return fail(err)
	}
	faultModel := ""
	if len(truth.Faults) > 0 {
		// A host fault names no model: rank the model its engines serve.
		f := truth.Faults[0]
		faultModel = f.Entity.Model
		if faultModel == "" && len(f.Affected) > 0 {
			faultModel = f.Affected[0].Model
		}
	}
	window := rankWindow(truth)
	for _, ms := range truth.Stats.Models {
		res, err := an.Analyze(ctx, causal.Request{
			SLO:    causal.SLO{Signal: "e2e_latency", Quantile: 0.99, Scope: map[string]string{"model": ms.Model}},
			Window: window,
		})
		if err != nil {
			return fail(fmt.Errorf("analyze %s: %w", ms.Model, err))
		}
		if res.Incident.Status == causal.StatusFiring {
			r.Fired = append(r.Fired, ms.Model)
		}
		if ms.Model != faultModel || res.Incident.Status != causal.StatusFiring {
			continue
		}
		for _, c := range res.Incident.Culprits {
			r.Rankings[methodMain] = append(r.Rankings[methodMain], string(c.Cause))
		}
		if cs := res.Incident.Culprits; len(cs) > 0 {
			r.EntityOK = entityMatches(cs[0], truth.Faults)
		}
		cmp, err := an.CompareRankings(ctx, res)
		if err != nil {
			return fail(err)
		}
		for m, ranked := range cmp {
			seen := map[causal.Cause]bool{}
			for _, x := range ranked {
				if !seen[x.Cause] { // a cause measured by two nodes counts once, at its best
					seen[x.Cause] = true
					r.Rankings[m] = append(r.Rankings[m], string(x.Cause))
				}
			}
		}
	}
	r.Seconds = time.Since(t0).Seconds()
	return r
}

// rankWindow is the question the on-call engineer asks when the fault is
// at its worst: "why is the tail bad since the start of the run?" — from
// the run's start (no earlier data: the baseline is the healthy stretch
// before the breach, found by change-point detection) to the end of the
// first fault. Fault-free runs are asked about the same share of the run.
func rankWindow(truth *faultlab.Truth) causal.Interval {
	end := truth.Start.Add(time.Duration(0.7 * float64(truth.End.Sub(truth.Start))))
	if len(truth.Faults) > 0 {
		end = truth.Faults[0].End
	}
	return causal.Interval{Start: truth.Start, End: end}
}

// entityMatches: the top culprit names the entity the fault acted on, at
// the level the cause lives on (a GPU for GPU causes, the engine's pod for
// engine causes, the model for workload shifts and model-wide engine
// faults — or its engine when the model has one).
func entityMatches(c causal.Culprit, faults []faultlab.TruthFault) bool {
	for _, f := range faults {
		if string(c.Cause) != f.Cause {
			continue
		}
		switch {
		case strings.HasPrefix(f.Cause, "gpu."):
			return c.Entity.GPU == f.Entity.GPU
		case strings.HasPrefix(f.Cause, "workload."):
			return c.Entity.Model == "" || c.Entity.Model == f.Entity.Model
		case f.Entity.Pod == "" && f.Entity.Host == "" && len(f.Affected) == 1:
			// A model served by one engine: the engine is the model.
			return c.Entity.Pod == f.Affected[0].Pod || (c.Entity.Pod == "" && c.Entity.Host == "")
		default:
			return c.Entity.Pod == f.Entity.Pod || (c.Entity.Pod == "" && c.Entity.Host == f.Entity.Host)
		}
	}
	return false
}

// hit reports whether one of the truth causes is within the first k.
func hit(ranked []string, truth []string, k int) bool {
	for i, c := range ranked {
		if i >= k {
			break
		}
		for _, t := range truth {
			if c == t {
				return true
			}
		}
	}
	return false
}

type evalScore struct {
	n, top1, top3, cn, ctop1, ctop3 int
}

func (s evalScore) rate(a, b int) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f (%d/%d)", float64(a)/float64(b), a, b)
}

// printEval prints top-1/top-3 accuracy for each method on the fault runs
// (and on the confounded ones), and false incidents per simulated day on
// the fault-free runs. Breach detection is shared by the three methods, so
// their false-incident rates are the same number.
func printEval(w io.Writer, runs []evalRun) {
	scores := map[string]*evalScore{}
	for _, m := range evalMethods {
		scores[m] = &evalScore{}
	}
	var falseInc int
	var freeDays float64
	entityOK, entityN := 0, 0
	for _, r := range runs {
		if r.Error != "" {
			continue
		}
		if r.FaultFree {
			falseInc += len(r.Fired)
			freeDays += r.SimDays
			continue
		}
		entityN++
		if r.EntityOK {
			entityOK++
		}
		for _, m := range evalMethods {
			s := scores[m]
			s.n++
			h1, h3 := hit(r.Rankings[m], r.Truth, 1), hit(r.Rankings[m], r.Truth, 3)
			if h1 {
				s.top1++
			}
			if h3 {
				s.top3++
			}
			if r.Confounded {
				s.cn++
				if h1 {
					s.ctop1++
				}
				if h3 {
					s.ctop3++
				}
			}
		}
	}
	fi := "-"
	if freeDays > 0 {
		fi = fmt.Sprintf("%.2f (%d in %.2f days)", float64(falseInc)/freeDays, falseInc, freeDays)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "method\ttop-1\ttop-3\tconfounded top-1\tconfounded top-3\tfalse incidents/day")
	for _, m := range evalMethods {
		s := scores[m]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m, s.rate(s.top1, s.n), s.rate(s.top3, s.n), s.rate(s.ctop1, s.cn), s.rate(s.ctop3, s.cn), fi)
	}
	tw.Flush()
	fmt.Fprintf(w, "top culprit on the right entity (%s): %s\n", methodMain, (&evalScore{}).rate(entityOK, entityN))
	// Per scenario, for reading the misses.
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nscenario\tseed\ttruth\tfired\t"+strings.Join(evalMethods, "\t"))
	for _, r := range runs {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\t%d\terror: %s\n", r.Scenario, r.Seed, r.Error)
			continue
		}
		cols := []string{}
		for _, m := range evalMethods {
			cols = append(cols, strings.Join(top(r.Rankings[m], 3), ","))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", r.Scenario, r.Seed, strings.Join(r.Truth, ","), strings.Join(r.Fired, ","), strings.Join(cols, "\t"))
	}
	tw.Flush()
}
