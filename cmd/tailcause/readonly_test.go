package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/testkit"
	"github.com/tailcause/tailcause/lab/faultlab"
	"github.com/tailcause/tailcause/schemas"
)

// TestReadOnlyRankAndQuery: with the schema migrated and data written by
// a user who may write (the demo: the fault lab through the pipeline, an
// incident stored), `rank` and the query API run as the dev server's
// read-only user (readonly = 1: no write, no DDL, no setting) and answer;
// the server's query log then shows that this user ran nothing but
// SELECTs, none refused: a write path is never attempted. The query role
// also serves /metrics and /readyz on its observability listener.
func TestReadOnlyRankAndQuery(t *testing.T) {
	addr := testkit.ClickHouse(t)
	db := testkit.FreshDatabase(t, addr)
	if code, out, errs := runCmd(t, "demo", "--clickhouse", addr, "--database", db, "--duration", "12m", "--listen", "127.0.0.1:0", "--hold=false"); code != 0 {
		t.Fatalf("demo (the data) exited %d: %s\n%s", code, out, errs)
	}
	admin := testkit.Connect(t, addr, db)
	// rank --store (a user who may write) writes the ranking as the next
	// version of the demo's incident, on the schema the demo migrated.
	start := faultlab.DefaultStart()
	win := []string{"--from", start.Format(time.RFC3339), "--to", start.Add(12 * time.Minute).Format(time.RFC3339)}
	versions := func() uint64 {
		t.Helper()
		var n uint64
		if err := admin.QueryRow(context.Background(), "SELECT count() FROM incidents").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := versions()
	if code, out, errs := runCmd(t, append([]string{"rank", "--store", "--clickhouse", addr, "--database", db}, win...)...); code != 0 || versions() <= before {
		t.Errorf("rank --store: exit %d, incident rows %d -> %d:\n%s%s", code, before, versions(), out, errs)
	}
	since := time.Now().Add(-time.Second)
	user, pw := testkit.ReadOnlyUser(t, addr, db)
	const queryToken = "read-only-test-token-0123456789"
	getenv := func(k string) string {
		switch k {
		case "TAILCAUSE_CLICKHOUSE":
			return addr
		case "TAILCAUSE_DATABASE":
			return db
		case "TAILCAUSE_CLICKHOUSE_USER":
			return user
		case "TAILCAUSE_CLICKHOUSE_PASSWORD":
			return pw
		case "TAILCAUSE_QUERY_TOKEN":
			return queryToken
		}
		return ""
	}

	// The schema is current, as migrate --check (writing nothing) says.
	if code, out, errs, _ := runEnv(t, getenv, time.Minute, "migrate", "--check"); code != 0 || !strings.Contains(out, "every migration is applied") {
		t.Errorf("migrate --check as %s: exit %d: %s%s", user, code, out, errs)
	}
	// rank, fleet-wide and in one scope.
	code, out, errs, _ := runEnv(t, getenv, 3*time.Minute, append([]string{"rank"}, win...)...)
	if code != 0 || !strings.Contains(out, `"status": "firing"`) || !strings.Contains(out, `"cause": "kv_cache.preemption"`) {
		t.Errorf("rank as %s: exit %d, want a firing breach with kv_cache.preemption:\n%s\n%s", user, code, out, errs)
	}
	code, out, errs, _ = runEnv(t, getenv, 3*time.Minute, append([]string{"rank", "--scope", "model=llama-3.1-8b", "--format", "table"}, win...)...)
	if code != 0 || !strings.Contains(out, "kv_cache.preemption") {
		t.Errorf("rank --scope --format table as %s: exit %d:\n%s\n%s", user, code, out, errs)
	}

	// The query API, with --no-migrate as the manifests run it.
	listen, metrics := freePort(t), freePort(t)
	qlog := &tailBuffer{}
	qe := &env{stdout: io.Discard, stderr: qlog, log: slog.New(slog.NewTextHandler(qlog, nil)), getenv: getenv}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, qe, []string{"query", "--no-migrate", "--listen", listen, "--metrics-addr", metrics})
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("query as %s exited %d:\n%s", user, code, qlog.String())
			}
		}
	}
	defer stop()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if code, _ := httpGet(t, "http://"+listen+"/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("query as %s never became ready:\n%s", user, qlog.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	get := func(path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+listen+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+queryToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	q := url.Values{"from": {start.Format(time.RFC3339)}, "to": {start.Add(12 * time.Minute).Format(time.RFC3339)}}
	code, body := get("/v1/incidents?" + q.Encode())
	var list struct {
		Incidents []struct {
			IncidentID string `json:"incident_id"`
		} `json:"incidents"`
	}
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list.Incidents) == 0 {
		t.Fatalf("GET /v1/incidents as %s: %d %v\n%s", user, code, err, body)
	}
	id := list.Incidents[0].IncidentID
	for _, path := range []string{
		"/v1/incidents/" + id, "/v1/incidents/" + id + "/exemplars", "/incidents/" + id + "/report",
		"/v1/p99/scopes?by=model&" + q.Encode(), "/v1/p99/timeseries?model=llama-3.1-8b&" + q.Encode(),
	} {
		if code, body := get(path); code != 200 {
			t.Errorf("GET %s as %s: %d %.300s", path, user, code, body)
		}
	}
	// /metrics and /readyz on the observability listener (where the pods
	// are annotated to be scraped), without a token.
	if code, body := httpGet(t, "http://"+metrics+"/metrics"); code != 200 || !strings.Contains(body, "tailcause_query_http_requests_total") {
		t.Errorf("query's /metrics on %s: %d, no tailcause_query_http_requests_total", metrics, code)
	}
	if code, body := httpGet(t, "http://"+metrics+"/readyz"); code != 200 || body != "[+]clickhouse ok\nready\n" {
		t.Errorf("query's /readyz on %s: %d %q", metrics, code, body)
	}
	stop()

	// What the read-only user ran: only SELECTs, none refused.
	fctx, fcancel := context.WithTimeout(context.Background(), time.Minute)
	defer fcancel()
	if err := admin.Exec(fctx, "SYSTEM FLUSH LOGS"); err != nil {
		t.Fatal(err)
	}
	rows, err := admin.Query(fctx, `SELECT query_kind, toString(type), exception_code, substring(query, 1, 200), count()
		FROM system.query_log
		WHERE event_time >= ? AND user = ? AND current_database = ? AND type != 'QueryStart'
		GROUP BY 1, 2, 3, 4`, since, user, db)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var selects uint64
	for rows.Next() {
		var kind, typ, query string
		var exc int32
		var n uint64
		if err := rows.Scan(&kind, &typ, &exc, &query, &n); err != nil {
			t.Fatal(err)
		}
		if kind != "Select" || typ != "QueryFinish" || exc != 0 {
			t.Errorf("%s ran a %s query (%s, code %d) %d time(s): %s", user, kind, typ, exc, n, query)
			continue
		}
		selects += n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if selects < 20 {
		t.Errorf("query_log shows %d SELECTs by %s in %s: the check above saw too little to mean anything", selects, user, db)
	}
}

// TestNoMigrateRefusesMissingSchema: a serving role with --no-migrate
// creates nothing and ends at once with an error naming the remedy when
// the database is missing or was never migrated; so do rank and migrate
// --check. (A schema behind the binary's: chstore's
// TestReadOnlyUserAndSchemaCheck.)
func TestNoMigrateRefusesMissingSchema(t *testing.T) {
	addr := testkit.ClickHouse(t)
	db := testkit.FreshDatabase(t, addr) // empty: never migrated
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"enrich", "--no-migrate", "--kafka", "127.0.0.1:1", "--metrics-addr", ""}, "database " + db + " was never migrated (no schema_migrations table): run `tailcause migrate` first"},
		{[]string{"causal", "--no-migrate", "--metrics-addr", ""}, "was never migrated"},
		{[]string{"query", "--no-migrate", "--no-auth", "--listen", "127.0.0.1:0", "--metrics-addr", ""}, "was never migrated"},
		{[]string{"all", "--no-migrate", "--embedded-kafka", "--insecure-no-auth", "--metrics-addr", ""}, "was never migrated"},
		{[]string{"rank", "--from", "2026-01-05T14:00:00Z", "--to", "2026-01-05T14:10:00Z"}, "was never migrated"},
		{[]string{"migrate", "--check"}, "was never migrated"},
		{[]string{"causal", "--no-migrate", "--database", db + "_absent", "--metrics-addr", ""}, "database " + db + "_absent does not exist: run `tailcause migrate` first"},
	} {
		args := append(append([]string{}, tc.args...), "--clickhouse", addr)
		if !strings.Contains(strings.Join(args, " "), "--database") {
			args = append(args, "--database", db)
		}
		code, _, errs, _ := runEnv(t, func(string) string { return "" }, time.Minute, args...)
		if code != 1 || !strings.Contains(errs, tc.want) || strings.Contains(errs, "waiting for ClickHouse") {
			t.Errorf("tailcause %s: exit %d, want 1 at once (no retries) with %q:\n%s", strings.Join(args, " "), code, tc.want, errs)
		}
	}
	// Nothing was created: the database is still empty.
	var n uint64
	if err := testkit.Connect(t, addr, db).QueryRow(context.Background(), "SELECT count() FROM system.tables WHERE database = ?", db).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d tables in %s after roles with --no-migrate (%v), want 0", n, db, err)
	}

	// Behind: migrated by an older binary (the newest migration is not
	// recorded). The role names the missing migration; migrate applies it
	// and the role's check passes.
	if code, out, errs := runCmd(t, "migrate", "--clickhouse", addr, "--database", db, "--ttl", "0"); code != 0 {
		t.Fatalf("migrate: exit %d: %s%s", code, out, errs)
	}
	ms, err := schemas.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	last := ms[len(ms)-1]
	admin := testkit.Connect(t, addr, db)
	ctx := context.Background()
	if err := admin.Exec(ctx, "ALTER TABLE schema_migrations DELETE WHERE version = ? SETTINGS mutations_sync = 2", uint32(last.Version)); err != nil {
		t.Fatal(err)
	}
	args := []string{"causal", "--no-migrate", "--once", "--clickhouse", addr, "--database", db}
	code, _, errs, _ := runEnv(t, func(string) string { return "" }, time.Minute, args...)
	if want := fmt.Sprintf("lacks 1 of the %d migrations this binary needs (%s): run `tailcause migrate` first", len(ms), last.Name); code != 1 || !strings.Contains(errs, want) {
		t.Errorf("tailcause %s on a schema one migration behind: exit %d, want 1 with %q:\n%s", strings.Join(args, " "), code, want, errs)
	}
	if code, out, errs := runCmd(t, "migrate", "--clickhouse", addr, "--database", db, "--ttl", "0"); code != 0 || !strings.Contains(out, last.Name) {
		t.Fatalf("migrate after the rollback of %s: exit %d: %s%s", last.Name, code, out, errs)
	}
	if code, out, errs := runCmd(t, append(args[:len(args):len(args)], "--scope", "model=none")...); code != 0 {
		t.Errorf("tailcause %s once migrated: exit %d: %s%s", strings.Join(args, " "), code, out, errs)
	}
}
