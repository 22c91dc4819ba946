package alert

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// TestStoreConformance runs one suite on every Store: the in-memory one the
// tests may use and the ClickHouse one production uses. A rule stated on
// the Store interface that either breaks fails here.
func TestStoreConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		m := newMemStore()
		testStore(t, m, m.addIncident)
	})
	t.Run("clickhouse", func(t *testing.T) {
		st := chstoretest.Fresh(t)
		// Versions of one incident share its sorting key: a merge would
		// collapse them (the causal stage's tables, not this package's).
		if err := st.Conn().Exec(context.Background(), "SYSTEM STOP MERGES incidents"); err != nil {
			t.Fatal(err)
		}
		tbl := chstore.Table{Name: "incidents", Columns: []string{"incident_id", "version", "status", "opened_at", "updated_at", "resolved_at", "payload"}}
		testStore(t, ClickHouse(st), func(in memIncident) {
			t.Helper()
			if err := st.Insert(context.Background(), tbl, [][]any{{in.id, in.version, in.status, in.updated, in.updated, in.resolved, in.payload}}); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func testStore(t *testing.T, s Store, addIncident func(memIncident)) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	since := now.Add(-time.Hour)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	outboxRow := func(id, receiver, incident string, version uint64, ev EventKind, payload string, at time.Time) []any {
		return []any{id, receiver, incident, version, string(ev), payload, uint64(at.UnixNano()), at.Truncate(time.Second)}
	}
	attemptRow := func(id, receiver string, n uint32, state string, at time.Time, next time.Time) []any {
		var nextNs uint64
		if !next.IsZero() {
			nextNs = uint64(next.UnixNano())
		}
		return []any{id, receiver, n, state, uint16(0), "", 1.5, uint64(at.UnixNano()), at.Truncate(time.Second), nextNs}
	}

	t.Run("outbox", func(t *testing.T) {
		a1, a2, old := "inc-a:1:opened", "inc-a:2:top_culprit_changed", "inc-old:1:opened"
		must(s.insertOutbox(ctx, [][]any{
			outboxRow(a1, "pager", "inc-a", 1, EventOpened, "doc-a1", now.Add(-3*time.Minute)),
			outboxRow(a1, "chat", "inc-a", 1, EventOpened, "doc-a1", now.Add(-3*time.Minute)),
		}))
		must(s.insertOutbox(ctx, [][]any{
			outboxRow(a2, "pager", "inc-a", 2, EventTopCulpritChanged, "doc-a2", now.Add(-2*time.Minute)),
			outboxRow(old, "pager", "inc-old", 1, EventOpened, "doc-old", since.Add(-time.Hour)),
		}))
		got, err := s.outboxReceivers(ctx, a1)
		must(err)
		if d := cmp.Diff(map[string]bool{"pager": true, "chat": true}, got); d != "" {
			t.Errorf("outboxReceivers(%s) (-want +got):\n%s", a1, d)
		}
		if got, err := s.outboxReceivers(ctx, "inc-none:1:opened"); err != nil || len(got) != 0 {
			t.Errorf("outboxReceivers of an unknown delivery: %v (%v), want none", got, err)
		}
		for _, c := range []struct {
			kind EventKind
			want uint64
		}{{EventOpened, 2}, {EventTopCulpritChanged, 1}, {EventResolved, 0}} {
			if n, err := s.eventCount(ctx, "inc-a", c.kind); err != nil || n != c.want {
				t.Errorf("eventCount(inc-a, %s) = %d (%v), want %d", c.kind, n, err, c.want)
			}
		}
		for _, c := range []struct {
			incident string
			version  uint64
			want     string
		}{{"inc-a", 1, "doc-a1"}, {"inc-a", 7, "doc-a2"}, {"inc-a", 0, ""}, {"inc-none", 9, ""}} {
			p, ok, err := s.lastEvent(ctx, c.incident, c.version)
			if err != nil || string(p) != c.want || ok != (c.want != "") {
				t.Errorf("lastEvent(%s, %d) = %q, %v (%v), want %q", c.incident, c.version, p, ok, err, c.want)
			}
		}
		docs, err := s.payloads(ctx, []string{a1, a2, "inc-none:1:opened"})
		must(err)
		if d := cmp.Diff(map[string][]byte{a1: []byte("doc-a1"), a2: []byte("doc-a2")}, docs); d != "" {
			t.Errorf("payloads (-want +got):\n%s", d)
		}

		key := func(p pending) string { return p.deliveryID + "@" + p.receiver }
		dueKeys := func(limit int) ([]string, map[string]pending) {
			t.Helper()
			list, err := s.due(ctx, now, since, limit)
			must(err)
			var keys []string
			by := map[string]pending{}
			for _, p := range list {
				keys = append(keys, key(p))
				by[key(p)] = p
			}
			return keys, by
		}
		// Without attempts every pair in the lookback is due, oldest first
		// (created_ns, then delivery id, then receiver).
		keys, by := dueKeys(10)
		if d := cmp.Diff([]string{a1 + "@chat", a1 + "@pager", a2 + "@pager"}, keys); d != "" {
			t.Errorf("due without attempts (-want +got):\n%s", d)
		}
		if p := by[a2+"@pager"]; p.incidentID != "inc-a" || p.version != 2 || p.event != EventTopCulpritChanged || p.attempts != 0 || p.createdNs != uint64(now.Add(-2*time.Minute).UnixNano()) {
			t.Errorf("due row %+v, want inc-a v2 top_culprit_changed, no attempts, its created_ns", p)
		}
		if keys, _ := dueKeys(2); len(keys) != 2 {
			t.Errorf("due with limit 2: %v", keys)
		}
		// a1@pager delivered; a1@chat to retry in a minute; a2@pager
		// retried, due again.
		must(s.insertAttempts(ctx, [][]any{
			attemptRow(a1, "pager", 1, StateDelivered, now.Add(-100*time.Second), time.Time{}),
			attemptRow(a1, "chat", 1, StateRetry, now.Add(-100*time.Second), now.Add(time.Minute)),
			attemptRow(a2, "pager", 1, StateRetry, now.Add(-90*time.Second), now.Add(-80*time.Second)),
			attemptRow(a2, "pager", 2, StateRetry, now.Add(-70*time.Second), now.Add(-60*time.Second)),
		}))
		keys, by = dueKeys(10)
		if d := cmp.Diff([]string{a2 + "@pager"}, keys); d != "" {
			t.Errorf("due after attempts (-want +got):\n%s", d)
		}
		if p := by[a2+"@pager"]; p.attempts != 2 {
			t.Errorf("due %s has %d attempts, want 2", key(p), p.attempts)
		}
		// The newest attempt decides: a1@chat's retry, then failed.
		must(s.insertAttempts(ctx, [][]any{attemptRow(a1, "chat", 2, StateRetry, now.Add(-50*time.Second), now.Add(-40*time.Second))}))
		if keys, _ := dueKeys(10); !cmp.Equal(keys, []string{a1 + "@chat", a2 + "@pager"}) {
			t.Errorf("due after a1@chat's retry came due: %v", keys)
		}
		must(s.insertAttempts(ctx, [][]any{attemptRow(a2, "pager", 3, StateFailed, now.Add(-30*time.Second), time.Time{})}))
		if keys, _ := dueKeys(10); !cmp.Equal(keys, []string{a1 + "@chat"}) {
			t.Errorf("due after a2@pager failed: %v", keys)
		}
		last, err := s.lastAttempts(ctx, []string{a1, a2, old})
		must(err)
		want := map[claimKey]uint32{{a1, "pager", 0}: 1, {a1, "chat", 0}: 2, {a2, "pager", 0}: 3}
		if d := cmp.Diff(want, last, cmp.AllowUnexported(claimKey{})); d != "" {
			t.Errorf("lastAttempts (-want +got):\n%s", d)
		}
	})

	t.Run("claims", func(t *testing.T) {
		hour := uint64(time.Hour)
		tie, released, expired, order := claimKey{"c-tie", "pager", 1}, claimKey{"c-rel", "pager", 1}, claimKey{"c-exp", "pager", 1}, claimKey{"c-ord", "pager", 3}
		row := func(k claimKey, id string, lease uint64) []any {
			return []any{k.deliveryID, k.receiver, k.attempt, id, lease}
		}
		// One insert: one claimed_ns, so the claim id decides.
		must(s.insertClaims(ctx, [][]any{row(tie, "b/1", hour), row(tie, "a/1", hour), row(released, "r/1", hour), row(expired, "x/1", 1), row(order, "p/1", hour)}))
		// Later inserts: later claimed_ns, which beats a smaller claim id.
		must(s.insertClaims(ctx, [][]any{row(order, "o/1", hour), row(released, "r/1", 0), row(released, "s/1", hour)}))
		ids := []string{"c-tie", "c-rel", "c-exp", "c-ord"}
		got, err := s.firstLiveClaims(ctx, ids)
		must(err)
		want := map[claimKey]string{tie: "a/1", released: "s/1", order: "p/1"} // x/1's 1 ns lease is over
		if d := cmp.Diff(want, got, cmp.AllowUnexported(claimKey{})); d != "" {
			t.Errorf("firstLiveClaims (-want +got):\n%s", d)
		}
		must(s.insertClaims(ctx, [][]any{row(tie, "a/1", 0), row(expired, "y/1", hour)}))
		got, err = s.firstLiveClaims(ctx, ids)
		must(err)
		want = map[claimKey]string{tie: "b/1", released: "s/1", order: "p/1", expired: "y/1"}
		if d := cmp.Diff(want, got, cmp.AllowUnexported(claimKey{})); d != "" {
			t.Errorf("firstLiveClaims after a release and a new claim (-want +got):\n%s", d)
		}
		if got, err := s.firstLiveClaims(ctx, []string{"c-ord"}); err != nil || len(got) != 1 || got[order] != "p/1" {
			t.Errorf("firstLiveClaims of c-ord only: %v (%v)", got, err)
		}
	})

	t.Run("incidents", func(t *testing.T) {
		t0 := now.Truncate(time.Second).Add(-30 * time.Minute)
		zero := time.Unix(0, 0).UTC()
		for _, in := range []memIncident{
			{id: "inc-1", version: 1, status: "firing", updated: t0.Add(time.Minute), resolved: zero, payload: "p1.1"},
			{id: "inc-1", version: 2, status: "firing", updated: t0.Add(2 * time.Minute), resolved: zero, payload: "p1.2"},
			{id: "inc-2", version: 1, status: "firing", updated: t0.Add(2 * time.Minute), resolved: zero, payload: "p2.1"},
			{id: "inc-3", version: 1, status: "resolved", updated: t0.Add(time.Minute), resolved: t0.Add(time.Minute), payload: "p3.1"},
			{id: "inc-old", version: 1, status: "firing", updated: since.Add(-time.Hour), resolved: zero, payload: "old"},
		} {
			addIncident(in)
		}
		u1, u2 := uint32(t0.Add(time.Minute).Unix()), uint32(t0.Add(2*time.Minute).Unix())
		all := []listed{{"inc-2", 1, u2}, {"inc-1", 2, u2}, {"inc-3", 1, u1}}
		got, err := s.listIncidents(ctx, since, math.MaxUint32, "", 10)
		must(err)
		if d := cmp.Diff(all, got, cmp.AllowUnexported(listed{})); d != "" {
			t.Errorf("listIncidents (-want +got):\n%s", d)
		}
		got, err = s.listIncidents(ctx, since, math.MaxUint32, "", 2)
		must(err)
		if d := cmp.Diff(all[:2], got, cmp.AllowUnexported(listed{})); d != "" {
			t.Errorf("listIncidents, first page of 2 (-want +got):\n%s", d)
		}
		got, err = s.listIncidents(ctx, since, u2, "inc-1", 2)
		must(err)
		if d := cmp.Diff(all[2:], got, cmp.AllowUnexported(listed{})); d != "" {
			t.Errorf("listIncidents after (u2, inc-1) (-want +got):\n%s", d)
		}

		vs := []incidentVersion{
			{id: "inc-1", version: 1, status: "firing", payload: "p1.1"},
			{id: "inc-1", version: 2, status: "firing", payload: "p1.2"},
			{id: "inc-3", version: 1, status: "resolved", resolved: 1, payload: "p3.1"},
		}
		gotV, err := s.incidentVersions(ctx, []string{"inc-1", "inc-3"}, "", 0, 10)
		must(err)
		if d := cmp.Diff(vs, gotV, cmp.AllowUnexported(incidentVersion{})); d != "" {
			t.Errorf("incidentVersions (-want +got):\n%s", d)
		}
		gotV, err = s.incidentVersions(ctx, []string{"inc-1", "inc-3"}, "inc-1", 1, 1)
		must(err)
		if d := cmp.Diff(vs[1:2], gotV, cmp.AllowUnexported(incidentVersion{})); d != "" {
			t.Errorf("incidentVersions after (inc-1, 1), limit 1 (-want +got):\n%s", d)
		}
	})
}
