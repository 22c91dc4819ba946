package alert

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// TestWatcher derives the events from incident versions as the causal
// stage writes them, and a second scan (or a restarted watcher) adds nothing.
func TestWatcher(t *testing.T) {
	st := chstoretest.Fresh(t)
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := &clock{t: now}
	tbl := chstore.Table{Name: "incidents", Columns: []string{"incident_id", "version", "status", "opened_at", "updated_at", "resolved_at", "top_cause", "payload"}}
	zero := time.Unix(0, 0).UTC()
	opened := now.Add(-time.Hour)
	row := func(id string, v uint64, status, cause, host string, resolved time.Time) []any {
		return []any{id, v, status, opened, opened.Add(time.Duration(v) * time.Minute), resolved, cause, string(testPayload(id, cause, host))}
	}
	rows := [][]any{
		row("inc-w", 1, "firing", "kv_cache.preemption", "node-2", zero),
		row("inc-w", 2, "firing", "kv_cache.preemption", "node-2", zero), // same top: nothing
		row("inc-w", 3, "firing", "queue.saturation", "node-2", zero),    // top changed
		row("inc-w", 4, "resolved", "queue.saturation", "node-2", now.Add(-time.Minute)),
		row("inc-ok", 1, "ok", "", "", zero),
		{"inc-old", uint64(1), "firing", now.Add(-72 * time.Hour), now.Add(-72 * time.Hour), zero, "gpu.power_cap", string(testPayload("inc-old", "gpu.power_cap", "n"))}, // outside the lookback
	}
	// One insert per version, as the causal stage writes them: ClickHouse
	// collapses the versions of an incident that arrive in one block
	// (ReplacingMergeTree with optimize_on_insert), and later in a merge, which
	// is stopped here so that the scan sees every version.
	if err := st.Conn().Exec(context.Background(), "SYSTEM STOP MERGES incidents"); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := st.Insert(context.Background(), tbl, [][]any{r}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(Receiver{Name: "pager", URL: "http://127.0.0.1:1/"})
	d := newTestDispatcher(t, ClickHouse(st), cfg, clk, 1)
	w := NewWatcher(d, time.Second, 24*time.Hour)
	n, err := w.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("first scan enqueued %d, want 3 (opened v1, top_culprit_changed v3, resolved v4)", n)
	}
	rs, err := st.Conn().Query(context.Background(), "SELECT delivery_id FROM alert_outbox ORDER BY delivery_id")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for rs.Next() {
		var id string
		_ = rs.Scan(&id)
		ids = append(ids, id)
	}
	rs.Close()
	want := []string{"inc-w:1:opened", "inc-w:3:top_culprit_changed", "inc-w:4:resolved"}
	if len(ids) != 3 || ids[0] != want[0] || ids[1] != want[1] || ids[2] != want[2] {
		t.Errorf("outbox %v, want %v", ids, want)
	}
	for _, sc := range []*Watcher{w, NewWatcher(d, time.Second, 24*time.Hour)} {
		if n, err := sc.Scan(context.Background()); err != nil || n != 0 {
			t.Errorf("rescan: %d (%v), want 0", n, err)
		}
	}
}

// outboxIDs lists the outbox's delivery ids.
func outboxIDs(t *testing.T, st *chstore.Store) map[string]bool {
	t.Helper()
	rs, err := st.Conn().Query(context.Background(), "SELECT DISTINCT delivery_id FROM alert_outbox")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	out := map[string]bool{}
	for rs.Next() {
		var id string
		if err := rs.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out[id] = true
	}
	return out
}

// TestWatcherPastTenThousandVersions: an incident with 10,001 versions
// (unmerged, as a busy incident leaves them) no longer hides the rest. The
// old scan read versions oldest first with LIMIT 10000: the newest
// incident and the busy one's last change never paged.
func TestWatcherPastTenThousandVersions(t *testing.T) {
	st := chstoretest.Fresh(t)
	ctx := context.Background()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := &clock{t: now}
	if err := st.Conn().Exec(ctx, "SYSTEM STOP MERGES incidents"); err != nil {
		t.Fatal(err)
	}
	// inc-busy: versions 1..10001, one second apart, ending 10 min ago; its
	// top culprit changes at 5000 and at 10001. One block, with
	// optimize_on_insert off, keeps every version (as separate inserts do).
	opened := now.Add(-10*time.Minute - 10001*time.Second)
	a, b, c := testPayload("inc-busy", "kv_cache.preemption", "node-2"), testPayload("inc-busy", "queue.saturation", "node-2"), testPayload("inc-busy", "gpu.power_cap", "node-2")
	if err := st.Conn().Exec(ctx, `INSERT INTO incidents (incident_id, version, status, opened_at, updated_at, resolved_at, payload)
SETTINGS optimize_on_insert = 0
SELECT 'inc-busy', number, 'firing', toDateTime(?), toDateTime(?) + number, toDateTime(0),
       multiIf(number < 5000, ?, number < 10001, ?, ?)
FROM numbers(1, 10001)`, opened.Unix(), opened.Unix(), string(a), string(b), string(c)); err != nil {
		t.Fatal(err)
	}
	var versions uint64
	if err := st.Conn().QueryRow(ctx, "SELECT count() FROM incidents").Scan(&versions); err != nil || versions != 10001 {
		t.Fatalf("incidents has %d versions (%v), want 10001", versions, err)
	}
	tbl := chstore.Table{Name: "incidents", Columns: []string{"incident_id", "version", "status", "opened_at", "updated_at", "resolved_at", "payload"}}
	zero := time.Unix(0, 0).UTC()
	if err := st.Insert(ctx, tbl, [][]any{{"inc-new", uint64(1), "firing", now.Add(-time.Minute), now.Add(-time.Minute), zero, string(testPayload("inc-new", "gpu.xid_error", "node-7"))}}); err != nil {
		t.Fatal(err)
	}
	d := newTestDispatcher(t, ClickHouse(st), testConfig(Receiver{Name: "pager", URL: "http://127.0.0.1:1/"}), clk, 1)
	w := NewWatcher(d, time.Second, 24*time.Hour)
	n, err := w.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"inc-new:1:opened", "inc-busy:1:opened", "inc-busy:5000:top_culprit_changed", "inc-busy:10001:top_culprit_changed"}
	got := outboxIDs(t, st)
	for _, id := range want {
		if !got[id] {
			t.Errorf("%s not enqueued; outbox %v", id, got)
		}
	}
	if n != len(want) || len(got) != len(want) {
		t.Errorf("scan enqueued %d rows, outbox %v; want exactly %v", n, got, want)
	}
	if n, err := w.Scan(ctx); err != nil || n != 0 {
		t.Errorf("rescan: %d (%v), want 0", n, err)
	}
	// A new version of the busy incident is seen past the cache.
	if err := st.Insert(ctx, tbl, [][]any{{"inc-busy", uint64(10002), "resolved", opened, now, now, string(c)}}); err != nil {
		t.Fatal(err)
	}
	if n, err := w.Scan(ctx); err != nil || n != 1 || !outboxIDs(t, st)["inc-busy:10002:resolved"] {
		t.Errorf("after a new version: %d rows (%v), want inc-busy:10002:resolved", n, err)
	}
}

// TestWatcherPages: with small pages, the listing (newest first) and the
// version reads cross page boundaries, and every incident's events are
// derived in version order across them.
func TestWatcherPages(t *testing.T) {
	st := chstoretest.Fresh(t)
	ctx := context.Background()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := &clock{t: now}
	if err := st.Conn().Exec(ctx, "SYSTEM STOP MERGES incidents"); err != nil {
		t.Fatal(err)
	}
	tbl := chstore.Table{Name: "incidents", Columns: []string{"incident_id", "version", "status", "opened_at", "updated_at", "resolved_at", "payload"}}
	zero := time.Unix(0, 0).UTC()
	want := map[string]bool{}
	for i := range 20 {
		id := fmt.Sprintf("inc-%02d", i)
		at := now.Add(-time.Duration(i%4) * time.Minute) // many ties on updated_at
		for v := uint64(1); v <= 3; v++ {
			cause := "kv_cache.preemption"
			if v == 3 {
				cause = "queue.saturation"
			}
			if err := st.Insert(ctx, tbl, [][]any{{id, v, "firing", at, at, zero, string(testPayload(id, cause, "node-1"))}}); err != nil {
				t.Fatal(err)
			}
		}
		want[id+":1:opened"], want[id+":3:top_culprit_changed"] = true, true
	}
	d := newTestDispatcher(t, ClickHouse(st), testConfig(Receiver{Name: "pager", URL: "http://127.0.0.1:1/"}), clk, 1)
	w := NewWatcher(d, time.Second, 24*time.Hour)
	w.incidentPage, w.versionPage = 7, 4
	if n, err := w.Scan(ctx); err != nil || n != len(want) {
		t.Fatalf("scan: %d rows (%v), want %d", n, err, len(want))
	}
	got := outboxIDs(t, st)
	for id := range want {
		if !got[id] {
			t.Errorf("%s not enqueued", id)
		}
	}
	if len(got) != len(want) {
		t.Errorf("outbox has %d deliveries, want %d", len(got), len(want))
	}
	if len(w.seen) != 20 {
		t.Errorf("cache holds %d incidents, want 20", len(w.seen))
	}
}
