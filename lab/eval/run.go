package eval

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tailcause/tailcause/causal"
	"github.com/tailcause/tailcause/causal/incident"
	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/lab/faultlab"
)

// Question is how a run is asked about.
type Question string

// The questions. Neither window depends on the truth.
const (
	// NoEarlierData: the window is the whole run; no data exists before it.
	NoEarlierData Question = "no-earlier-data"
	// HealthyBefore: the run's first half is fault-free by construction
	// (faults start after it) and the window is the second half; the sweep
	// finds the preceding baseline itself.
	HealthyBefore Question = "healthy-before"
	// FaultBefore: the healthy-before run asked about its last fifth (the
	// second half's last 40%, which every onset, 10–60% into the second
	// half, precedes): the fault was on before the window began, and the
	// data before the window holds its start and the healthy time before
	// it. It is the page an on-call engineer opens minutes into a fault
	// ("why is the tail bad in the last N minutes?"). A fault that ended
	// before the window is not scored.
	FaultBefore Question = "fault-before"
)

// Questions lists the questions in report order.
func Questions() []Question { return []Question{NoEarlierData, HealthyBefore, FaultBefore} }

// faultBeforeShare is the share of the healthy-before window that
// FaultBefore asks about: its end, after every onset.
const faultBeforeShare = 0.4

// Seed sets: tune on the first, report on the second.
const (
	TuneFirst    = 1      // the tuning set: seeds 1, 2, …
	HoldoutFirst = 100001 // the holdout set: seeds 100001, 100002, …
)

// SetSeeds returns n seeds of a set ("tune" or "holdout").
func SetSeeds(set string, n int) ([]uint64, error) {
	var first uint64
	switch set {
	case "tune":
		first = TuneFirst
	case "holdout":
		first = HoldoutFirst
	default:
		return nil, fmt.Errorf("seed set %q: want tune or holdout", set)
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = first + uint64(i)
	}
	return out, nil
}

// SetOf names the set a seed belongs to.
func SetOf(seed uint64) string {
	if seed >= HoldoutFirst {
		return "holdout"
	}
	return "tune"
}

// Options configure an evaluation.
type Options struct {
	// Store is the ClickHouse server; each run gets its own database,
	// named <Store.Database>_eval_<seed>_<question>.
	Store chstore.Config
	// Duration is each run's simulated length (DefaultDuration).
	Duration time.Duration
	// Questions to ask (default both).
	Questions []Question
	// Parallel runs at once (2), each with its own database and broker.
	Parallel int
	// Detector also replays the scheduled detector (incident.Lifecycle) over
	// the data of each healthy-before run, in simulated time, and scores the
	// first incident it opened.
	Detector bool
	// DetectorConfig is the replayed detector's configuration (zero:
	// incident.DefaultLifecycleConfig).
	DetectorConfig incident.LifecycleConfig
	// MinEffect is the least P99 ratio (during the fault over before it,
	// on the fault's own engines) a drawn fault must reach; weaker draws
	// are strengthened by faultlab.Screen (1.3).
	MinEffect float64
	// Router is the fault lab's router policy, or faultlab.RouterMixed
	// (faultlab.RandomOptions.Router; zero: round-robin). A robustness
	// check: the seeds' fleets and faults are the same, their requests go
	// elsewhere.
	Router faultlab.RouterPolicy
	// Keep keeps each run's database.
	Keep bool
	// Reuse asks the databases an earlier run with Keep left (the same
	// seeds, questions, Duration and MinEffect) again, instead of running
	// the lab: the truth is simulated again in memory (the lab is
	// deterministic), and the databases are kept.
	Reuse bool
	// Causal is the analyzer's configuration (zero: causal.DefaultConfig).
	Causal *causal.Config
	// Log receives the components' logs (nil: discarded).
	Log *slog.Logger
	// Progress receives one line per run started and finished (nil: none).
	Progress io.Writer
}

func (o Options) resolved() Options {
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if len(o.Questions) == 0 {
		o.Questions = Questions()
	}
	if o.Parallel < 1 {
		o.Parallel = 2
	}
	if o.DetectorConfig == (incident.LifecycleConfig{}) {
		o.DetectorConfig = incident.DefaultLifecycleConfig()
	}
	if o.MinEffect == 0 {
		o.MinEffect = 1.3
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// DefaultDuration is a run's simulated length: about 30 s of wall time per
// run at 2 runs at once on 2 cores, so 200 runs take about 50 minutes.
const DefaultDuration = 30 * time.Minute

// Baseline methods, as causal.CompareRankings names them.
var baselineMethods = []string{causal.MethodUnadjusted, causal.MethodRobustZ}

// Run is the outcome of one seed asked one question.
type Run struct {
	Seed     uint64   `json:"seed"`
	Set      string   `json:"set"`
	Question Question `json:"question"`
	Case     string   `json:"case"`
	// Cause and Level of the injected fault ("" on fault-free runs).
	Cause string `json:"cause,omitempty"`
	Level Level  `json:"level,omitempty"`
	// Entity is the fault's entity as the truth names it.
	Entity    faultlab.Entity `json:"entity,omitzero"`
	FaultFree bool            `json:"fault_free"`
	// Effect is the P99 of the fault's own engines during the fault over
	// their P99 before it; Weak: below Options.MinEffect even after
	// screening, so the run is not scored.
	Effect float64 `json:"effect_p99_ratio,omitempty"`
	Weak   bool    `json:"weak,omitempty"`
	// Ended: the fault, or its last XID's effects, ended before the
	// question's window (FaultBefore), so the run is not scored.
	Ended      bool  `json:"ended_before_window,omitempty"`
	Screened   int   `json:"screened,omitempty"`
	Decoy      bool  `json:"decoy"`
	Confounded bool  `json:"confounded"`
	Requests   int64 `json:"requests"`
	// WindowDays is the question window's simulated length in days.
	WindowDays float64 `json:"window_days"`
	// Breaches are where the sweep found the tail broken, most severe
	// first.
	Breaches []BreachInfo `json:"breaches"`
	// Unrelated counts the breaches of a fault run that touch none of the
	// fault's engines.
	Unrelated int `json:"unrelated_breaches,omitempty"`
	// Ranking is the flattened ranking ("cause@entity"), best first.
	Ranking []string `json:"ranking"`
	// Hit scores Ranking; Baselines score the comparison methods on the
	// most severe breach (cause level only).
	Hit       Hit            `json:"hit"`
	Baselines map[string]Hit `json:"baselines"`
	// BaselineError is why the baselines could not be computed (they then
	// count as misses).
	BaselineError string `json:"baseline_error,omitempty"`
	// Detector is the replay of the scheduled detector (Options.Detector).
	Detector *DetectorRun `json:"detector,omitempty"`
	// Seconds: wall time of the whole run, of the lab (simulation, Kafka,
	// enrich, ClickHouse) and of the question (sweep and baselines).
	Seconds      float64 `json:"seconds"`
	LabSeconds   float64 `json:"lab_seconds"`
	SweepSeconds float64 `json:"sweep_seconds"`
	Error        string  `json:"error,omitempty"`
}

// BreachInfo is one breach of a sweep, as the report shows it.
type BreachInfo struct {
	Level      string  `json:"level"`
	Where      string  `json:"where"`
	ExcessTail float64 `json:"excess_tail"`
	// P99Ratio is the breached window's quantile over its baseline's
	// (0 without a baseline).
	P99Ratio float64  `json:"p99_ratio,omitempty"`
	Culprits []string `json:"culprits"`
}

// DetectorRun is what the replayed scheduled detector did.
type DetectorRun struct {
	Evaluations int    `json:"evaluations"`
	Errors      int    `json:"errors"`
	FirstError  string `json:"first_error,omitempty"`
	// Opened lists every incident opened: "time scope top-culprit".
	Opened []string `json:"opened"`
	// First is the first incident opened at or after the fault's onset,
	// scored; incidents opened before it (or on a fault-free run) are
	// false.
	FirstAt     time.Time `json:"first_at,omitzero"`
	FirstTop    string    `json:"first_top,omitempty"`
	Hit         Hit       `json:"hit"`
	DelayS      float64   `json:"delay_s,omitempty"` // from the fault's onset to the first incident
	FalseOpened int       `json:"false_opened"`
	// Changed lists every new top culprit an open incident was updated to
	// ("time scope top-culprit"): each a page naming another culprit.
	Changed      []string `json:"changed,omitempty"`
	WindowDays   float64  `json:"window_days"`
	DetectSecond float64  `json:"seconds"`
}

// CulpritString names a culprit as "cause@entity".
func CulpritString(c causal.Culprit) string {
	return string(c.Cause) + "@" + causal.EntityString(c.Entity)
}

// Job is one run to make: a seed asked one question.
type Job struct {
	Seed     uint64
	Question Question
}

// Evaluate runs every seed × question of opts, Parallel at a time, and
// returns the runs in seed, then question order. A run that fails is
// reported in its Error; Evaluate itself fails only when ctx ends.
func Evaluate(ctx context.Context, opts Options, seeds []uint64) ([]Run, error) {
	o := opts.resolved()
	var jobs []Job
	for _, s := range seeds {
		for _, q := range o.Questions {
			jobs = append(jobs, Job{s, q})
		}
	}
	return EvaluateJobs(ctx, o, jobs)
}

// EvaluateJobs makes the runs of jobs, Parallel at a time, in jobs' order.
func EvaluateJobs(ctx context.Context, opts Options, jobs []Job) ([]Run, error) {
	o := opts.resolved()
	runs := make([]Run, len(jobs))
	ch := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	started := time.Now()
	for w := 0; w < o.Parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ch {
				r := RunOne(ctx, o, jobs[i].Seed, jobs[i].Question)
				runs[i] = r
				mu.Lock()
				done++
				if o.Progress != nil {
					fmt.Fprintf(o.Progress, "[%d/%d %s] %s\n", done, len(jobs), time.Since(started).Round(time.Second), r.Line())
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for i := range jobs {
		select {
		case ch <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	return runs, ctx.Err()
}

// Line is the run's progress line.
func (r Run) Line() string {
	truth := r.Cause
	if r.FaultFree {
		truth = "fault-free"
	}
	if r.Error != "" {
		return fmt.Sprintf("seed %d %s: %s: error: %s", r.Seed, r.Question, truth, r.Error)
	}
	verdict := "miss"
	switch {
	case r.Weak:
		verdict = fmt.Sprintf("not scored: the fault lifts its own P99 only %.2f×", r.Effect)
	case r.Ended:
		verdict = "not scored: the fault (or its XIDs' effects) ended before the window"
	case r.FaultFree && len(r.Breaches) == 0:
		verdict = "ok (no breach)"
	case r.FaultFree:
		verdict = fmt.Sprintf("FALSE INCIDENT ×%d", len(r.Breaches))
	case r.Hit.At(1):
		verdict = "top-1"
	case r.Hit.At(3):
		verdict = fmt.Sprintf("top-3 (rank %d)", r.Hit.Rank)
	case r.Hit.CauseAt(1):
		verdict = "cause only (" + r.Hit.Why + ")"
	}
	top := strings.Join(r.Ranking[:min(3, len(r.Ranking))], ", ")
	return fmt.Sprintf("seed %d %s: %s %s → %d breach(es), top %s: %s (%.0fs: lab %.0fs, sweep %.0fs)",
		r.Seed, r.Question, truth, entityLabel(r.Entity), len(r.Breaches), orNone(top), verdict, r.Seconds, r.LabSeconds, r.SweepSeconds)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func entityLabel(e faultlab.Entity) string {
	return causal.EntityString(causal.Entity{Model: e.Model, Host: e.Host, GPU: e.GPU, Pod: e.Pod})
}

// screenSims bounds the in-memory simulations of faultlab.Screen.
const screenSims = 5

// CaseFor draws the case of a seed for a question of a run of length d,
// screened so that its fault shows in its own entity's P99 by minEffect.
// It returns the truth of the screened case too (nil for a fault-free
// case, which screening does not simulate).
func CaseFor(ctx context.Context, seed uint64, q Question, d time.Duration, minEffect float64, router faultlab.RouterPolicy) (*faultlab.Case, *faultlab.Truth, error) {
	ro := faultlab.RandomOptions{Window: d, Router: router}
	if q == HealthyBefore || q == FaultBefore {
		ro = faultlab.RandomOptions{Window: d - d/2, HealthyPrefix: d / 2, Router: router}
	}
	c, err := faultlab.RandomCase(seed, ro)
	if err != nil {
		return nil, nil, err
	}
	truth, err := faultlab.Screen(ctx, c, minEffect, screenSims)
	if err != nil {
		return nil, nil, err
	}
	return c, truth, nil
}

// questionWindow is the window q asks about in a run of truth whose case
// has the healthy prefix and window given; ended says that the run's
// fault ended before it (FaultBefore), so the run is not scored: its end,
// or the end of its last event's effects (an XID's hang and restart) when
// that is earlier. It reads the truth only for the run's start and end
// and, for ended, the fault's.
func questionWindow(q Question, truth *faultlab.Truth, prefix, window time.Duration) (w causal.Interval, ended bool) {
	w = causal.Interval{Start: truth.Start.Add(prefix), End: truth.End}
	if q == FaultBefore {
		w.Start = truth.End.Add(-time.Duration(faultBeforeShare * float64(window)))
		if len(truth.Faults) > 0 {
			f := truth.Faults[0]
			end := f.End
			if !f.EffectsEnd.IsZero() && f.EffectsEnd.Before(end) {
				end = f.EffectsEnd
			}
			ended = !end.After(w.Start)
		}
	}
	return w, ended
}

// Confounded says whether a run is confounded: it has a decoy, or its
// fault is a workload shift or an arrival surge on a model, whose
// mediators (prefill, KV use, prefix misses, queues) move with it.
func Confounded(truth *faultlab.Truth) bool {
	if len(truth.Decoys) > 0 && len(truth.Faults) > 0 {
		return true
	}
	for _, f := range truth.Faults {
		if strings.HasPrefix(f.Cause, "workload.") || (f.Cause == "queue.saturation" && FaultLevel(f) == LevelModel) {
			return true
		}
	}
	return false
}

// RunOne simulates one seed for one question through the real pipeline
// into a fresh database and scores the fleet-wide answer.
func RunOne(ctx context.Context, opts Options, seed uint64, q Question) (run Run) {
	o := opts.resolved()
	t0 := time.Now()
	r := Run{Seed: seed, Set: SetOf(seed), Question: q, Baselines: map[string]Hit{}}
	fail := func(err error) Run {
		r.Error = err.Error()
		r.Seconds = time.Since(t0).Seconds()
		return r
	}
	defer func() {
		if p := recover(); p != nil {
			run = fail(fmt.Errorf("panic: %v", p))
		}
	}()
	c, screened, err := CaseFor(ctx, seed, q, o.Duration, o.MinEffect, o.Router)
	if err != nil {
		return fail(err)
	}
	r.Case, r.Weak, r.Screened = c.Summary(), c.Weak, c.Screened
	sc := o.Store
	sc.Database = fmt.Sprintf("%s_eval_%d_%s", o.Store.Database, seed, strings.ReplaceAll(string(q), "-", "_"))
	sc.Logger = o.Log
	var st *chstore.Store
	var truth *faultlab.Truth
	if o.Reuse {
		st, truth, err = keptRun(ctx, sc, c, screened)
	} else {
		st, err = FreshStore(ctx, sc)
	}
	if err != nil {
		return fail(err)
	}
	defer func() {
		if !o.Keep && !o.Reuse {
			DropDatabase(st)
		}
		st.Close()
	}()
	if truth == nil {
		if truth, err = RunLab(ctx, o.Log, st, c.Config, nil); err != nil {
			return fail(err)
		}
	}
	r.LabSeconds = time.Since(t0).Seconds()
	r.FaultFree = len(truth.Faults) == 0
	r.Decoy = len(truth.Decoys) > 0
	r.Confounded = Confounded(truth)
	if !r.FaultFree {
		f := truth.Faults[0]
		r.Cause, r.Level, r.Entity = f.Cause, FaultLevel(f), f.Entity
		if f.Effect != nil {
			r.Effect = f.Effect.P99Ratio
		}
	}
	r.Requests = truth.Stats.Requests
	var window causal.Interval
	window, r.Ended = questionWindow(q, truth, c.Prefix, c.Window)
	r.WindowDays = window.End.Sub(window.Start).Hours() / 24

	ccfg := causal.DefaultConfig()
	if o.Causal != nil {
		ccfg = *o.Causal
	}
	ccfg.Logger = o.Log
	db := causal.StoreDB(st)
	an, err := causal.NewAnalyzer(db, ccfg)
	if err != nil {
		return fail(err)
	}
	t1 := time.Now()
	res, err := an.Sweep(ctx, causal.SweepRequest{SLO: causal.SLO{Signal: "e2e_latency", Quantile: 0.99}, Window: window, LookBack: true})
	if err != nil {
		return fail(fmt.Errorf("sweep: %w", err))
	}
	scorer := NewScorer(truth)
	for _, b := range res.Breaches {
		scope := b.Incident.SLO.Scope
		bi := BreachInfo{Where: causal.ScopeString(scope)}
		if b.Incident.BaselineP99MS > 0 {
			bi.P99Ratio = b.Incident.ObservedP99MS / b.Incident.BaselineP99MS
		}
		where := causal.Entity{Model: scope["model"], Service: scope["service"]}
		if w := b.Incident.Breach; w != nil {
			bi.Level, bi.ExcessTail = w.Level, w.ExcessTail
			if w.Level != causal.LevelScope {
				if e := causal.EntityString(w.Entity); e != "" {
					bi.Where += " " + e
				}
			}
			e := w.Entity
			if e.Model == "" {
				e.Model = where.Model
			}
			if e.Service == "" {
				e.Service = where.Service
			}
			where = e
		}
		if !r.FaultFree && !scorer.Touches(where, truth.Faults[0]) {
			r.Unrelated++
		}
		for _, cu := range b.Incident.Culprits {
			bi.Culprits = append(bi.Culprits, CulpritString(cu))
		}
		r.Breaches = append(r.Breaches, bi)
	}
	ranked := Flatten(res.Breaches)
	for _, cu := range ranked {
		r.Ranking = append(r.Ranking, CulpritString(cu))
	}
	r.Hit = scorer.Score(ranked, truth.Faults)
	for _, m := range baselineMethods {
		r.Baselines[m] = Hit{}
	}
	if len(res.Breaches) > 0 {
		cmp, err := compareRankings(ctx, an, res.Breaches[0])
		if err != nil {
			// The baselines miss; the run still counts for tailcause.
			r.BaselineError = err.Error()
		}
		for _, m := range baselineMethods {
			var causes []causal.Cause
			for _, x := range cmp[m] {
				if !slices.Contains(causes, x.Cause) { // a cause measured by two nodes counts once, at its best
					causes = append(causes, x.Cause)
				}
			}
			r.Baselines[m] = ScoreCauses(causes, truth.Faults)
		}
	}
	r.SweepSeconds = time.Since(t1).Seconds()
	if o.Detector && q == HealthyBefore {
		d, err := replayDetector(ctx, st, ccfg, o.DetectorConfig, truth, window, replayDelay(c.Config), scorer)
		if err != nil {
			return fail(fmt.Errorf("detector replay: %w", err))
		}
		r.Detector = d
	}
	r.Seconds = time.Since(t0).Seconds()
	return r
}

// replayTable is the table of the requests a replayed detector has seen
// (replayDetector), in the run's database.
const replayTable = "requests_replay"

// replayView is the replay's view of a run's requests (replayTable): what
// a live detector would have seen at the replay's clock.
type replayView struct {
	st    *chstore.Store
	src   string        // the run's requests table
	delay time.Duration // from a request's end to its row (replayDelay)
	shown int64         // the requests that ended by this (ns, after 0) are in view
}

// newReplayView creates an empty replayTable shaped as src in st's
// database, and empties its incident tables: a kept run asked again
// (--reuse) starts from no incidents too.
func newReplayView(ctx context.Context, st *chstore.Store, src string, delay time.Duration) (*replayView, error) {
	prep := []string{"DROP TABLE IF EXISTS " + replayTable, fmt.Sprintf("CREATE TABLE %s AS %s", replayTable, src),
		"TRUNCATE TABLE incidents", "TRUNCATE TABLE culprits"}
	for _, stmt := range prep {
		if err := st.Conn().Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("prepare the replay's tables: %w", err)
		}
	}
	return &replayView{st: st, src: src, delay: delay}, nil
}

// show adds to the view the requests that ended by now − delay.
func (v *replayView) show(ctx context.Context, now time.Time) error {
	upTo := now.Add(-v.delay).UnixNano()
	if upTo <= v.shown {
		return nil
	}
	q := fmt.Sprintf("INSERT INTO %s SELECT * FROM %s WHERE end_ns > %d AND end_ns <= %d", replayTable, v.src, v.shown, upTo)
	if err := v.st.Conn().Exec(ctx, q); err != nil {
		return fmt.Errorf("show the requests that ended by %v: %w", now.Add(-v.delay).UTC(), err)
	}
	v.shown = upTo
	return nil
}

// replayDelay is how long after its end a request of a run made with cfg
// is in ClickHouse, live: the enricher writes it once its engine's next
// scrape has come (within VLLMScrapeInterval) and its GPUs' next scrape or
// the GPU wait (enrich/join's GPUWait, 10 s) has passed. The longer of the
// two bounds is the replay's delay: the detector's worst case, not its
// median (the live benchmark measures a median of 10 s and a maximum of
// 14–15 s with 10-s scrapes, BenchmarkLiveDetection).
func replayDelay(cfg faultlab.Config) time.Duration {
	return max(cfg.VLLMScrapeInterval, 10*time.Second)
}

// compareRankings is CompareRankings, with a panic turned into an error.
func compareRankings(ctx context.Context, an *causal.Analyzer, a *causal.Analysis) (res map[string][]causal.Ranked, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, fmt.Errorf("compare rankings panicked: %v", p)
		}
	}()
	return an.CompareRankings(ctx, a)
}

// replayDetector steps the scheduled detector's rounds over the run in
// simulated time: every Interval from the first instant a full window (plus
// the lag) of data exists to the end of the run plus the lag, scopes
// discovered as `tailcause causal` discovers them (one per model seen in the
// newest window), incidents written to the run's database.
//
// At each round the detector sees only the requests it would see live: the
// run's rows are all written before the replay, and a window selects its
// requests by their start, so reading the requests table would show it
// every request that started in the window, including the slow ones that
// end minutes later: the very requests a live detector waits for. The
// replay copies, before each round, the requests that had ended delay
// before it (replayDelay: the enricher's wait for the next scrape) into a
// table of its own (replayTable) and points the detector's analyzer at it.
func replayDetector(ctx context.Context, st *chstore.Store, ccfg causal.Config, cfg incident.LifecycleConfig, truth *faultlab.Truth, window causal.Interval, delay time.Duration, scorer *Scorer) (*DetectorRun, error) {
	t0 := time.Now()
	src := ccfg.Table
	ccfg.Table = replayTable
	db := causal.StoreDB(st)
	an, err := causal.NewAnalyzer(db, ccfg)
	if err != nil {
		return nil, err
	}
	view, err := newReplayView(ctx, st, src, delay)
	if err != nil {
		return nil, err
	}
	lc, err := incident.NewLifecycle(an, db, cfg)
	if err != nil {
		return nil, err
	}
	d := &DetectorRun{WindowDays: window.End.Sub(window.Start).Hours() / 24}
	var onset time.Time
	if len(truth.Faults) > 0 {
		onset = truth.Faults[0].Onset
	}
	var now time.Time
	slos := func(ctx context.Context) ([]causal.SLO, error) {
		found, _, err := causal.DiscoverScopes(ctx, db, replayTable, "model", now.Add(-cfg.Lag-cfg.Window), now, an.Config().MaxScopes)
		if err != nil {
			return nil, err
		}
		var out []causal.SLO
		for _, s := range found {
			out = append(out, causal.SLO{Signal: "e2e_latency", Quantile: 0.99, Scope: s})
		}
		return out, nil
	}
	lc.OnEvaluation(func(ev incident.Evaluation) {
		d.Evaluations++
		if ev.Err != nil {
			d.Errors++
			if d.FirstError == "" {
				d.FirstError = ev.Err.Error()
			}
		}
	})
	for now = truth.Start.Add(cfg.Window + cfg.Lag); !now.After(truth.End.Add(cfg.Lag)); now = now.Add(cfg.Interval) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := view.show(ctx, now); err != nil {
			return nil, err
		}
		for _, tr := range lc.Round(ctx, slos, now) {
			if tr.Kind != incident.TransitionOpen && tr.Kind != incident.TransitionUpdate {
				continue
			}
			in := tr.Record.Incident
			top := causal.TopCulprit(in)
			line := fmt.Sprintf("%s %s %s", now.UTC().Format("15:04:05"), causal.ScopeString(in.SLO.Scope), orNone(top))
			if tr.Kind == incident.TransitionUpdate {
				d.Changed = append(d.Changed, line)
				continue
			}
			d.Opened = append(d.Opened, line)
			if onset.IsZero() || now.Before(onset) {
				d.FalseOpened++
				continue
			}
			if d.FirstAt.IsZero() {
				d.FirstAt, d.FirstTop = now, top
				d.Hit = scorer.Score(in.Culprits, truth.Faults)
				d.DelayS = now.Sub(onset).Seconds()
			}
		}
	}
	if d.Errors > 0 && d.Errors == d.Evaluations {
		// Every evaluation failing would look like "no incident".
		return nil, fmt.Errorf("all %d evaluations failed; first: %s", d.Errors, d.FirstError)
	}
	d.DetectSecond = time.Since(t0).Seconds()
	return d, nil
}
