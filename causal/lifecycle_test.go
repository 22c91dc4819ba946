package causal

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/schemas"
)

func TestLifecycleConfigValidate(t *testing.T) {
	if err := DefaultLifecycleConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := DefaultLifecycleConfig()
	bad.ResolveAfter, bad.Window = 0, 0
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "resolve after") {
		t.Errorf("invalid config accepted: %v", err)
	}
}

// TestLifecycle replays an hour and ten minutes in the scheduled mode: a KV
// fault on one engine (20–32 min), overlapped and then replaced by a
// thermal throttle on two GPUs of other hosts (28–45 min). Incidents open
// for the breaches (the scope against its SLO, engines against their
// peers), name the KV engine first and the throttle later, and every one
// resolves after the faults end; a restarted lifecycle continues the open
// incidents instead of opening new ones.
func TestLifecycle(t *testing.T) {
	st := chstoretest.Fresh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := synthScenario{Seed: 11, Start: synthStart, Duration: 70 * time.Minute, Faults: []synthFault{
		{Kind: "kv", Host: 1, GPU: 1, From: 20 * time.Minute, To: 32 * time.Minute},
		{Kind: "thermal", Host: 2, GPU: 0, From: 28 * time.Minute, To: 45 * time.Minute, Factor: 0},
		{Kind: "thermal", Host: 3, GPU: 0, From: 28 * time.Minute, To: 45 * time.Minute, Factor: 0},
	}}
	if _, err := insertSynth(ctx, st.Conn(), s, 100_000); err != nil {
		t.Fatal(err)
	}
	db := StoreDB(st)
	a, err := NewAnalyzer(db, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := LifecycleConfig{Window: 8 * time.Minute, Interval: 2 * time.Minute, ResolveAfter: 3, UpdateAfter: 1}
	lc, err := NewLifecycle(a, db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	slo := SLO{Scope: llama, ThresholdMS: 16000}
	kinds := map[string][]string{} // incident id → transitions
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
		trs, err := lc.Evaluate(ctx, slo, synthStart.Add(at))
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range trs {
			if tr.Kind == TransitionNone {
				continue
			}
			in := tr.Record.Incident
			t.Logf("t=%v %-7s %s breach=%+v top=%q", at, tr.Kind, in.IncidentID, in.Breach, TopCulprit(in))
			kinds[in.IncidentID] = append(kinds[in.IncidentID], tr.Kind)
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
	recs, err := LoadIncidents(ctx, db, "")
	if err != nil {
		t.Fatal(err)
	}
	// The first version of the first incident names the KV fault on its
	// engine; some version of some incident names the throttle.
	var tops []string
	err = queryRows(ctx, db, "versions", "SELECT top_cause FROM incidents ORDER BY opened_at, version", func(r Rows) error {
		var c string
		if err := r.Scan(&c); err != nil {
			return err
		}
		tops = append(tops, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
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
		err = queryRows(ctx, db, "culprits", "SELECT toFloat64(count()) FROM culprits WHERE incident_id = "+dag.QuoteString(rec.Incident.IncidentID), func(r Rows) error {
			return r.Scan(&culpritRows)
		})
		if err != nil || culpritRows < 1 {
			t.Errorf("%s: %v culprit rows (%v)", rec.Incident.IncidentID, culpritRows, err)
		}
	}
}

// Hysteresis: a new top culprit is written only once it held for
// UpdateAfter evaluations; alternating culprits never re-page.
func TestLifecycleHysteresis(t *testing.T) {
	st := chstoretest.Fresh(t)
	a, err := NewAnalyzer(StoreDB(st), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	lc, err := NewLifecycle(a, StoreDB(st), LifecycleConfig{Window: time.Minute, Interval: time.Minute, ResolveAfter: 3, UpdateAfter: 2})
	if err != nil {
		t.Fatal(err)
	}
	doc := func(c Cause) *Analysis {
		return &Analysis{Incident: Incident{IncidentID: "inc-x", Status: StatusFiring, SLO: SLO{Signal: "e2e_latency", Quantile: 0.99, Scope: llama},
			Window: window(0, time.Minute), Baseline: window(0, 0), Method: Method{Estimator: Estimator, DAG: "default@1", Version: "test"},
			Culprits: []Culprit{{Rank: 1, Cause: c, Entity: Entity{Pod: "a"}, AdjustedFor: []string{}, Evidence: []string{}, ExemplarTraceIDs: []string{}}}}}
	}
	kv, q := schemas.CauseKVPreemption, schemas.CauseQueueSaturation
	var kinds []string
	for _, c := range []Cause{kv, q, kv, q, kv, q, q, q} {
		tr, err := lc.apply(context.Background(), "k", doc(c), synthStart)
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
	slo := SLO{Scope: llama}
	pod := Entity{Host: "h1", Pod: "p1", Engine: "0"}
	kv := Culprit{Cause: schemas.CauseKVPreemption, Entity: Entity{Host: "h1", Pod: "p1", Engine: "0", Model: "llama"}}
	an := func(w *Where, cs ...Culprit) *Analysis {
		return &Analysis{Incident: Incident{Breach: w, Culprits: cs}}
	}
	engine := &Where{Level: LevelEngine, Entity: pod}
	other := &Where{Level: LevelEngine, Entity: Entity{Host: "h2", Pod: "p2", Engine: "0"}}
	host := &Where{Level: LevelHost, Entity: Entity{Host: "h1"}}
	scope := &Where{Level: LevelScope}
	open := func(w *Where, cs ...Culprit) *Lifecycle {
		l := &Lifecycle{open: map[string]*openIncident{}}
		l.open[breachKey(slo, w)] = &openIncident{rec: IncidentRecord{Incident: Incident{Breach: w, Culprits: cs}}}
		return l
	}
	cases := []struct {
		name     string
		was, now *Where
		cs       []Culprit
		seen     bool
		want     bool
	}{
		{"engine → scope, same culprit", engine, scope, []Culprit{kv}, false, true},
		{"scope → engine, same culprit", scope, engine, []Culprit{kv}, false, true},
		{"engine → its host", engine, host, []Culprit{kv}, false, true},
		{"engine → another engine", engine, other, []Culprit{kv}, false, false},
		{"another top culprit", engine, scope, []Culprit{{Cause: schemas.CauseQueueSaturation, Entity: Entity{Model: "llama"}}}, false, false},
		{"the open one found again too", engine, scope, []Culprit{kv}, true, false},
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
