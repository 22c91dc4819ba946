package causal

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
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
// thermal throttle on another GPU (28–45 min). One incident must open,
// change its top culprit once the throttle dominates, and resolve after
// the P99 is back under the SLO for three evaluations; a restarted
// lifecycle continues the same incident.
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
	cfg := LifecycleConfig{Window: 8 * time.Minute, Interval: 2 * time.Minute, ResolveAfter: 3}
	lc, err := NewLifecycle(a, db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	slo := SLO{Scope: llama, ThresholdMS: 16000}
	var kinds []string
	var resolvedAt time.Duration
	for at := 12 * time.Minute; at <= 70*time.Minute; at += cfg.Interval {
		if at == 36*time.Minute {
			// A restart: the new process must continue the open incident.
			if lc, err = NewLifecycle(a, db, cfg); err != nil {
				t.Fatal(err)
			}
			if err := lc.Load(ctx); err != nil {
				t.Fatal(err)
			}
			if len(lc.Open()) != 1 {
				t.Fatalf("after restart: open incidents %v", lc.Open())
			}
		}
		tr, err := lc.Evaluate(ctx, slo, synthStart.Add(at))
		if err != nil {
			t.Fatal(err)
		}
		an := tr.Analysis.Incident
		t.Logf("t=%v %-7s status=%s P99=%.0f top=%q", at, tr.Kind, an.Status, an.ObservedP99MS, TopCulprit(an))
		if want := 1; tr.Kind != TransitionNone {
			if tr.Kind == TransitionResolve {
				want = 0
			}
			if lc.OpenCount() != want {
				t.Errorf("t=%v %s: %d incidents open, want %d", at, tr.Kind, lc.OpenCount(), want)
			}
		}
		if tr.Kind != TransitionNone {
			kinds = append(kinds, tr.Kind)
			if tr.Kind == TransitionResolve {
				resolvedAt = at
			}
		}
	}
	recs, err := LoadIncidents(ctx, db, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("%d incidents, want 1", len(recs))
	}
	rec := recs[0]
	if rec.State != StateResolved || rec.ResolvedAt.IsZero() || rec.Version != uint64(len(kinds)) {
		t.Errorf("newest version %d state %s resolved at %v; transitions %v", rec.Version, rec.State, rec.ResolvedAt, kinds)
	}
	if kinds[0] != TransitionOpen || kinds[len(kinds)-1] != TransitionResolve || len(kinds) < 3 || len(kinds) > 6 {
		t.Errorf("transitions %v: want open, update(s), resolve", kinds)
	}
	if resolvedAt < 45*time.Minute+cfg.Window || resolvedAt > 45*time.Minute+cfg.Window+time.Duration(cfg.ResolveAfter+2)*cfg.Interval {
		t.Errorf("resolved at %v; the fault ended at 45m", resolvedAt)
	}
	// Every version is stored with its culprits; the first names the KV
	// fault, a later one the throttle.
	var tops []string
	err = queryRows(ctx, db, "versions", "SELECT top_cause FROM incidents ORDER BY version", func(r Rows) error {
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
	if len(tops) == 0 || tops[0] != string(CauseKVPreemption) || !containsString(tops, string(CauseThermalThrottle)) {
		t.Errorf("top causes by version %v", tops)
	}
	var culpritRows float64
	err = queryRows(ctx, db, "culprits", "SELECT toFloat64(count()) FROM culprits WHERE incident_id = "+QuoteString(rec.Incident.IncidentID), func(r Rows) error {
		return r.Scan(&culpritRows)
	})
	if err != nil || culpritRows < float64(len(tops)) {
		t.Errorf("%v culprit rows for %d versions (%v)", culpritRows, len(tops), err)
	}
	if !strings.HasPrefix(rec.Incident.IncidentID, "inc-20260314-") {
		t.Errorf("incident id %q", rec.Incident.IncidentID)
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
