package causal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/causal/stats"
)

// Config tunes the Analyzer. DefaultConfig gives the values below; the
// zero value is not usable (Validate says why).
type Config struct {
	// Table is the enriched requests table (schemas/clickhouse 0001). It is
	// read with FINAL: delivery is at least once and duplicates collapse only
	// on merge.
	Table string
	// DirectReads makes every query of an analysis read Table with FINAL.
	// By default (false), when the store opens sessions (Sessioner, as
	// StoreDB does) and the user may create temporary tables (readonly 0 or
	// 2), an analysis, or a sweep, first reads the rows it needs once into
	// a temporary table of its session (a snapshot) and every query reads
	// that: the same answers, several times faster (DESIGN.md). A user on
	// readonly = 1 reads directly.
	DirectReads bool
	// SQLFits makes ClickHouse compute the fits' sums (XᵀX, Xᵀy, the HC3
	// meats) from generated SQL, as direct reads always do. By default
	// (false) an analysis reading a snapshot reads the node expressions,
	// outcome, window indicator and placement labels of its rows once,
	// columnar, and computes every fit's sums in Go (colfit.go): the same
	// answers, an order of magnitude less server time (DESIGN.md "Cost").
	SQLFits bool
	// frameReadValues overrides the values one read of the Go fits' frame
	// carries (tests: many reads of one frame).
	frameReadValues int
	// SampleRows is the number of pooled (window + baseline) rows above
	// which the Go fits' frame samples the rows below the tail threshold
	// (200,000; 0: never). The tail rows are all kept; of the others, those
	// whose uid hash has its s low bits zero (the quantile grids' sampler
	// bits), with weight 2^s, 2^s about the rows over SampleRows. Counts,
	// P99s, the breach verdict, the tail cut and every query stay exact;
	// the fits are weighted (DESIGN.md "Sampling the rows below the tail").
	SampleRows int64
	// SamplesTable is the per-GPU samples table (gpu_samples), read to
	// localize a GPU cause inside a multi-GPU engine (Node.Samples).
	SamplesTable string
	// EngineSamplesTable is the per-engine samples table (engine_samples),
	// read for the prefix cache's token counters (dilutedShare).
	EngineSamplesTable string
	// DAG is the causal DAG; nil means DefaultDAG.
	DAG *dag.DAG
	// Causes restricts the candidates to these taxonomy causes (nil: every
	// cause node of the DAG, and entity.degraded).
	Causes []Cause
	// Level is the confidence level of the quantile intervals used for
	// breach detection (0.95).
	Level float64
	// MinRequests is the fewest window requests on which a breach may be
	// declared (400; never below MinSampleSize(quantile, Level), 368 for the
	// P99 at 95%: small models serve a few requests per second).
	MinRequests int
	// MinBaselineRequests is the fewest requests a baseline needs (400).
	MinBaselineRequests int
	// MinRelIncrease is the margin of the baseline rule (DetectBreach): the
	// window's quantile must exceed the baseline's by this share (0.2), its
	// lower bound the baseline's upper bound. It is also the shift
	// BreachStart looks for, and the margin by which an entity's own
	// quantile must exceed its peers' in a sweep.
	MinRelIncrease float64
	// BaselineLength is the default baseline: the stretch right before the
	// window (1h), used when it holds MinBaselineRequests.
	BaselineLength time.Duration
	// MinBreachStretch is the shortest stretch of a window that breaches
	// its preceding baseline on its own while the whole window does not
	// (2m): shorter, it is a burst of traffic, not where the tail broke.
	MinBreachStretch time.Duration
	// KnotQuantiles are the pooled quantiles at which continuous adjusters
	// get hinge terms ({0.5, 0.75, 0.9, 0.98}).
	KnotQuantiles []float64
	// MinEntityRows is the fewest rows an engine or GPU needs for its own
	// fixed-effect column, and to be scored or blamed (30).
	MinEntityRows int
	// MaxEntities caps the fixed-effect columns of one placement node (64);
	// the smallest entities fall into the reference level.
	MaxEntities int
	// MinAF is the smallest attributable fraction reported as a culprit
	// (0.05); the fraction's 95% interval must also exclude 0.
	MinAF float64
	// MaxCulprits caps the ranked list (5).
	MaxCulprits int
	// LocalizeShare is the share of a cause's affected tail requests that
	// the engines or GPUs named must carry (0.5). One entity carrying it
	// alone is the culprit's entity; several, each carrying at least
	// SplitShare (0.2), get a culprit each (the same effect, the
	// attributable fraction split by their affected requests); otherwise
	// the culprit acts on the whole scope.
	LocalizeShare float64
	SplitShare    float64
	// DegradedHealth is the health below which an engine or GPU is
	// examined for entity.degraded (0.1).
	DegradedHealth float64
	// QueueDemandRise is the rise of the arrival rate (window over
	// baseline, requests per second on the culprit's engine or scope) below
	// which a queue.saturation culprit is a symptom (1.5): the queue grew
	// because the engine served slower, not because more work arrived, and
	// the culprit ranks below every other culprit on that engine or GPU.
	QueueDemandRise float64
	// ScopeDemandRise is QueueDemandRise for a queue of the whole scope,
	// or of an engine that serves 95% of its window requests or more
	// (1.2, the margin the breach rule calls material): a model's traffic
	// comes from its clients, not from a router that may steer a share of
	// it between engines, and near capacity a fifth more of it is a surge
	// (at ×1.5 a model's +31% traffic was judged a symptom of the prefill
	// load it caused). 0 means QueueDemandRise.
	ScopeDemandRise float64
	// SwingQueueShare and SwingMaxRise tell a load swing served within
	// capacity from a surge past it. A breach of the whole scope (no SLO
	// threshold) whose top culprit is the scope's own demand (a queue, or
	// prefills crowding decodes, on the whole model), whose quantile is
	// up by less than SwingMaxRise (1.5) on its baseline's, and whose
	// queue explains less than SwingQueueShare (0.15) of its tail (the
	// queue culprit's attributable fraction, 0 without one) is the load
	// served with bigger batches, not requests waiting for capacity: no
	// breach, with a note. Past capacity the queue is what the tail is
	// made of (surges on tuning fleets: 0.21 to 0.63 of the tail at
	// ×1.29 to ×7.6); a fault-free fleet's traffic rising by a fifth to
	// a third lifted its model's P99 by ×1.26 with the queue at 0.07 of
	// it (tuning seed 3922). A queue judged a symptom (no more arrivals
	// than the load's swings) does not count; past SwingMaxRise the
	// breach is a swing when the queue's estimate is under the share and
	// the scope's arrivals rose (a burst; run.loadSwing). 0 disables the
	// rule.
	SwingQueueShare float64
	SwingMaxRise    float64
	// EntityAlpha is the false-alarm rate of a sweep's entity breaches
	// (0.01): an engine or host is a breach of its own when its tail count
	// is that unlikely under its peers' rate, Bonferroni-corrected over
	// every entity the sweep tests (Sweep).
	EntityAlpha float64
	// ExplainedScanFactor (10) widens the entity scan's level for an
	// entity that a measured mechanism explains: an engine or host whose
	// scan p-value is within this factor of its corrected level (Sweep)
	// is a breach when its focused analysis names, first among the
	// culprits acting on it, a measured mechanism there (not
	// entity.degraded, not a symptom, its exposure enriched in the tail).
	// Detection and explanation are two pieces of evidence: a power cap on
	// one GPU among a dozen lifted its pod's tail at 3.4 times the level
	// (tuning seeds 3885, 4316, never paged), while a healthy pod crossed
	// twice the level in a fault run (4620) with nothing measured on it.
	// 1 disables the rule.
	ExplainedScanFactor float64
	// MinEntityExcess (10) is the fewest excess tail requests (above what
	// the yardstick predicts, ExcessTail) an engine or host breach must
	// hold, whatever its p-value: a page is for users hurt, and a
	// significant stretch of a handful of requests is more often a chance
	// run of the scope's own traffic than a fault. A fault-free tuning
	// fleet (seed 6989) paged one pod for a 90-second run of long prompts
	// routed to it by chance (6.9 and 7.6 excess requests); the least of
	// 188 right entity answers on tuning and holdout seeds held 11.5. An
	// entity below the floor is named in the sweep's notes. 0 disables it.
	MinEntityExcess float64
	// MaxScopes caps the models one sweep examines (200), the busiest
	// first; a note names the cut.
	MaxScopes int
	// SweepParallel is the number of scopes a sweep analyzes at once (1,
	// one after another): every model's Analyze and entity screen, then
	// the focused analyses of the entity breaches, with the same answer as
	// one at a time. The default is 1 because on a server without spare
	// cores the copies cost about what the overlap saves (80 models on the
	// 2-core dev machine: 0.91× the time at 4). A connection runs one statement at a time and the snapshot is a
	// temporary table of one connection, so each worker beyond the first
	// reads a copy of the sweep's snapshot in a session of its own, used
	// only when it holds the same rows (DESIGN.md); with direct reads the
	// workers share the Querier, which must then be safe for concurrent
	// use.
	SweepParallel int
	// SweepCopyRows bounds the rows the server holds in those copies
	// (4,000,000, about 1 GiB): a sweep makes no more copies than fit
	// (0: none, so a sweep through a snapshot runs one scope at a time).
	SweepCopyRows int64
	// FocusShare is the share of a breached scope's window tail one
	// breached entity must hold for the breach to be that entity's (0.5).
	FocusShare float64
	// Exemplars is the number of exemplar trace ids per culprit (3).
	Exemplars int
	// Version is method.version of the documents (the build version).
	Version string
	// Logger receives warnings (nil: discarded).
	Logger *slog.Logger
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		Table:               "requests",
		SamplesTable:        "gpu_samples",
		EngineSamplesTable:  "engine_samples",
		Level:               0.95,
		MinRequests:         400,
		MinBaselineRequests: 400,
		MinRelIncrease:      0.2,
		BaselineLength:      time.Hour,
		MinBreachStretch:    2 * time.Minute,
		KnotQuantiles:       []float64{0.5, 0.75, 0.9, 0.98},
		MinEntityRows:       30,
		MaxEntities:         64,
		MinAF:               0.05,
		MaxCulprits:         5,
		LocalizeShare:       0.5,
		SplitShare:          0.2,
		DegradedHealth:      0.1,
		QueueDemandRise:     1.5,
		ScopeDemandRise:     1.2,
		SwingQueueShare:     0.15,
		SwingMaxRise:        1.5,
		EntityAlpha:         0.01,
		ExplainedScanFactor: 10,
		MinEntityExcess:     10,
		FocusShare:          0.5,
		MaxScopes:           200,
		SweepParallel:       1,
		SweepCopyRows:       4_000_000,
		SampleRows:          200_000,
		Exemplars:           3,
		Version:             "dev",
	}
}

// Validate reports every configuration mistake.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, k := range c.Causes {
		if !k.Valid() {
			bad("cause %q is not in the taxonomy", k)
		}
	}
	if !identifier(c.Table) {
		bad("table %q: want a plain identifier (optionally db.table)", c.Table)
	}
	if !identifier(c.SamplesTable) {
		bad("samples table %q: want a plain identifier (optionally db.table)", c.SamplesTable)
	}
	if !identifier(c.EngineSamplesTable) {
		bad("engine samples table %q: want a plain identifier (optionally db.table)", c.EngineSamplesTable)
	}
	if !(c.Level > 0 && c.Level < 1) {
		bad("level %v outside (0,1)", c.Level)
	}
	if c.MinRequests < 1 || c.MinBaselineRequests < 1 {
		bad("min requests %d / min baseline requests %d must be >= 1", c.MinRequests, c.MinBaselineRequests)
	}
	if !(c.MinRelIncrease >= 0) || math.IsInf(c.MinRelIncrease, 0) {
		bad("min relative increase %v must be finite and >= 0", c.MinRelIncrease)
	}
	if c.MinBreachStretch < 0 {
		bad("min breach stretch %v must be >= 0", c.MinBreachStretch)
	}
	if c.BaselineLength <= 0 {
		bad("baseline length %v must be > 0", c.BaselineLength)
	}
	for _, q := range c.KnotQuantiles {
		if !(q > 0 && q < 1) {
			bad("knot quantile %v outside (0,1)", q)
		}
	}
	if c.MinEntityRows < 1 || c.MaxEntities < 1 || c.MaxCulprits < 1 || c.Exemplars < 0 {
		bad("min entity rows %d, max entities %d, max culprits %d must be >= 1 and exemplars %d >= 0", c.MinEntityRows, c.MaxEntities, c.MaxCulprits, c.Exemplars)
	}
	if !(c.MinAF >= 0 && c.MinAF < 1) {
		bad("min attributable fraction %v outside [0,1)", c.MinAF)
	}
	if !(c.LocalizeShare > 0 && c.LocalizeShare <= 1) {
		bad("localize share %v outside (0,1]", c.LocalizeShare)
	}
	if !(c.SplitShare > 0 && c.SplitShare <= c.LocalizeShare) {
		bad("split share %v outside (0, localize share]", c.SplitShare)
	}
	if !(c.DegradedHealth >= 0 && c.DegradedHealth < 1) {
		bad("degraded health %v outside [0,1)", c.DegradedHealth)
	}
	if !(c.QueueDemandRise >= 0) || math.IsInf(c.QueueDemandRise, 0) {
		bad("queue demand rise %v must be finite and >= 0", c.QueueDemandRise)
	}
	if !(c.ScopeDemandRise >= 0) || math.IsInf(c.ScopeDemandRise, 0) {
		bad("scope demand rise %v must be finite and >= 0", c.ScopeDemandRise)
	}
	if !(c.SwingQueueShare >= 0 && c.SwingQueueShare <= 1) {
		bad("swing queue share %v must be in [0, 1]", c.SwingQueueShare)
	}
	if c.SwingQueueShare > 0 && !(c.SwingMaxRise >= 1) || math.IsInf(c.SwingMaxRise, 0) {
		bad("swing max rise %v must be finite and >= 1", c.SwingMaxRise)
	}
	if !(c.MinEntityExcess >= 0) || math.IsInf(c.MinEntityExcess, 0) {
		bad("min entity excess %v must be finite and >= 0", c.MinEntityExcess)
	}
	if !(c.ExplainedScanFactor >= 1) {
		bad("explained scan factor %v below 1", c.ExplainedScanFactor)
	}
	if !(c.EntityAlpha > 0 && c.EntityAlpha < 1) {
		bad("entity alpha %v outside (0,1)", c.EntityAlpha)
	}
	if c.MaxScopes < 1 {
		bad("max scopes %d must be >= 1", c.MaxScopes)
	}
	if c.SweepParallel < 1 || c.SweepParallel > MaxSweepParallel {
		bad("sweep parallel %d outside [1,%d]", c.SweepParallel, MaxSweepParallel)
	}
	if c.SweepCopyRows < 0 {
		bad("sweep copy rows %d must be >= 0", c.SweepCopyRows)
	}
	if c.SampleRows < 0 {
		bad("sample rows %d must be >= 0 (0: never sample)", c.SampleRows)
	}
	if !(c.FocusShare > 0 && c.FocusShare <= 1) {
		bad("focus share %v outside (0,1]", c.FocusShare)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid causal config: %w", err)
	}
	return nil
}

func identifier(s string) bool {
	if s == "" {
		return false
	}
	for _, part := range strings.Split(s, ".") {
		if part == "" || !isIdentStart(part[0]) {
			return false
		}
		for i := 0; i < len(part); i++ {
			if !isIdent(part[i]) {
				return false
			}
		}
	}
	return true
}

func isIdentStart(b byte) bool { return b == '_' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }

// Analyzer answers "why was the tail bad in this window?" from the
// enriched requests in ClickHouse. Heavy aggregation runs in ClickHouse
// (counts, quantiles, XᵀX/Xᵀy and the meats, per-entity counts); the
// algebra runs here. It is safe for concurrent use: it keeps no state
// between analyses.
type Analyzer struct {
	db  Querier
	cfg Config
	dag *dag.DAG
	log *slog.Logger

	// An analyzer reading a snapshot (withSnapshot) is a copy of the one
	// reading the store (direct), its db the snapshot's session.
	snap   *snapshot
	direct *Analyzer
	reads  Reads
}

// NewAnalyzer validates cfg and returns an Analyzer reading through db.
func NewAnalyzer(db Querier, cfg Config) (*Analyzer, error) {
	if db == nil {
		return nil, errors.New("new analyzer: nil querier")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := cfg.DAG
	if g == nil {
		var err error
		if g, err = dag.Default(); err != nil {
			return nil, fmt.Errorf("new analyzer: %w", err)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Analyzer{db: db, cfg: cfg, dag: g, log: log}, nil
}

// Config returns the analyzer's configuration.
func (a *Analyzer) Config() Config { return a.cfg }

// WithEntityAlpha returns a copy of a whose sweeps test entity breaches
// and scope scans at alpha instead of Config.EntityAlpha (the scheduled
// detector's level: incident.LifecycleConfig.EntityAlpha). It panics
// unless 0 < alpha < 1.
func (a *Analyzer) WithEntityAlpha(alpha float64) *Analyzer {
	if !(alpha > 0 && alpha < 1) {
		panic(fmt.Sprintf("causal: entity alpha %v outside (0,1)", alpha))
	}
	c := *a
	c.cfg.EntityAlpha = alpha
	return &c
}

// Request is one question: the SLO (its scope selects the requests), the
// window, and optionally the baseline to compare with.
type Request struct {
	// SLO: Signal defaults to "e2e_latency", Quantile to 0.99. ThresholdMS 0
	// means no SLO threshold: only the baseline rule can declare a breach.
	SLO    SLO
	Window Interval
	// Baseline, when set, is used as is. Otherwise: the BaselineLength
	// before the window when it holds enough requests, else the healthy
	// part of the window before the breach began (change points of the
	// per-bucket quantile series), else none.
	Baseline *Interval
	// Focus, when set, is an entity breach found by a sweep: the window is
	// attributed as breached (the entity's own tail broke, whatever the
	// scope's quantile did), with Focus.TailThresholdMS as the tail when no
	// baseline resolves, and culprits acting on the entity rank first.
	Focus *Where
	// IncidentID is written into the document when it fires; empty means
	// one derived from the scope and the window (IncidentID).
	IncidentID string
	// Scopes is how many scopes a sweep asks together with this one (0 or
	// 1: this one alone): the scope's own time scan (tailScan) shares its
	// false-alarm rate among them, as the entity scan shares its rate
	// among every entity the sweep tests.
	Scopes int
}

// ScopeColumns are the requests columns a scope may select on.
var scopeColumns = []string{"service", "model", "host", "pod", "namespace", "service_instance", "engine", "gpu", "source"}

// ScopeColumns returns the requests columns a scope may select on.
func ScopeColumns() []string { return append([]string(nil), scopeColumns...) }

// Baseline sources, as Analysis.BaselineSource reports them.
const (
	BaselineExplicit    = "explicit"
	BaselinePreceding   = "preceding"
	BaselineChangePoint = "change_point"
	BaselineNone        = "none"
)

// Analysis is the outcome of Analyze: the v1 document and what led to it.
type Analysis struct {
	Incident Incident
	Breach   stats.Breach
	// Insufficient is set when the window held too few requests to judge
	// the quantile (no breach can be declared either way).
	Insufficient bool
	// BaselineSource says where the baseline came from (Baseline*).
	BaselineSource string
	// WindowQuantile and BaselineQuantile are the SLO quantile with its
	// interval (BaselineQuantile.N == 0 without a baseline).
	WindowQuantile, BaselineQuantile stats.QuantileCI
	// TailThresholdMS defines "tail request" for the tail model, the
	// attributable fraction and the health scores: the SLO threshold, or
	// the baseline quantile when there is no threshold.
	TailThresholdMS float64
	// Candidates are every cause examined, culprits or not, in DAG order.
	Candidates []Candidate
	// Notes are warnings and decisions worth showing (also logged).
	Notes []string
	// Queries counts the SQL queries sent; QueryTime their total latency.
	Queries   int
	QueryTime time.Duration
	// Reads says whether the queries read a snapshot or the table.
	Reads Reads
	// Fits says where the fits' sums were computed.
	Fits Fits
}

// Fits says where an analysis computed its fits' sums: in Go from a
// columnar read of the snapshot (Config.SQLFits unset), or in ClickHouse.
type Fits struct {
	// Go is the time spent in the Go passes (0: every pass ran in SQL).
	Go time.Duration
	// FrameBytes is the memory the columns read for them held.
	FrameBytes int64
	// SQL counts the passes that ran in ClickHouse.
	SQL int
	// SampleEvery is k when the frame kept every tail row and one in k of
	// the others, each with weight k (Config.SampleRows); 0 when it holds
	// every row.
	SampleEvery int
	// FrameRows is the number of rows the frame holds.
	FrameRows int
	// SharedSQL counts the shared aggregates (the quantile grids) that a
	// sampled frame could not give exactly and their query computed.
	SharedSQL int
}

// Candidate is one cause examined.
type Candidate struct {
	Cause       Cause
	Node        string // DAG node (for entity.degraded: "engine" or "gpu")
	Entity      Entity
	AdjustedFor []string
	Regressors  int
	Rows        float64 // rows of the fits (baseline and window)
	Estimate    stats.CauseEstimate
	MaxLeverage float64
	Health      float64
	Evidence    []string
	Exemplars   []string
	// Split marks a per-entity share of a cause spread over several
	// engines or GPUs (Config.SplitShare); the cause's own candidate is
	// then not a culprit.
	Split bool
	// Skipped says why the cause was not estimated ("" when it was).
	Skipped string
	// Symptom marks a culprit that is a consequence of another mechanism
	// on its entity rather than a root (a queue where arrivals did not
	// rise: Config.QueueDemandRise); it ranks below the others there.
	Symptom bool
	// MovedLoad marks an entity.degraded symptom of work moved to the
	// entity from its peers (movedLoad): it ranks below every culprit of
	// the scope, the cause being where the work left.
	MovedLoad bool
	// WholeScope marks an entity that is the scope's only one (a model
	// served by one engine): named, but not localized within the scope.
	WholeScope bool
	// DemandRise is a queue culprit's arrival rate in the window over the
	// baseline's on its entity, when at least Config.QueueDemandRise (more
	// work arrived); 0 otherwise.
	DemandRise float64
	// TailEnriched: the cause's exposure is more common among the window's
	// tail requests than among the baseline's (or, without a baseline, the
	// window's other requests). An entity breach needs such a culprit on
	// the entity (Sweep).
	TailEnriched bool
	// Culprit is set when the cause made the ranked list.
	Culprit bool
}

// Analyze answers req. Errors are store or configuration failures; a window
// without a breach is not an error (Incident.Status is StatusOK).
func (a *Analyzer) Analyze(ctx context.Context, req Request) (*Analysis, error) {
	r, err := a.newRun(ctx, req)
	if err != nil {
		return nil, err
	}
	sa, made, release, err := a.withSnapshot(ctx, r.req.SLO.Scope, r.y, false, a.coverage(req.Window, req.Baseline))
	if err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}
	defer release()
	r.a = sa
	if err := r.analyze(); err != nil {
		return nil, err
	}
	an := r.result()
	an.Reads = sa.reads
	an.Fits = r.gofit.summary()
	if made {
		an.Queries += snapshotStatements
		an.QueryTime += sa.reads.SnapshotTime
	}
	return an, nil
}

// IncidentID derives a stable incident id from the scope and the start of
// the breach: "inc-20260314-0905-<8 hex of the scope>".
func IncidentID(scope map[string]string, start time.Time) string {
	return "inc-" + start.UTC().Format("20060102-1504") + "-" + scopeHash(scope)
}

// ScopeString is the canonical form of a scope: "k=v,k=v", keys sorted.
func ScopeString(scope map[string]string) string {
	keys := make([]string, 0, len(scope))
	for k := range scope {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + scope[k]
	}
	return strings.Join(parts, ",")
}

func scopeHash(scope map[string]string) string {
	// FNV-1a, 32 bits: stable across processes and versions.
	h := uint32(2166136261)
	for _, c := range []byte(ScopeString(scope)) {
		h ^= uint32(c)
		h *= 16777619
	}
	return fmt.Sprintf("%08x", h)
}
