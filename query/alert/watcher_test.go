package alert

import (
	"context"
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
	d := newTestDispatcher(t, st, cfg, clk, 1)
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
