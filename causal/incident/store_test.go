package incident

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tailcause/tailcause/causal"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// memIncidents is the in-memory incidentStore: every version written, the
// newest (highest version) of each incident read back, its incident
// decoded from the JSON it was written as, its times at whole seconds in
// UTC as the DateTime columns hold them. It passes the conformance suite
// below that dbIncidents passes on ClickHouse.
type memIncidents struct {
	mu   sync.Mutex
	recs []Record
}

func (m *memIncidents) writeIncident(_ context.Context, rec Record) error {
	if rec.Incident.IncidentID == "" {
		return fmt.Errorf("write incident: empty incident id")
	}
	if rec.State != StateFiring && rec.State != StateResolved {
		return fmt.Errorf("write incident %s: state %q", rec.Incident.IncidentID, rec.State)
	}
	b, err := json.Marshal(rec.Incident)
	if err != nil {
		return err
	}
	var in causal.Incident
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	rec.Incident = in
	rec.OpenedAt, rec.UpdatedAt, rec.ResolvedAt = dt(rec.OpenedAt), dt(rec.UpdatedAt), dt(rec.ResolvedAt)
	if rec.ResolvedAt.Unix() <= 0 {
		rec.ResolvedAt = time.Time{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, rec)
	return nil
}

func (m *memIncidents) loadIncidents(_ context.Context, state string) ([]Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	newest := map[string]Record{}
	for _, r := range m.recs {
		if have, ok := newest[r.Incident.IncidentID]; !ok || r.Version > have.Version {
			newest[r.Incident.IncidentID] = r
		}
	}
	var out []Record
	for _, r := range newest {
		if state == "" || r.State == state {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.Incident.IncidentID, b.Incident.IncidentID) })
	return out, nil
}

// TestIncidentStoreConformance runs one suite on every incidentStore: the
// in-memory one and the ClickHouse one the scheduled mode writes through.
func TestIncidentStoreConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testIncidentStore(t, &memIncidents{}) })
	t.Run("clickhouse", func(t *testing.T) { testIncidentStore(t, dbIncidents{causal.StoreDB(chstoretest.Fresh(t))}) })
}

func testIncidentStore(t *testing.T, s incidentStore) {
	ctx := context.Background()
	T := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	inc := func(id string, cause causal.Cause, host string) causal.Incident {
		return causal.Incident{IncidentID: id, Status: "firing",
			SLO:    causal.SLO{Signal: "e2e_latency", Quantile: 0.99, ThresholdMS: 2500, Scope: map[string]string{"model": "m1"}},
			Window: causal.Interval{Start: T, End: T.Add(10 * time.Minute)}, Baseline: causal.Interval{Start: T.Add(-time.Hour), End: T},
			ObservedP99MS: 4200, BaselineP99MS: 1000, Requests: 3000, TailRequests: 30,
			Culprits: []causal.Culprit{{Rank: 1, Cause: cause, Entity: causal.Entity{Host: host, Engine: "0"}, EffectMS: 900, CI95MS: [2]float64{700, 1100},
				AttributableFraction: 0.6, CounterfactualP99MS: 2000, Health: 0.1, AdjustedFor: []string{"prompt_tokens"},
				Evidence: []string{"kv high"}, ExemplarTraceIDs: []string{"trace-1"}}},
			Method: causal.Method{Estimator: "backdoor-ols-hc3", DAG: "default@1", Version: "test"}}
	}
	opened := T.Add(10*time.Minute + 300*time.Millisecond) // written at whole seconds
	recs := []Record{
		{Incident: inc("inc-a", "kv_cache.preemption", "node-1"), Version: 1, State: StateFiring, OpenedAt: opened, UpdatedAt: opened},
		{Incident: inc("inc-b", "gpu.power_cap", "node-2"), Version: 1, State: StateFiring, OpenedAt: opened, UpdatedAt: opened},
		{Incident: inc("inc-a", "queue.saturation", "node-1"), Version: 2, State: StateFiring, OpenedAt: opened, UpdatedAt: opened.Add(time.Minute)},
		{Incident: inc("inc-c", "gpu.xid_error", "node-3"), Version: 1, State: StateFiring, OpenedAt: opened, UpdatedAt: opened},
		{Incident: inc("inc-c", "gpu.xid_error", "node-3"), Version: 2, State: StateResolved, OpenedAt: opened, UpdatedAt: opened.Add(2 * time.Minute), ResolvedAt: opened.Add(2 * time.Minute)},
	}
	for _, r := range recs { // one write per version, as the lifecycle makes them
		if err := s.writeIncident(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []Record{
		{Incident: causal.Incident{}, Version: 1, State: StateFiring},
		{Incident: inc("inc-x", "gpu.power_cap", "n"), Version: 1, State: "ok"},
	} {
		if err := s.writeIncident(ctx, bad); err == nil {
			t.Errorf("writeIncident(%q, state %q) succeeded, want an error", bad.Incident.IncidentID, bad.State)
		}
	}
	show := func(rs []Record) string {
		var out []string
		for _, r := range rs {
			resolved := "-"
			if !r.ResolvedAt.IsZero() {
				resolved = r.ResolvedAt.UTC().Format("15:04:05.000")
			}
			out = append(out, fmt.Sprintf("%s v%d %s %s %s %s %s", r.Incident.IncidentID, r.Version, r.State,
				r.OpenedAt.UTC().Format("15:04:05.000"), r.UpdatedAt.UTC().Format("15:04:05.000"), resolved, causal.TopCulprit(r.Incident)))
		}
		return strings.Join(out, "; ")
	}
	for _, c := range []struct {
		state, want string
	}{
		{"", "inc-a v2 firing 10:10:00.000 10:11:00.000 - queue.saturation host=node-1,engine=0; " +
			"inc-b v1 firing 10:10:00.000 10:10:00.000 - gpu.power_cap host=node-2,engine=0; " +
			"inc-c v2 resolved 10:10:00.000 10:12:00.000 10:12:00.000 gpu.xid_error host=node-3,engine=0"},
		{StateFiring, "inc-a v2 firing 10:10:00.000 10:11:00.000 - queue.saturation host=node-1,engine=0; " +
			"inc-b v1 firing 10:10:00.000 10:10:00.000 - gpu.power_cap host=node-2,engine=0"},
		{StateResolved, "inc-c v2 resolved 10:10:00.000 10:12:00.000 10:12:00.000 gpu.xid_error host=node-3,engine=0"},
	} {
		got, err := s.loadIncidents(ctx, c.state)
		if err != nil {
			t.Fatalf("loadIncidents(%q): %v", c.state, err)
		}
		if show(got) != c.want {
			t.Errorf("loadIncidents(%q):\n got %s\nwant %s", c.state, show(got), c.want)
		}
	}
	// The document comes back as written.
	got, err := s.loadIncidents(ctx, StateFiring)
	if err != nil || len(got) == 0 {
		t.Fatalf("loadIncidents: %v (%v)", got, err)
	}
	a, _ := json.Marshal(got[0].Incident)
	b, _ := json.Marshal(recs[2].Incident)
	if string(a) != string(b) {
		t.Errorf("inc-a's document\n got %s\nwant %s", a, b)
	}
}
