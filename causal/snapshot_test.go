package causal

import (
	"context"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/internal/testkit"
)

// afTolerance is how far a culprit's attributable fraction read through a
// snapshot may be from the direct reads' (both rounded to 4 digits as the
// document carries them): the same rows, summed in another order.
const afTolerance = 1e-4

// sameAttribution checks that two analyses name the same culprits in the
// same order, with attributable fractions, effects and counterfactuals
// within the tolerances, and the same breach and candidates.
func sameAttribution(t *testing.T, what string, direct, snap *Analysis) {
	t.Helper()
	d, s := direct.Incident, snap.Incident
	if d.Status != s.Status || direct.Breach.Breached != snap.Breach.Breached || d.Requests != s.Requests || d.TailRequests != s.TailRequests {
		t.Errorf("%s: status %s/%s, breached %v/%v, requests %d/%d, tail %d/%d (direct/snapshot)", what, d.Status, s.Status,
			direct.Breach.Breached, snap.Breach.Breached, d.Requests, s.Requests, d.TailRequests, s.TailRequests)
	}
	if d.ObservedP99MS != s.ObservedP99MS || d.BaselineP99MS != s.BaselineP99MS {
		t.Errorf("%s: P99 %v/%v, baseline P99 %v/%v", what, d.ObservedP99MS, s.ObservedP99MS, d.BaselineP99MS, s.BaselineP99MS)
	}
	if len(d.Culprits) != len(s.Culprits) {
		t.Fatalf("%s: %d culprits direct, %d through the snapshot:\n%s\n%s", what, len(d.Culprits), len(s.Culprits), culpritList(d.Culprits), culpritList(s.Culprits))
	}
	near := func(a, b, rel float64) bool { return math.Abs(a-b) <= rel*math.Max(math.Abs(a), 1) }
	maxAF := 0.0
	defer func() { t.Logf("%s: %d culprits, largest AF difference %.2g", what, len(d.Culprits), maxAF) }()
	for i := range d.Culprits {
		a, b := d.Culprits[i], s.Culprits[i]
		maxAF = math.Max(maxAF, math.Abs(a.AttributableFraction-b.AttributableFraction))
		if a.Cause != b.Cause || a.Entity != b.Entity {
			t.Errorf("%s: culprit %d is %s %s direct, %s %s through the snapshot", what, i+1, a.Cause, EntityString(a.Entity), b.Cause, EntityString(b.Entity))
			continue
		}
		if math.Abs(a.AttributableFraction-b.AttributableFraction) > afTolerance {
			t.Errorf("%s: culprit %d %s: AF %v direct, %v through the snapshot", what, i+1, a.Cause, a.AttributableFraction, b.AttributableFraction)
		}
		if !near(a.EffectMS, b.EffectMS, 1e-3) || !near(a.CounterfactualP99MS, b.CounterfactualP99MS, 1e-3) || math.Abs(a.Health-b.Health) > 1e-3 {
			t.Errorf("%s: culprit %d %s: effect %v/%v ms, counterfactual %v/%v ms, health %v/%v", what, i+1, a.Cause,
				a.EffectMS, b.EffectMS, a.CounterfactualP99MS, b.CounterfactualP99MS, a.Health, b.Health)
		}
		if !slices.Equal(a.ExemplarTraceIDs, b.ExemplarTraceIDs) {
			t.Errorf("%s: culprit %d %s: exemplars %v/%v", what, i+1, a.Cause, a.ExemplarTraceIDs, b.ExemplarTraceIDs)
		}
	}
	if len(direct.Candidates) != len(snap.Candidates) {
		t.Errorf("%s: %d candidates direct, %d through the snapshot", what, len(direct.Candidates), len(snap.Candidates))
	}
	for i := range min(len(direct.Candidates), len(snap.Candidates)) {
		a, b := direct.Candidates[i], snap.Candidates[i]
		if a.Cause != b.Cause || a.Skipped != b.Skipped || a.Culprit != b.Culprit || a.Rows != b.Rows {
			t.Errorf("%s: candidate %d: %s skipped %q culprit %v rows %v direct; %s skipped %q culprit %v rows %v through the snapshot",
				what, i, a.Cause, a.Skipped, a.Culprit, a.Rows, b.Cause, b.Skipped, b.Culprit, b.Rows)
		}
	}
}

func culpritList(cs []Culprit) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString("  " + string(c.Cause) + " " + EntityString(c.Entity) + "\n")
	}
	return b.String()
}

// fixedScenario is the fixed dataset of the twin-read tests: a KV fault on
// one engine, a thermal throttle on one GPU and a degraded engine in the
// second hour.
var fixedScenario = synthScenario{Seed: 42, Start: synthStart, Duration: 2 * time.Hour, RatePerS: 8, FaultFrom: time.Hour,
	Faults: []synthFault{{Kind: "kv", Host: 1, GPU: 1}, {Kind: "thermal", Host: 2, GPU: 0}, {Kind: "degraded", Host: 3, GPU: 1}}}

// fixedQuestions are the four questions asked of fixedScenario.
var fixedQuestions = []Request{
	{SLO: SLO{Scope: llama}, Window: window(time.Hour, 2*time.Hour)},                                                                                     // the hour before as baseline
	{SLO: SLO{Scope: llama, ThresholdMS: 9000}, Window: window(time.Hour, 2*time.Hour)},                                                                  // an SLO threshold
	{SLO: SLO{Scope: llama}, Window: window(0, 2*time.Hour)},                                                                                             // the change point inside the window
	{SLO: SLO{Scope: llama}, Window: window(90*time.Minute, 2*time.Hour), Baseline: &Interval{Start: synthStart, End: synthStart.Add(30 * time.Minute)}}, // explicit, not adjacent
}

// sweepScenario16 is the twin-read sweep tests' fleet: a degraded engine
// among 16.
var sweepScenario16 = synthScenario{Seed: 7, Start: synthStart, Duration: time.Hour, RatePerS: 20, Hosts: 4, GPUs: 4, FaultFrom: 30 * time.Minute,
	Faults: []synthFault{{Kind: "degraded", Host: 2, GPU: 3, Factor: 3}}}

// twinAnalyzer is an analyzer over a's store with a's configuration
// changed by mod.
func twinAnalyzer(t *testing.T, a *Analyzer, mod func(*Config)) *Analyzer {
	t.Helper()
	cfg := a.Config()
	mod(&cfg)
	b, err := NewAnalyzer(a.db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSnapshotMatchesDirect: on a fixed dataset (a KV fault on one engine,
// a thermal throttle on one GPU and a degraded engine in the second hour),
// the analysis read through a snapshot names the same culprits in the same
// order as the one reading the table with FINAL in every query, with AF
// within afTolerance; it reads the snapshot, and sends fewer queries (the
// snapshot's two, and its fits read columns instead of one query per pass).
func TestSnapshotMatchesDirect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a := synthAnalyzer(ctx, t, fixedScenario)
	ad := twinAnalyzer(t, a, func(c *Config) { c.DirectReads = true })
	for _, req := range fixedQuestions {
		what := fmtInterval(req.Window)
		direct, err := ad.Analyze(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := a.Analyze(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if direct.Reads.SnapshotRows != 0 || direct.Reads.Direct == "" {
			t.Errorf("%s: direct analysis reads %+v", what, direct.Reads)
		}
		if snap.Reads.SnapshotRows == 0 || snap.Reads.Direct != "" {
			t.Fatalf("%s: no snapshot: %+v", what, snap.Reads)
		}
		// The fits' passes run in Go from a few reads of the snapshot
		// (TestGoFitsMatchSQL compares those with the SQL passes).
		if snap.Queries >= direct.Queries+snapshotStatements || snap.Fits.Go == 0 {
			t.Errorf("%s: %d queries through the snapshot (fits %+v), %d direct", what, snap.Queries, snap.Fits, direct.Queries)
		}
		if direct.Incident.Status != StatusFiring {
			t.Errorf("%s: no breach", what)
		}
		t.Logf("%s: %d culprits, snapshot of %d rows; %d queries %v direct, %d queries %v through the snapshot", what, len(snap.Incident.Culprits),
			snap.Reads.SnapshotRows, direct.Queries, direct.QueryTime.Round(time.Millisecond), snap.Queries, snap.QueryTime.Round(time.Millisecond))
		sameAttribution(t, what, direct, snap)
	}
}

// TestSnapshotSweepMatchesDirect: a sweep reads one snapshot for every
// scope's analysis and screen and answers as the direct reads do.
func TestSnapshotSweepMatchesDirect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a := synthAnalyzer(ctx, t, sweepScenario16)
	ad := twinAnalyzer(t, a, func(c *Config) { c.DirectReads = true })
	req := SweepRequest{Window: window(30*time.Minute, time.Hour)}
	direct, err := ad.Sweep(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := a.Sweep(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Reads.SnapshotRows == 0 {
		t.Fatalf("the sweep made no snapshot: %+v", snap.Reads)
	}
	for _, an := range snap.Examined {
		if an.Reads != snap.Reads || an.Queries == 0 {
			t.Errorf("scope analysis reads %+v, the sweep's snapshot %+v", an.Reads, snap.Reads)
		}
	}
	if snap.Queries >= direct.Queries+snapshotStatements {
		t.Errorf("%d queries through the snapshot, %d direct", snap.Queries, direct.Queries)
	}
	if len(direct.Breaches) == 0 || len(direct.Breaches) != len(snap.Breaches) {
		t.Fatalf("%d breaches direct, %d through the snapshot", len(direct.Breaches), len(snap.Breaches))
	}
	for i := range direct.Breaches {
		d, s := direct.Breaches[i], snap.Breaches[i]
		if !reflect.DeepEqual(d.Incident.Breach, s.Incident.Breach) {
			t.Errorf("breach %d: %+v direct, %+v through the snapshot", i, *d.Incident.Breach, *s.Incident.Breach)
		}
		sameAttribution(t, "breach "+d.Incident.Breach.Level, d, s)
	}
	t.Logf("%d breaches; %d queries direct, %d through a snapshot of %d rows", len(snap.Breaches), direct.Queries, snap.Queries, snap.Reads.SnapshotRows)
}

// TestSnapshotReadOnlyUser: a user on a readonly = 1 profile may not create
// the temporary table; the analysis then reads the table directly without
// attempting it, says why, and answers as a user who may.
func TestSnapshotReadOnlyUser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st := chstoretest.Fresh(t)
	s := synthScenario{Seed: 3, Start: synthStart, Duration: time.Hour, RatePerS: 10, FaultFrom: 30 * time.Minute,
		Faults: []synthFault{{Kind: "kv", Host: 0, GPU: 1}}}
	if _, err := insertSynth(ctx, st.Conn(), s, 100_000); err != nil {
		t.Fatal(err)
	}
	cfg := chstore.DefaultConfig()
	cfg.Addr, cfg.Database, cfg.TTL = testkit.ClickHouse(t), st.Database(), 0
	cfg.Username, cfg.Password = "analyst", os.Getenv("CH_ANALYST_PASSWORD")
	if cfg.Password == "" {
		cfg.Password = "analyst"
	}
	rost, err := chstore.Open(ctx, cfg)
	if err != nil {
		t.Skipf("the dev server's analyst user (readonly 1, deploy/dev/clickhouse.sh) cannot log in: %v", err)
	}
	defer rost.Close()
	var level float64
	if v, err := queryFloats(ctx, StoreDB(rost), "readonly", "SELECT toFloat64(getSetting('readonly'))", 1); err != nil || v[0] != 1 {
		t.Fatalf("the analyst user's readonly level: %v, %v; want 1", v, err)
	} else {
		level = v[0]
	}
	ro, err := NewAnalyzer(StoreDB(rost), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("analyst: readonly %v", level)
	rw, err := NewAnalyzer(StoreDB(st), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	req := Request{SLO: SLO{Scope: llama}, Window: window(30*time.Minute, time.Hour)}
	got, err := ro.Analyze(ctx, req)
	if err != nil {
		t.Fatalf("the read-only user's analysis: %v", err)
	}
	if got.Reads.SnapshotRows != 0 || !strings.Contains(got.Reads.Direct, "readonly") {
		t.Errorf("read-only user reads %+v, want direct reads naming readonly mode", got.Reads)
	}
	want, err := rw.Analyze(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if want.Reads.SnapshotRows == 0 {
		t.Errorf("the writer made no snapshot: %+v", want.Reads)
	}
	sameAttribution(t, "readonly", got, want)
	sw, err := ro.Sweep(ctx, SweepRequest{Window: req.Window})
	if err != nil {
		t.Fatalf("the read-only user's sweep: %v", err)
	}
	if sw.Reads.Direct == "" || len(sw.Breaches) == 0 {
		t.Errorf("read-only sweep: reads %+v, %d breaches", sw.Reads, len(sw.Breaches))
	}
	// Nothing was attempted that the server refused.
	if err := st.Conn().Exec(ctx, "SYSTEM FLUSH LOGS"); err != nil {
		t.Fatal(err)
	}
	var refused, ran uint64
	if err := st.Conn().QueryRow(ctx, `SELECT countIf(type IN ('ExceptionBeforeStart', 'ExceptionWhileProcessing')), countIf(type = 'QueryFinish')
FROM system.query_log WHERE user = 'analyst' AND current_database = ?`, st.Database()).Scan(&refused, &ran); err != nil {
		t.Fatal(err)
	}
	if refused != 0 || ran == 0 {
		t.Errorf("the read-only user ran %d statements, %d refused", ran, refused)
	}
}

func TestSnapshotColumns(t *testing.T) {
	for expr, want := range map[string][]string{
		"concat(host, '/', pod, '/', engine)":                 {"host", "pod", "engine"},
		"kv_usage_max >= 0.9 OR preemptions_during > 0":       {"kv_usage_max", "preemptions_during"},
		"toFloat64(bitAnd(throttle_reasons, 96) != 0)":        {"throttle_reasons"},
		"pcie_bytes_per_s_max / 1e9 + 2.5e-3 * x_1":           {"pcie_bytes_per_s_max", "x_1"},
		"if(model = 'it''s (x)', a, NOT b) AND c IS NOT NULL": {"model", "a", "b", "c"},
		"": nil,
	} {
		if got := sqlIdentifiers(expr); !slices.Equal(got, want) {
			t.Errorf("sqlIdentifiers(%q) = %q, want %q", expr, got, want)
		}
	}
	a, err := NewAnalyzer(QueryFunc(func(context.Context, string) (Rows, error) { return nil, nil }), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cols := a.snapshotColumns(map[string]string{"namespace": "prod"}, "toFloat64(ttft_ms)")
	for _, c := range []string{"start_ns", "start_time", "host", "pod", "engine", "gpu", "model", "service", "namespace",
		"kv_usage_max", "preemptions_during", "throttle_reasons", "engine_mean_prompt_tokens", "waiting_at_arrival", "ttft_ms"} {
		if !slices.Contains(cols, c) {
			t.Errorf("snapshot columns %v lack %s", cols, c)
		}
	}
	// Not the uid (the snapshot holds its hash), the trace id (looked up
	// for the exemplars alone: resolveExemplars) nor a scope column the
	// scope does not name.
	for _, c := range []string{"e2e_ms", "decode_ms", "attr_keys", "toFloat64", "uid", "trace_id", "service_instance", "source"} {
		if slices.Contains(cols, c) {
			t.Errorf("snapshot columns %v hold %s", cols, c)
		}
	}
}

func TestSnapshotCovers(t *testing.T) {
	h := func(a, b int) Interval { return window(time.Duration(a)*time.Hour, time.Duration(b)*time.Hour) }
	cols := map[string]bool{"service": true, "model": true, "host": true, "pod": true, "engine": true, "gpu": true}
	s := &snapshot{cols: cols, scope: map[string]string{"service": "chat"}, y: "toFloat64(e2e_ms)", finite: true, ivs: []Interval{h(0, 1), h(1, 2)}}
	for _, c := range []struct {
		scope map[string]string
		y     string
		all   bool
		ivs   []Interval
		want  bool
	}{
		{map[string]string{"service": "chat", "model": "m"}, "toFloat64(e2e_ms)", false, []Interval{h(1, 2), h(0, 1)}, true},
		{map[string]string{"service": "chat"}, "toFloat64(e2e_ms)", false, []Interval{window(90*time.Minute, 2*time.Hour)}, true},
		{map[string]string{"model": "m"}, "toFloat64(e2e_ms)", false, []Interval{h(1, 2)}, false},                           // another scope
		{map[string]string{"service": "chat"}, "toFloat64(ttft_ms)", false, []Interval{h(1, 2)}, false},                     // another outcome
		{map[string]string{"service": "chat"}, "toFloat64(e2e_ms)", true, []Interval{h(1, 2)}, false},                       // rows of any outcome
		{map[string]string{"service": "chat"}, "toFloat64(e2e_ms)", false, []Interval{h(1, 3)}, false},                      // later rows
		{map[string]string{"service": "chat", "namespace": "prod"}, "toFloat64(e2e_ms)", false, []Interval{h(1, 2)}, false}, // a column it lacks
	} {
		if got := s.covers(c.scope, c.y, c.all, c.ivs); got != c.want {
			t.Errorf("covers(%v, %s, %v, %v) = %v, want %v", c.scope, c.y, c.all, c.ivs, got, c.want)
		}
	}
}
