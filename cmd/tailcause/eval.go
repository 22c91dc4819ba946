package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tailcause/tailcause/causal/incident"
	"github.com/tailcause/tailcause/lab/eval"
	"github.com/tailcause/tailcause/lab/faultlab"
)

// cmdEval evaluates the ranking on randomized fault-lab runs (lab/eval):
// each seed draws a fleet and a fault, runs through the real pipeline, and
// is asked the fleet-wide question with and without healthy data before
// the window; the answers are scored strictly against the ground truth,
// next to the two baselines.
func cmdEval(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var sf storeFlags
	sf.register(fs, e)
	set := fs.String("set", "tune", "seed set: tune (seeds 1, 2, …; tune on these) or holdout (seeds 100001, 100002, …; report on these)")
	runs := fs.Int("runs", 20, "seeds to draw from the set (each is asked every --questions question: one run each)")
	seedList := fs.String("seeds", "", "comma-separated seeds instead of --set/--runs (a seed ≥ 100001 belongs to the holdout set)")
	questions := fs.String("questions", "no-earlier-data,healthy-before,fault-before", "questions to ask: no-earlier-data (the window is the whole run), healthy-before (the run's first half is fault-free, the window is its second half), fault-before (the healthy-before run's last fifth: the fault began before the window)")
	duration := fs.Duration("duration", eval.DefaultDuration, "simulated time per run (healthy-before: half of it before the window)")
	parallel := fs.Int("parallel", 2, "runs at once (each with its own ClickHouse database and in-process Kafka)")
	detector := fs.Bool("detector", false, "also replay the scheduled detector over each healthy-before run in simulated time and score the first incident it opened")
	detInterval := fs.Duration("detector-interval", 0, "the replayed detector's interval (default: tailcause causal's)")
	minEffect := fs.Float64("min-effect", 1.3, "a drawn fault must lift its own engines' P99 by this factor; weaker draws are strengthened, and runs that stay weaker are not scored")
	router := fs.String("router", "round-robin", "the fault lab's routers: round-robin, random (a Kubernetes Service), least-loaded (an inference gateway), or mixed (one drawn per seed); a robustness check of the same seeds' fleets and faults with their requests routed otherwise (keep its databases under their own --database)")
	keep := fs.Bool("keep", false, "keep each run's database (<database>_eval_<seed>_<question>)")
	reuse := fs.Bool("reuse", false, "ask the databases an earlier --keep run kept (same --database, --seeds or --set/--runs, --duration, --min-effect, --router) again with this analyzer instead of running the lab: only the truth is simulated again, in memory (the lab is deterministic); they stay kept")
	jsonOut := fs.String("json", "", "also write every run's result as JSON to this file")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: tailcause eval [flags]\n\nScore the culprit ranking on randomized fault-lab fleets run through Kafka, enrich and ClickHouse, asked fleet-wide.\nThe tables go to stdout, one progress line per run to stderr.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if *seedList == "" && *runs < 1 {
		return fmt.Errorf("%w: --runs %d: want at least 1", errUsage, *runs)
	}
	if *parallel < 1 {
		return fmt.Errorf("%w: --parallel %d: want at least 1 run at once", errUsage, *parallel)
	}
	if !(*minEffect >= 1) {
		return fmt.Errorf("%w: --min-effect %v: want a P99 ratio of at least 1, e.g. 1.3", errUsage, *minEffect)
	}
	var seeds []uint64
	if *seedList != "" {
		for _, s := range splitList(*seedList) {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil || n == 0 {
				return fmt.Errorf("%w: --seeds: %q is not a positive integer", errUsage, s)
			}
			seeds = append(seeds, n)
		}
	} else {
		var err error
		if seeds, err = eval.SetSeeds(*set, *runs); err != nil {
			return fmt.Errorf("%w: --set: %v", errUsage, err)
		}
	}
	var qs []eval.Question
	for _, q := range splitList(*questions) {
		known := false
		for _, k := range eval.Questions() {
			known = known || string(k) == q
		}
		if !known {
			return fmt.Errorf("%w: --questions: unknown question %q", errUsage, q)
		}
		qs = append(qs, eval.Question(q))
	}
	rp := faultlab.RouterPolicy(*router)
	if rp != faultlab.RouterMixed && !slices.Contains(faultlab.RouterPolicies(), rp) {
		return fmt.Errorf("%w: --router %q: want one of %v or mixed", errUsage, *router, faultlab.RouterPolicies())
	}
	if *duration < 4*time.Minute {
		return fmt.Errorf("%w: --duration %v: at least 4m (the healthy-before question's window is half of it)", errUsage, *duration)
	}
	if err := sf.sec.load(sf.password); err != nil { // the DSN, TLS and password-file flags
		return err
	}
	opts := eval.Options{
		Store: sf.config(), Duration: *duration, Questions: qs, Parallel: *parallel,
		Detector: *detector, MinEffect: *minEffect, Router: rp, Keep: *keep, Reuse: *reuse, Progress: e.stderr,
		// The components' warnings and errors only: one run's migrations,
		// sweeps and incidents would drown the progress lines.
		Log: slog.New(minLevel{e.log.Handler(), slog.LevelWarn}),
	}
	if *detInterval > 0 {
		opts.DetectorConfig = incident.DefaultLifecycleConfig()
		opts.DetectorConfig.Interval = *detInterval
	}
	fmt.Fprintf(e.stderr, "eval: %d seeds × %d questions, %v simulated each, %d at a time, ClickHouse %s\n", len(seeds), len(qs), *duration, *parallel, sf.addr)
	started := time.Now()
	res, err := eval.Evaluate(ctx, opts, seeds)
	if err != nil {
		return err
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", *jsonOut, err)
		}
	}
	eval.Report(e.stdout, res)
	var secs float64
	var failed []string
	for _, r := range res {
		secs += r.Seconds
		if r.Error != "" {
			failed = append(failed, fmt.Sprintf("seed %d %s: %s", r.Seed, r.Question, r.Error))
		}
	}
	fmt.Fprintf(e.stdout, "\n%d runs in %s (%.1f s of run time each on average, %d at a time)\n", len(res), time.Since(started).Round(time.Second), secs/float64(max(1, len(res))), *parallel)
	if len(failed) > 0 {
		return fmt.Errorf("%d run(s) failed; first: %s", len(failed), strings.Join(failed[:1], ""))
	}
	return nil
}

// minLevel drops records below a level.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}
