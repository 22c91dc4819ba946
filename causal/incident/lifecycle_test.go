package incident

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/causal"
	"github.com/tailcause/tailcause/causal/causaltest"
	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/schemas"
)

var llama = map[string]string{"model": "llama-3-8b"}

func window(from, to time.Duration) causal.Interval {
	return causal.Interval{Start: causaltest.Start.Add(from), End: causaltest.Start.Add(to)}
}

func TestLifecycleConfigValidate(t *testing.T) {
	if err := DefaultLifecycleConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := DefaultLifecycleConfig()
	bad.ResolveAfter, bad.Window = 0, 0
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "resolve after") {
		t.Errorf("invalid config accepted: %v", err)
	}
	for _, alpha := range []float64{-0.1, 1, math.NaN()} {
		bad := DefaultLifecycleConfig()
		bad.EntityAlpha = alpha
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "entity alpha") {
			t.Errorf("entity alpha %v accepted: %v", alpha, err)
		}
	}
	for _, m := range []float64{-1, 0.5, math.NaN(), math.Inf(1)} {
		bad := DefaultLifecycleConfig()
		bad.UpdateMargin = m
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "update margin") {
			t.Errorf("update margin %v accepted: %v", m, err)
		}
	}
}

// scenarioStore inserts scenario s into a fresh store and returns the
// store, its causal.DB and an analyzer with the default configuration.
func scenarioStore(ctx context.Context, t *testing.T, s causaltest.Scenario) (*chstore.Store, causal.DB, *causal.Analyzer) {
	t.Helper()
	st := chstoretest.Fresh(t)
	if _, err := causaltest.Insert(ctx, st.Conn(), s, 100_000); err != nil {
		t.Fatal(err)
	}
	db := causal.StoreDB(st)
	a, err := causal.NewAnalyzer(db, causal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return st, db, a
}

// TestLifecycle replays an hour and ten minutes in the scheduled mode: a KV
// fault on one engine (20–32 min), overlapped and then replaced by a
// thermal throttle on two GPUs of other hosts (28–45 min). Incidents open
// for the breaches (the scope against its SLO, engines against their
// peers), name the KV engine first and the throttle later, and every one
// resolves after the faults end; a restarted lifecycle continues the open
// incidents instead of opening new ones.
func TestLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, db, a := scenarioStore(ctx, t, causaltest.Scenario{Seed: 11, Start: causaltest.Start, Duration: 70 * time.Minute, Faults: []causaltest.Fault{
		{Kind: "kv", Host: 1, GPU: 1, From: 20 * time.Minute, To: 32 * time.Minute},
		{Kind: "thermal", Host: 2, GPU: 0, From: 28 * time.Minute, To: 45 * time.Minute, Factor: 0},
		{Kind: "thermal", Host: 3, GPU: 0, From: 28 * time.Minute, To: 45 * time.Minute, Factor: 0},
	}})
	cfg := LifecycleConfig{Window: 8 * time.Minute, Interval: 2 * time.Minute, ResolveAfter: 3, UpdateAfter: 1}
	lc, err := NewLifecycle(a, db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	slo := causal.SLO{Scope: llama, ThresholdMS: 16000}
	kinds := map[string][]string{} // incident id → transitions
	// The top cause of every version written, in order: read from the
	// transitions, since the table keeps only each incident's newest
	// version once ClickHouse merges its parts (ReplacingMergeTree).
	var tops []string
	var lastResolve time.Duration
	for at := 12 * time.Minute; at <= 70*time.Minute; at += cfg.Interval {
		if at == 36*time.Minute {
			// A restart: the new process must continue the open incidents.
			before := lc.Open()
			if lc, err = NewLifecycle(a, db, cfg); err != nil {
				t.Fatal(err)
			}
			if err := lc.Load(ctx); err != nil {
				t.Fatal(err)
			}
			if got := lc.Open(); len(got) == 0 || strings.Join(got, ",") != strings.Join(before, ",") {
				t.Fatalf("after restart: open incidents %v, before %v", got, before)
			}
		}
		trs, err := lc.Evaluate(ctx, slo, causaltest.Start.Add(at))
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range trs {
			if tr.Kind == TransitionNone {
				continue
			}
			in := tr.Record.Incident
			t.Logf("t=%v %-7s %s breach=%+v top=%q", at, tr.Kind, in.IncidentID, in.Breach, causal.TopCulprit(in))
			kinds[in.IncidentID] = append(kinds[in.IncidentID], tr.Kind)
			if len(in.Culprits) > 0 {
				tops = append(tops, string(in.Culprits[0].Cause))
			}
			if tr.Kind == TransitionResolve {
				lastResolve = at
			}
		}
	}
	if lc.OpenCount() != 0 {
		t.Errorf("%d incidents still open at the end: %v", lc.OpenCount(), lc.Open())
	}
	if len(kinds) == 0 || len(kinds) > 4 {
		t.Fatalf("incidents %v: want one per breach (1 to 4)", kinds)
	}
	for id, ks := range kinds {
		if ks[0] != TransitionOpen || ks[len(ks)-1] != TransitionResolve {
			t.Errorf("%s: transitions %v, want open … resolve", id, ks)
		}
	}
	if lastResolve < 45*time.Minute || lastResolve > 45*time.Minute+cfg.Window+time.Duration(cfg.ResolveAfter+2)*cfg.Interval {
		t.Errorf("last incident resolved at %v; the faults ended at 45m", lastResolve)
	}
	recs, err := Load(ctx, db, "")
	if err != nil {
		t.Fatal(err)
	}
	// The first version of the first incident names the KV fault on its
	// engine; some version of some incident names the throttle.
	if len(tops) == 0 || tops[0] != string(schemas.CauseKVPreemption) || !containsString(tops, string(schemas.CauseThermalThrottle)) {
		t.Errorf("top causes by version %v", tops)
	}
	for _, rec := range recs {
		if rec.State != StateResolved || rec.ResolvedAt.IsZero() || rec.Version != uint64(len(kinds[rec.Incident.IncidentID])) {
			t.Errorf("%s: newest version %d state %s; transitions %v", rec.Incident.IncidentID, rec.Version, rec.State, kinds[rec.Incident.IncidentID])
		}
		if !strings.HasPrefix(rec.Incident.IncidentID, "inc-20260314-") {
			t.Errorf("incident id %q", rec.Incident.IncidentID)
		}
		var culpritRows float64
		err = causal.QueryRows(ctx, db, "culprits", "SELECT toFloat64(count()) FROM culprits WHERE incident_id = "+dag.QuoteString(rec.Incident.IncidentID), func(r causal.Rows) error {
			return r.Scan(&culpritRows)
		})
		if err != nil || culpritRows < 1 {
			t.Errorf("%s: %v culprit rows (%v)", rec.Incident.IncidentID, culpritRows, err)
		}
	}
}

// No fault: the scheduled mode over an hour of a healthy fleet opens
// nothing and stores nothing.
func TestLifecycleNoFault(t *testing.T) {
	ctx := context.Background()
	_, db, a := scenarioStore(ctx, t, causaltest.Scenario{Seed: 4, Start: causaltest.Start, Duration: time.Hour})
	lc, err := NewLifecycle(a, db, LifecycleConfig{Window: 10 * time.Minute, Interval: 5 * time.Minute, ResolveAfter: 2})
	if err != nil {
		t.Fatal(err)
	}
	for at := 15 * time.Minute; at <= time.Hour; at += 5 * time.Minute {
		trs, err := lc.Evaluate(ctx, causal.SLO{Scope: llama}, causaltest.Start.Add(at))
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range trs {
			t.Errorf("at %v: %s %+v %+v", at, tr.Kind, tr.Analysis.Incident.Breach, tr.Analysis.Incident.Culprits)
		}
	}
	recs, err := Load(ctx, db, "")
	if err != nil || len(recs) != 0 {
		t.Errorf("%d incidents stored (%v)", len(recs), err)
	}
}

func TestTopChanged(t *testing.T) {
	c := func(cause causal.Cause, gpu string, af float64) causal.Culprit {
		return causal.Culprit{Cause: cause, Entity: causal.Entity{GPU: gpu}, AttributableFraction: af}
	}
	in := func(cs ...causal.Culprit) causal.Incident { return causal.Incident{Culprits: cs} }
	th, kv, q := schemas.CauseThermalThrottle, schemas.CauseKVPreemption, schemas.CauseQueueSaturation
	for _, tc := range []struct {
		name     string
		old, cur causal.Incident
		margin   float64
		want     bool
	}{
		{"one cause, its entities flip", in(c(th, "a", .5), c(th, "b", .4)), in(c(th, "b", .5), c(th, "a", .1)), 1, false},
		{"one cause, another entity", in(c(th, "a", .5)), in(c(th, "b", .5)), 1.5, true},
		{"another cause, the standing one gone", in(c(th, "a", .5)), in(c(kv, "", .5)), 1.5, true},
		{"nothing standing", in(), in(c(kv, "", .5)), 1, true},
		{"no culprit now", in(c(kv, "", .5)), in(), 1, false},
		{"another cause, the standing one within the margin", in(c(kv, "a", .5)), in(c(q, "", .75), c(kv, "a", .51)), 1.5, false},
		{"another cause, the standing one at the margin", in(c(kv, "a", .5)), in(c(q, "", .75), c(kv, "a", .5)), 1.5, false},
		{"another cause, the standing one below the margin", in(c(kv, "a", .5)), in(c(q, "", .75), c(kv, "a", .49)), 1.5, true},
		{"another cause, no margin", in(c(kv, "a", .5)), in(c(q, "", .45), c(kv, "a", .44)), 1, true},
		{"another cause, the standing one's entity is another", in(c(kv, "a", .5)), in(c(q, "", .45), c(kv, "b", .44)), 1.5, true},
	} {
		if got := topChanged(tc.old, tc.cur, tc.margin); got != tc.want {
			t.Errorf("%s: topChanged(%v, %v, %v) = %v", tc.name, causal.TopCulprit(tc.old), causal.TopCulprit(tc.cur), tc.margin, got)
		}
	}
}

// Hysteresis: a new top culprit is written only once it held for
// UpdateAfter evaluations; alternating culprits never re-page.
func TestLifecycleHysteresis(t *testing.T) {
	st := chstoretest.Fresh(t)
	a, err := causal.NewAnalyzer(causal.StoreDB(st), causal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	lc, err := NewLifecycle(a, causal.StoreDB(st), LifecycleConfig{Window: time.Minute, Interval: time.Minute, ResolveAfter: 3, UpdateAfter: 2})
	if err != nil {
		t.Fatal(err)
	}
	doc := func(c causal.Cause) *causal.Analysis {
		return &causal.Analysis{Incident: causal.Incident{IncidentID: "inc-x", Status: causal.StatusFiring, SLO: causal.SLO{Signal: "e2e_latency", Quantile: 0.99, Scope: llama},
			Window: window(0, time.Minute), Baseline: window(0, 0), Method: causal.Method{Estimator: causal.Estimator, DAG: "default@1", Version: "test"},
			Culprits: []causal.Culprit{{Rank: 1, Cause: c, Entity: causal.Entity{Pod: "a"}, AdjustedFor: []string{}, Evidence: []string{}, ExemplarTraceIDs: []string{}}}}}
	}
	kv, q := schemas.CauseKVPreemption, schemas.CauseQueueSaturation
	var kinds []string
	for _, c := range []causal.Cause{kv, q, kv, q, kv, q, q, q} {
		tr, err := lc.apply(context.Background(), "k", doc(c), causaltest.Start)
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, tr.Kind)
	}
	want := []string{TransitionOpen, "", "", "", "", "", TransitionUpdate, ""}
	if strings.Join(kinds, ",") != strings.Join(want, ",") {
		t.Errorf("transitions %q, want %q: alternating culprits never re-page, one that holds twice does", kinds, want)
	}
}

// UpdateMargin: an incident keeps its top culprit while it explains at
// least 1/UpdateMargin of what the new top explains, however long the new
// one holds; once it falls below, the new top is written after
// UpdateAfter evaluations.
func TestLifecycleUpdateMargin(t *testing.T) {
	kv := causal.Culprit{Cause: schemas.CauseKVPreemption, Entity: causal.Entity{Host: "h1", Pod: "p1", Engine: "0", Model: "llama"}}
	miss := causal.Culprit{Cause: schemas.CausePrefixMiss, Entity: causal.Entity{Model: "llama"}}
	doc := func(top, second causal.Culprit, topAF, secondAF float64) *causal.Analysis {
		top.AttributableFraction, second.AttributableFraction = topAF, secondAF
		return &causal.Analysis{Incident: causal.Incident{IncidentID: "inc-m", Status: causal.StatusFiring, SLO: causal.SLO{Signal: "e2e_latency", Quantile: 0.99, Scope: llama},
			Window: window(0, time.Minute), Method: causal.Method{Estimator: causal.Estimator, DAG: "default@1", Version: "test"}, Culprits: []causal.Culprit{top, second}}}
	}
	for _, tc := range []struct {
		margin float64
		want   string
	}{
		{1.5, "open,-,-,-,-,update"},
		{1, "open,-,update,-,-,-"},
	} {
		l := &Lifecycle{store: &memIncidents{}, cfg: LifecycleConfig{UpdateAfter: 2, UpdateMargin: tc.margin}, log: slog.New(slog.DiscardHandler), open: map[string]*openIncident{}}
		var kinds []string
		for i, an := range []*causal.Analysis{
			doc(kv, miss, .5, .3),
			doc(miss, kv, .45, .4), // within the margin: the pod's KV stands
			doc(miss, kv, .45, .35),
			doc(miss, kv, .5, .34),
			doc(miss, kv, .6, .3), // below it: the model's misses, held twice
			doc(miss, kv, .6, .3),
		} {
			tr, err := l.apply(context.Background(), "k", an, causaltest.Start.Add(time.Duration(i)*time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			k := tr.Kind
			if k == "" {
				k = "-"
			}
			kinds = append(kinds, k)
		}
		if got := strings.Join(kinds, ","); got != tc.want {
			t.Errorf("margin %v: transitions %s, want %s", tc.margin, got, tc.want)
		}
	}
}

func containsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// An engine's breach that grows into its model's (or a model's that
// narrows to one engine) with the same top culprit continues the open
// incident; another culprit, another engine, or an incident found again
// in the same evaluation does not.
func TestLifecycleCarriesAcrossLevels(t *testing.T) {
	slo := causal.SLO{Scope: llama}
	pod := causal.Entity{Host: "h1", Pod: "p1", Engine: "0"}
	kv := causal.Culprit{Cause: schemas.CauseKVPreemption, Entity: causal.Entity{Host: "h1", Pod: "p1", Engine: "0", Model: "llama"}}
	an := func(w *causal.Where, cs ...causal.Culprit) *causal.Analysis {
		return &causal.Analysis{Incident: causal.Incident{Breach: w, Culprits: cs}}
	}
	engine := &causal.Where{Level: causal.LevelEngine, Entity: pod}
	other := &causal.Where{Level: causal.LevelEngine, Entity: causal.Entity{Host: "h2", Pod: "p2", Engine: "0"}}
	host := &causal.Where{Level: causal.LevelHost, Entity: causal.Entity{Host: "h1"}}
	scope := &causal.Where{Level: causal.LevelScope}
	open := func(w *causal.Where, cs ...causal.Culprit) *Lifecycle {
		l := &Lifecycle{open: map[string]*openIncident{}}
		l.open[breachKey(slo, w)] = &openIncident{rec: Record{Incident: causal.Incident{Breach: w, Culprits: cs}}}
		return l
	}
	cases := []struct {
		name     string
		was, now *causal.Where
		cs       []causal.Culprit
		seen     bool
		want     bool
	}{
		{"engine → scope, same culprit", engine, scope, []causal.Culprit{kv}, false, true},
		{"scope → engine, same culprit", scope, engine, []causal.Culprit{kv}, false, true},
		{"engine → its host", engine, host, []causal.Culprit{kv}, false, true},
		{"engine → another engine", engine, other, []causal.Culprit{kv}, false, false},
		{"another top culprit", engine, scope, []causal.Culprit{{Cause: schemas.CauseQueueSaturation, Entity: causal.Entity{Model: "llama"}}}, false, false},
		{"the open one found again too", engine, scope, []causal.Culprit{kv}, true, false},
	}
	for _, c := range cases {
		l := open(c.was, kv)
		seen := map[string]bool{breachKey(slo, c.now): true}
		if c.seen {
			seen[breachKey(slo, c.was)] = true
		}
		got := l.carried(slo, breachKey(slo, c.now), an(c.now, c.cs...), seen)
		if (got != "") != c.want {
			t.Errorf("%s: carried %q, want %v", c.name, got, c.want)
		}
	}
}

// roundFleet is the parallel-round tests' fleet: sweepFleet's six models
// over an hour, the faults from 30 to 45 minutes, so that the rounds open
// incidents, find them again and resolve them.
func roundFleet() []causaltest.Scenario {
	f := causaltest.Fleet()
	for i := range f {
		f[i].FaultTo = 45 * time.Minute
	}
	return f
}

// roundTrace is what a replay of the scheduled mode did: every round's
// transitions (kind, the version written, the document analyzed), and
// every evaluation OnEvaluation saw (scope, error), in order.
type roundTrace struct {
	transitions []string
	evaluations []string
}

// replayRounds runs the scheduled mode over the fleet in db, a round every
// 4 minutes from 26 to 58 (a 6-minute window: the faults' incidents open,
// and resolve after two rounds without their breach), with the scopes
// swept parallel at once and the incidents written to store; slos lists
// each round's scopes.
func replayRounds(ctx context.Context, t *testing.T, db causal.DB, store causal.DB, parallel int, slos func(now time.Time) []causal.SLO) roundTrace {
	t.Helper()
	cfg := causal.DefaultConfig()
	cfg.Version, cfg.SweepParallel = "test", parallel
	a, err := causal.NewAnalyzer(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := NewLifecycle(a, store, LifecycleConfig{Window: 6 * time.Minute, Interval: 4 * time.Minute, ResolveAfter: 2, UpdateAfter: 1})
	if err != nil {
		t.Fatal(err)
	}
	var tr roundTrace
	lc.OnEvaluation(func(ev Evaluation) {
		e := causal.ScopeString(ev.SLO.Scope) + " " + ev.SLO.Signal
		if ev.Err != nil {
			e += " error: " + ev.Err.Error()
		}
		tr.evaluations = append(tr.evaluations, e)
	})
	for at := 26 * time.Minute; at <= 58*time.Minute; at += 4 * time.Minute {
		now := causaltest.Start.Add(at)
		for _, x := range lc.Round(ctx, func(context.Context) ([]causal.SLO, error) { return slos(now), nil }, now) {
			doc := map[string]any{"at": at.String(), "kind": x.Kind, "record": x.Record}
			if x.Analysis != nil {
				doc["analysis"] = x.Analysis.Incident
			}
			b, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			tr.transitions = append(tr.transitions, string(b))
		}
	}
	return tr
}

// roundsReplayed is the number of rounds replayRounds runs.
const roundsReplayed = 9

// storedIncidents is what the incidents and culprits tables of db hold,
// each row as ClickHouse prints it, in key order: the newest version of
// every incident (the table keeps only it once merged: FINAL), and every
// culprit row of every version.
func storedIncidents(ctx context.Context, t *testing.T, db causal.DB) []string {
	t.Helper()
	var out []string
	for _, q := range []string{
		"SELECT toString(tuple(*)) AS r FROM incidents FINAL ORDER BY incident_id",
		"SELECT toString(tuple(*)) AS r FROM culprits ORDER BY r",
	} {
		err := causal.QueryRows(ctx, db, "stored", q, func(r causal.Rows) error {
			var s string
			if err := r.Scan(&s); err != nil {
				return err
			}
			out = append(out, s)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestRoundParallelMatchesSequential replays the scheduled mode over six
// models (three faults from 30 to 45 minutes) with the scopes swept one at
// a time and four at once: the same transitions in the same order (every
// version written, and the document it was decided on), the same
// evaluations, and the same rows in the incidents and culprits tables,
// byte for byte. Run with -race.
func TestRoundParallelMatchesSequential(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	st := chstoretest.Fresh(t)
	for _, s := range roundFleet() {
		if _, err := causaltest.Insert(ctx, st.Conn(), s, 100_000); err != nil {
			t.Fatal(err)
		}
	}
	db := causal.StoreDB(st)
	slos := func(now time.Time) []causal.SLO {
		found, more, err := causal.DiscoverScopes(ctx, db, "requests", "model", now.Add(-6*time.Minute), now, 0)
		if err != nil || more {
			t.Fatalf("discover scopes: %v (more %v)", err, more)
		}
		var out []causal.SLO
		for _, sc := range found {
			out = append(out, causal.SLO{Scope: sc})
		}
		return out
	}
	var traces []roundTrace
	var stored [][]string
	for _, parallel := range []int{1, 4} {
		store := causal.StoreDB(chstoretest.Fresh(t))
		t0 := time.Now()
		traces = append(traces, replayRounds(ctx, t, db, store, parallel, slos))
		stored = append(stored, storedIncidents(ctx, t, store))
		t.Logf("parallel %d: %d evaluations, %d transitions, %d rows stored, %v", parallel, len(traces[len(traces)-1].evaluations),
			len(traces[len(traces)-1].transitions), len(stored[len(stored)-1]), time.Since(t0).Round(time.Millisecond))
	}
	seq, par := traces[0], traces[1]
	kinds := map[string]int{}
	for _, x := range seq.transitions {
		var d struct{ Kind string }
		if err := json.Unmarshal([]byte(x), &d); err != nil {
			t.Fatal(err)
		}
		kinds[d.Kind]++
	}
	t.Logf("transitions by kind: %v", kinds)
	if kinds[TransitionOpen] < 3 || kinds[TransitionResolve] < 3 {
		t.Fatalf("transitions by kind %v: want at least the three faults' incidents opened and resolved", kinds)
	}
	if len(seq.evaluations) != roundsReplayed*6 {
		t.Errorf("%d evaluations, want %d rounds of 6 scopes", len(seq.evaluations), roundsReplayed)
	}
	same := func(what string, a, b []string) {
		t.Helper()
		if len(a) != len(b) {
			t.Errorf("%s: %d one at a time, %d four at once", what, len(a), len(b))
		}
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				t.Errorf("%s %d differs:\n%s", what, i, causaltest.FirstDiff(a[i], b[i]))
				return
			}
		}
	}
	same("transition", seq.transitions, par.transitions)
	same("evaluation", seq.evaluations, par.evaluations)
	same("stored row", stored[0], stored[1])
}

// A scope whose evaluation fails (a signal no outcome of the DAG measures:
// its sweep fails after its window was sized), second of three, is
// reported and logged, and the scopes before and after it are evaluated
// as in a round without it; one at a time and four at once alike.
func TestRoundFailingScope(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	st := chstoretest.Fresh(t)
	fleet := roundFleet()[1:3] // the long-prompt shift and the KV fault
	for _, s := range fleet {
		if _, err := causaltest.Insert(ctx, st.Conn(), s, 100_000); err != nil {
			t.Fatal(err)
		}
	}
	db := causal.StoreDB(st)
	scopes := func(bad bool) func(time.Time) []causal.SLO {
		return func(time.Time) []causal.SLO {
			var out []causal.SLO
			for i, s := range fleet {
				out = append(out, causal.SLO{Scope: map[string]string{"model": s.Model}})
				if bad && i == 0 {
					out = append(out, causal.SLO{Signal: "no_such_signal", Scope: map[string]string{"model": fleet[1].Model}})
				}
			}
			return out
		}
	}
	want := replayRounds(ctx, t, db, causal.StoreDB(chstoretest.Fresh(t)), 1, scopes(false))
	if len(want.transitions) == 0 {
		t.Fatal("no transitions without the failing scope")
	}
	for _, parallel := range []int{1, 4} {
		got := replayRounds(ctx, t, db, causal.StoreDB(chstoretest.Fresh(t)), parallel, scopes(true))
		if strings.Join(got.transitions, "\n") != strings.Join(want.transitions, "\n") {
			t.Errorf("parallel %d: the transitions differ from a round without the failing scope (%d, want %d)", parallel, len(got.transitions), len(want.transitions))
		}
		var failed, fine []string
		for i, e := range got.evaluations {
			if strings.Contains(e, " error: ") {
				if i%3 != 1 || !strings.Contains(e, "no_such_signal") {
					t.Errorf("parallel %d: evaluation %d failed: %s", parallel, i, e)
				}
				failed = append(failed, e)
				continue
			}
			fine = append(fine, e)
		}
		if len(failed) != roundsReplayed || strings.Join(fine, "\n") != strings.Join(want.evaluations, "\n") {
			t.Errorf("parallel %d: %d evaluations failed (want one a round, %d); the others %d, want %d in the same order", parallel, len(failed), roundsReplayed, len(fine), len(want.evaluations))
		}
	}
}

// When ctx ends during a round, Round applies no later scope, and
// returns once its running sweeps have: no goroutine is left.
func TestRoundCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st := chstoretest.Fresh(t)
	var slos []causal.SLO
	for i := range 12 {
		s := causaltest.Scenario{Seed: uint64(40 + i), Start: causaltest.Start, Duration: 20 * time.Minute, Hosts: 2, GPUs: 2, RatePerS: 3, Model: fmt.Sprintf("m-%02d", i)}
		if _, err := causaltest.Insert(ctx, st.Conn(), s, 100_000); err != nil {
			t.Fatal(err)
		}
		slos = append(slos, causal.SLO{Scope: map[string]string{"model": s.Model}})
	}
	cfg := causal.DefaultConfig()
	cfg.SweepParallel = 4
	a, err := causal.NewAnalyzer(causal.StoreDB(st), cfg)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := NewLifecycle(a, causal.StoreDB(st), LifecycleConfig{Window: 10 * time.Minute, Interval: time.Minute, ResolveAfter: 2})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	var seen []string
	lc.OnEvaluation(func(ev Evaluation) {
		seen = append(seen, ev.SLO.Scope["model"])
		if ev.Err != nil {
			t.Errorf("evaluation of %s: %v", ev.SLO.Scope["model"], ev.Err)
		}
		stop()
	})
	lc.Round(rctx, func(context.Context) ([]causal.SLO, error) { return slos, nil }, causaltest.Start.Add(20*time.Minute))
	if len(seen) != 1 || seen[0] != "m-00" {
		t.Errorf("evaluations applied %v, want only the first (m-00) before ctx ended", seen)
	}
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "(*Lifecycle).Round.func") {
			t.Errorf("a goroutine of the round still runs after it returned:\n%s", g)
		}
	}
}

// BenchmarkRoundParallel measures one scheduled round over 40 small
// models (two hosts of two engines each, 3 requests per second, 20
// minutes: a 10-minute window and its preceding baseline; 144k rows in
// all; a degraded engine in every tenth model, so the round opens
// incidents), with the scopes swept one at a time and four at once, on
// the same data in the same run; parallel=4 reports its wall time over
// parallel=1's (x-sequential). Each round runs on a fresh lifecycle (no
// incident open), so every iteration does the same work. Run with
// -benchtime=1x (or a few).
func BenchmarkRoundParallel(b *testing.B) {
	st := chstoretest.Fresh(b)
	ctx := context.Background()
	const models = 40
	var slos []causal.SLO
	for i := range models {
		s := causaltest.Scenario{Seed: uint64(200 + i), Start: causaltest.Start, Duration: 20 * time.Minute, Hosts: 2, GPUs: 2, RatePerS: 3, Model: fmt.Sprintf("m-%03d", i), FaultFrom: 10 * time.Minute}
		if i%10 == 0 {
			s.Faults = []causaltest.Fault{{Kind: "degraded", Host: 1, GPU: 1, Factor: 3}}
		}
		if _, err := causaltest.Insert(ctx, st.Conn(), s, 100_000); err != nil {
			b.Fatal(err)
		}
		slos = append(slos, causal.SLO{Scope: map[string]string{"model": s.Model}})
	}
	db := causal.StoreDB(st)
	now := causaltest.Start.Add(20 * time.Minute)
	var seq time.Duration
	for _, parallel := range []int{1, 4} {
		b.Run(fmt.Sprintf("parallel=%d", parallel), func(b *testing.B) {
			cfg := causal.DefaultConfig()
			cfg.SweepParallel = parallel
			a, err := causal.NewAnalyzer(db, cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var opened, queries, failed int
			for b.Loop() {
				lc, err := NewLifecycle(a, db, LifecycleConfig{Window: 10 * time.Minute, Interval: time.Minute, ResolveAfter: 2})
				if err != nil {
					b.Fatal(err)
				}
				opened, queries, failed = 0, 0, 0
				lc.OnEvaluation(func(ev Evaluation) {
					queries += ev.Queries
					if ev.Err != nil {
						failed++
					}
				})
				for _, tr := range lc.Round(ctx, func(context.Context) ([]causal.SLO, error) { return slos, nil }, now) {
					if tr.Kind == TransitionOpen {
						opened++
					}
				}
			}
			if failed > 0 {
				b.Fatalf("%d evaluations failed", failed)
			}
			perOp := b.Elapsed() / time.Duration(b.N)
			b.ReportMetric(float64(queries), "queries/op")
			b.ReportMetric(float64(opened), "opened/op")
			b.ReportMetric(float64(models), "scopes")
			if parallel == 1 {
				seq = perOp
			} else if seq > 0 {
				b.ReportMetric(float64(perOp)/float64(seq), "x-sequential")
			}
		})
	}
}

// A new breach opens its incident only once it has been found in
// ConfirmAfter evaluations of its scope in a row: one found once (a chance
// crossing of its level) opens nothing, and its count starts over when an
// evaluation does not find it; one that continues an open incident needs
// no confirmation. Too few requests keeps the count.
func TestLifecycleConfirm(t *testing.T) {
	slo := causal.SLO{Signal: "e2e_latency", Quantile: 0.99, Scope: llama}
	pod := &causal.Where{Level: causal.LevelEngine, Entity: causal.Entity{Host: "h1", Pod: "p1", Engine: "0"}}
	breach := &causal.Analysis{Incident: causal.Incident{IncidentID: "inc-p1", Status: causal.StatusFiring, SLO: slo, Breach: pod,
		Window: window(0, time.Minute), Method: causal.Method{Estimator: causal.Estimator, DAG: "default@1", Version: "test"},
		Culprits: []causal.Culprit{{Rank: 1, Cause: schemas.CauseKVPreemption, Entity: causal.Entity{Host: "h1", Pod: "p1", Engine: "0"}, AdjustedFor: []string{}, Evidence: []string{}, ExemplarTraceIDs: []string{}}}}}
	found := scopeSweep{sw: &causal.SweepResult{Breaches: []*causal.Analysis{breach}}}
	none := scopeSweep{sw: &causal.SweepResult{}}
	few := scopeSweep{sw: &causal.SweepResult{Insufficient: []map[string]string{llama}}}
	l := &Lifecycle{store: &memIncidents{}, cfg: LifecycleConfig{ConfirmAfter: 2, ResolveAfter: 2, UpdateAfter: 1}, log: slog.New(slog.DiscardHandler),
		open: map[string]*openIncident{}, confirming: map[string]int{}}
	var kinds []string
	for i, s := range []scopeSweep{found, none, found, few, found, found, none, found, none, none} {
		trs, err := l.decide(context.Background(), slo, s, causaltest.Start.Add(time.Duration(i)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		k := "-" // nothing written: no transition, or TransitionNone
		for _, tr := range trs {
			if tr.Kind != TransitionNone {
				k = tr.Kind
			}
		}
		kinds = append(kinds, k)
	}
	want := []string{"-", "-", "-", "-", TransitionOpen, "-", "-", "-", "-", TransitionResolve}
	if strings.Join(kinds, ",") != strings.Join(want, ",") {
		t.Errorf("transitions %q, want %q", kinds, want)
	}
	if len(l.confirming) != 0 {
		t.Errorf("breaches still counted after the incident resolved: %v", l.confirming)
	}
}

// The detector tests entity breaches at its own level (EntityAlpha), not
// the analyzer's: one slow pod among 16 (p ~1e-13 over the 8 minutes
// judged) opens an incident at the analyzer's level and at the default
// detector level, and none at a level below its evidence.
func TestLifecycleEntityAlpha(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, db, a := scenarioStore(ctx, t, causaltest.Scenario{Seed: 11, Start: causaltest.Start, Duration: time.Hour, Hosts: 8, GPUs: 2, RatePerS: 40,
		Faults: []causaltest.Fault{{Kind: "degraded", Host: 5, GPU: 0, From: 20 * time.Minute, Factor: 1.6}}})
	pod := causaltest.PodName(5, 0)
	for _, tc := range []struct {
		alpha float64
		open  bool
	}{{0, true}, {DefaultLifecycleConfig().EntityAlpha, true}, {1e-30, false}} {
		cfg := LifecycleConfig{Window: 8 * time.Minute, Interval: time.Minute, ResolveAfter: 2, UpdateAfter: 1, EntityAlpha: tc.alpha}
		lc, err := NewLifecycle(a, db, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := lc.an.Config().EntityAlpha; tc.alpha > 0 && got != tc.alpha {
			t.Errorf("alpha %g: the lifecycle's analyzer tests at %g", tc.alpha, got)
		}
		trs, err := lc.Evaluate(ctx, causal.SLO{Scope: llama}, causaltest.Start.Add(30*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		var opened []string
		for _, tr := range trs {
			if tr.Kind == TransitionOpen {
				b := tr.Analysis.Incident.Breach
				opened = append(opened, b.Level+" "+b.Entity.Pod)
			}
		}
		want := []string(nil)
		if tc.open {
			want = []string{causal.LevelEngine + " " + pod}
		}
		if strings.Join(opened, ",") != strings.Join(want, ",") {
			t.Errorf("alpha %g: opened %q, want %q", tc.alpha, opened, want)
		}
		if err := st.Conn().Exec(ctx, "TRUNCATE TABLE incidents"); err != nil {
			t.Fatal(err)
		}
	}
	if a.Config().EntityAlpha != causal.DefaultConfig().EntityAlpha {
		t.Errorf("NewLifecycle changed the analyzer it was given: alpha %g", a.Config().EntityAlpha)
	}
}
