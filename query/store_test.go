package query

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// TestIncidentStoreConformance runs one suite on every incidentStore: the
// in-memory one and the ClickHouse one the server uses. A rule stated on
// the interface that either breaks fails here.
func TestIncidentStoreConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		m := &memIncidents{}
		testIncidentStore(t, m, m.insert)
	})
	t.Run("clickhouse", func(t *testing.T) {
		st := chstoretest.Fresh(t)
		testIncidentStore(t, sqlIncidents{ClickHouse(st)}, func(rows [][]any) {
			t.Helper()
			if err := st.Insert(context.Background(), incidentCols, rows); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// testIncidentStore checks s, whose table insert writes (rows in
// incidentCols order).
func testIncidentStore(t *testing.T, s incidentStore, insert func([][]any)) {
	ctx := context.Background()
	T := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	zero := time.Unix(0, 0).UTC()
	type inc struct {
		id               string
		version          uint64
		status, top      string
		scope            map[string]string
		opened           time.Time
		winStart, winEnd time.Time
		resolved         time.Time
	}
	row := func(i inc) []any {
		var keys, vals []string
		for _, k := range []string{"model", "service"} {
			if v, ok := i.scope[k]; ok {
				keys, vals = append(keys, k), append(vals, v)
			}
		}
		return []any{i.id, i.version, i.status, "scope of " + i.id, keys, vals, "e2e_latency", 0.99, 2500.0,
			i.winStart, i.winEnd, i.winStart.Add(-time.Hour), i.winStart, i.opened, i.opened.Add(time.Duration(i.version) * time.Minute), i.resolved,
			4000.0 + float64(i.version), 1000.0, uint64(300) + i.version, uint64(3), i.top, "host=node-" + i.id,
			"backdoor-ols-hc3", "default@1", "test", fmt.Sprintf(`{"incident_id":%q,"version":%d}`, i.id, i.version)}
	}
	a1 := inc{"inc-a", 1, "firing", "gpu.power_cap", map[string]string{"model": "m1"}, T, T, T.Add(10 * time.Minute), zero}
	a2 := a1
	a2.version, a2.top = 2, "queue.saturation"
	b := inc{"inc-b", 1, "resolved", "kv_cache.preemption", map[string]string{"model": "m2", "service": "s1"}, T.Add(5 * time.Minute), T.Add(5 * time.Minute), T.Add(15 * time.Minute), T.Add(15 * time.Minute)}
	c := inc{"inc-c", 1, "firing", "gpu.xid_error", map[string]string{"model": "m1"}, T.Add(5 * time.Minute), T.Add(20 * time.Minute), T.Add(30 * time.Minute), zero}
	d := inc{"inc-d", 1, "firing", "gpu.power_cap", map[string]string{"model": "m2"}, T.Add(-3 * time.Hour), T.Add(-3 * time.Hour), T.Add(-2 * time.Hour), zero}
	// One insert per version, as the causal stage writes them; the store
	// answers with the newest.
	for _, i := range []inc{a1, b, c, d, a2} {
		insert([][]any{row(i)})
	}

	ids := func(rs []incidentRecord) string {
		var out []string
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%s/%d", r.id, r.version))
		}
		return strings.Join(out, " ")
	}
	all := incidentFilter{from: T.Add(-4 * time.Hour), to: T.Add(time.Hour), limit: 10}
	for _, c := range []struct {
		name string
		edit func(*incidentFilter)
		want string
	}{
		{"all, newest first (opened_at, then id, descending)", func(*incidentFilter) {}, "inc-c/1 inc-b/1 inc-a/2 inc-d/1"},
		{"status", func(f *incidentFilter) { f.status = "resolved" }, "inc-b/1"},
		{"top cause of the newest version", func(f *incidentFilter) { f.cause = "queue.saturation" }, "inc-a/2"},
		{"top cause of an older version only", func(f *incidentFilter) { f.cause = "gpu.power_cap" }, "inc-d/1"},
		{"model", func(f *incidentFilter) { f.model = "m1" }, "inc-c/1 inc-a/2"},
		{"service", func(f *incidentFilter) { f.service = "s1" }, "inc-b/1"},
		{"service absent from the scope", func(f *incidentFilter) { f.service = "m1" }, ""},
		{"model and status", func(f *incidentFilter) { f.model, f.status = "m2", "firing" }, "inc-d/1"},
		{"windows overlapping [T+10m, T+20m)", func(f *incidentFilter) { f.from, f.to = T.Add(10*time.Minute), T.Add(20*time.Minute) }, "inc-b/1 inc-a/2"},
		{"limit", func(f *incidentFilter) { f.limit = 1 }, "inc-c/1"},
		{"after a cursor, across a tie on opened_at", func(f *incidentFilter) {
			f.after, f.limit = &cursor{OpenedAt: T.Add(5 * time.Minute).Unix(), ID: "inc-c"}, 2
		}, "inc-b/1 inc-a/2"},
		{"after the tie", func(f *incidentFilter) { f.after = &cursor{OpenedAt: T.Add(5 * time.Minute).Unix(), ID: "inc-b"} }, "inc-a/2 inc-d/1"},
	} {
		f := all
		c.edit(&f)
		got, err := s.listIncidents(ctx, f)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if ids(got) != c.want {
			t.Errorf("%s: got [%s], want [%s]", c.name, ids(got), c.want)
		}
	}

	// Every column of a row comes back.
	got, err := s.listIncidents(ctx, incidentFilter{from: all.from, to: all.to, status: "resolved", limit: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("list resolved: %v (%v)", got, err)
	}
	r := got[0]
	gotRow := fmt.Sprintf("%s %d %s %v=%v %s %v %v [%d %d] %d %d %d %v %v %d %d %s %s", r.id, r.version, r.status, r.scopeKeys, r.scopeValues, r.signal,
		r.quantile, r.thresholdMS, r.windowStart.Unix(), r.windowEnd.Unix(), r.opened.Unix(), r.updated.Unix(), r.resolved.Unix(),
		r.observedP99MS, r.baselineP99MS, r.requests, r.tailRequests, r.topCause, r.topEntity)
	wantRow := fmt.Sprintf("inc-b 1 resolved [model service]=[m2 s1] e2e_latency 0.99 2500 [%d %d] %d %d %d 4001 1000 301 3 kv_cache.preemption host=node-inc-b",
		b.winStart.Unix(), b.winEnd.Unix(), b.opened.Unix(), b.opened.Add(time.Minute).Unix(), b.resolved.Unix())
	if gotRow != wantRow {
		t.Errorf("row\n got %s\nwant %s", gotRow, wantRow)
	}

	for _, c := range []struct {
		id      string
		version uint64
		ok      bool
	}{{"inc-a", 2, true}, {"inc-d", 1, true}, {"inc-none", 0, false}} {
		v, payload, ok, err := s.incident(ctx, c.id)
		want := ""
		if c.ok {
			want = fmt.Sprintf(`{"incident_id":%q,"version":%d}`, c.id, c.version)
		}
		if err != nil || ok != c.ok || v != c.version || string(payload) != want {
			t.Errorf("incident(%s) = %d, %q, %v (%v); want %d, %q, %v", c.id, v, payload, ok, err, c.version, want, c.ok)
		}
	}
}
