package query

import (
	"context"
	"encoding/xml"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/internal/testkit"
)

func insertGPUSamples(t *testing.T, st *chstore.Store) {
	t.Helper()
	tbl := chstore.Table{Name: "gpu_samples", Columns: []string{"host", "gpu", "gpu_index", "pod", "namespace", "metric", "time_ns", "time", "value"}}
	var rows [][]any
	add := func(gpu, metric string, at time.Time, v float64) {
		rows = append(rows, []any{"node-2", gpu, "0", "", "", metric, uint64(at.UnixNano()), at.Truncate(time.Second), v})
	}
	m := t0.Add(35 * time.Minute)
	add("GPU-b", "sm_clock_mhz", m.Add(5*time.Second), 1410)
	add("GPU-b", "sm_clock_mhz", m.Add(35*time.Second), 1100)
	add("GPU-b", "gpu_temp_c", m.Add(5*time.Second), 87)
	add("GPU-b", "clock_event_reasons", m.Add(5*time.Second), 0x40) // HW thermal
	add("GPU-b", "clock_event_reasons", m.Add(35*time.Second), 0x1)
	add("GPU-b", "xid_last", m.Add(5*time.Second), 79)
	add("GPU-c", "power_w", m.Add(5*time.Second), 700)
	add("GPU-c", "clock_event_reasons", m.Add(5*time.Second), 0x4) // SW power cap
	for pass := 0; pass < 2; pass++ {                              // duplicates collapse under FINAL
		if err := st.Insert(context.Background(), tbl, rows); err != nil {
			t.Fatal(err)
		}
	}
}

// TestViews checks each analyst view on the real server with inserted rows.
func TestViews(t *testing.T) {
	st := chstoretest.Fresh(t)
	loadFixture(t, st)
	insertGPUSamples(t, st)
	ctx := context.Background()
	conn := st.Conn()
	reqs := fixtureRequests()
	minute35 := t0.Add(35 * time.Minute)
	var vals []float64
	var errs uint64
	for _, r := range reqs {
		if r.model == "llama-3-8b" && !r.start.Before(minute35) && r.start.Before(minute35.Add(time.Minute)) {
			vals = append(vals, r.e2e)
			errs += uint64(r.errFlag)
		}
	}
	p99 := quantileExact(vals, 0.99)

	t.Run("p99_by_model_minute", func(t *testing.T) {
		var n, e uint64
		var p50, p, mx float64
		if err := conn.QueryRow(ctx, `SELECT requests, errors, p50_ms, p99_ms, max_ms FROM p99_by_model_minute WHERE model = 'llama-3-8b' AND minute = toDateTime(?)`, minute35.Unix()).
			Scan(&n, &e, &p50, &p, &mx); err != nil {
			t.Fatal(err)
		}
		if n != uint64(len(vals)) || e != errs || p != p99 || p50 != quantileExact(vals, 0.5) || mx != quantileExact(vals, 1) {
			t.Errorf("minute 35: requests %d errors %d p50 %v p99 %v max %v; want %d %d %v %v %v", n, e, p50, p, mx, len(vals), errs, quantileExact(vals, 0.5), p99, quantileExact(vals, 1))
		}
		var minutes uint64
		if err := conn.QueryRow(ctx, `SELECT count() FROM p99_by_model_minute`).Scan(&minutes); err != nil || minutes != 90 {
			t.Errorf("%d rows (%v), want 45 minutes × 2 models", minutes, err)
		}
	})

	t.Run("tail_requests", func(t *testing.T) {
		rows, err := conn.Query(ctx, `SELECT uid, e2e_ms, p99_ms, kv_usage_max, host FROM tail_requests WHERE model = 'llama-3-8b' AND minute = toDateTime(?) ORDER BY uid`, minute35.Unix())
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var uid, host string
			var e2e, thr, kv float64
			if err := rows.Scan(&uid, &e2e, &thr, &kv, &host); err != nil {
				t.Fatal(err)
			}
			if thr != p99 || e2e < thr || kv != 0.97 || host != "node-2" {
				t.Errorf("%s: e2e %v threshold %v kv %v host %s; want threshold %v, kv 0.97 on node-2", uid, e2e, thr, kv, host, p99)
			}
			got = append(got, uid)
		}
		var want []string
		for _, r := range reqs {
			if r.model == "llama-3-8b" && !r.start.Before(minute35) && r.start.Before(minute35.Add(time.Minute)) && r.e2e >= p99 {
				want = append(want, r.uid)
			}
		}
		sort.Strings(want)
		if strings.Join(got, ",") != strings.Join(want, ",") || len(got) == 0 {
			t.Errorf("tail of minute 35: %v, want %v", got, want)
		}
	})

	t.Run("culprit_history", func(t *testing.T) {
		rows, err := conn.Query(ctx, `SELECT incident_id, version, rank, cause, entity_host, attributable_fraction, status FROM culprit_history ORDER BY incident_id, rank`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var id, cause, host, status string
			var version uint64
			var rank uint16
			var af float64
			if err := rows.Scan(&id, &version, &rank, &cause, &host, &af, &status); err != nil {
				t.Fatal(err)
			}
			got = append(got, strings.Join([]string{id, itoa(version), itoa(uint64(rank)), cause, host, status}, " "))
		}
		want := []string{
			"inc-kv 2 1 kv_cache.preemption node-2 firing",
			"inc-kv 2 2 queue.saturation node-2 firing",
			"inc-kv 2 3 gpu.thermal_throttle node-1 firing",
			"inc-mis 1 1 entity.degraded node-3 firing",
			"inc-old 3 1 gpu.power_cap  resolved",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("culprit_history:\n%s\nwant (newest versions only):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})

	t.Run("gpu_health_minute", func(t *testing.T) {
		var samples, xids uint64
		var clkMin, clkAvg, temp, power float64
		var reasons uint32
		var thermal, powerCap uint8
		if err := conn.QueryRow(ctx, `SELECT samples, sm_clock_min_mhz, sm_clock_avg_mhz, gpu_temp_max_c, power_max_w, throttle_reasons, thermal_throttled, power_capped, xid_samples
FROM gpu_health_minute WHERE gpu = 'GPU-b' AND minute = toDateTime(?)`, minute35.Unix()).Scan(&samples, &clkMin, &clkAvg, &temp, &power, &reasons, &thermal, &powerCap, &xids); err != nil {
			t.Fatal(err)
		}
		if samples != 6 || clkMin != 1100 || clkAvg != 1255 || temp != 87 || !math.IsNaN(power) || reasons != 0x41 || thermal != 1 || powerCap != 0 || xids != 1 {
			t.Errorf("GPU-b: samples %d clock %v/%v temp %v power %v reasons %#x thermal %d power %d xids %d", samples, clkMin, clkAvg, temp, power, reasons, thermal, powerCap, xids)
		}
		if err := conn.QueryRow(ctx, `SELECT power_max_w, thermal_throttled, power_capped, sm_clock_min_mhz FROM gpu_health_minute WHERE gpu = 'GPU-c'`).Scan(&power, &thermal, &powerCap, &clkMin); err != nil {
			t.Fatal(err)
		}
		if power != 700 || thermal != 0 || powerCap != 1 || !math.IsNaN(clkMin) {
			t.Errorf("GPU-c: power %v thermal %d power_capped %d clock %v; want 700, 0, 1, NaN", power, thermal, powerCap, clkMin)
		}
	})

	t.Run("SQL.md queries run", func(t *testing.T) {
		for i, q := range docQueries(t) {
			rows, err := conn.Query(ctx, q)
			if err != nil {
				t.Errorf("schemas/SQL.md query %d fails: %v\n%s", i+1, err, q)
				continue
			}
			n := 0
			for rows.Next() {
				n++
			}
			if err := rows.Err(); err != nil {
				t.Errorf("schemas/SQL.md query %d: %v", i+1, err)
			}
			rows.Close()
			t.Logf("query %d: %d rows", i+1, n)
		}
	})
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// docQueries extracts the ```sql blocks of schemas/SQL.md.
func docQueries(t *testing.T) []string {
	t.Helper()
	root, err := testkit.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "schemas", "SQL.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		out = append(out, strings.TrimSpace(m[1]))
	}
	if len(out) < 8 {
		t.Fatalf("schemas/SQL.md has %d sql blocks, want the documented queries", len(out))
	}
	return out
}

// TestAnalystReadOnly: the dev server's analyst user (deploy/dev/
// clickhouse.sh) can read the views but not write.
func TestAnalystReadOnly(t *testing.T) {
	st := chstoretest.Fresh(t)
	loadFixture(t, st)
	addr := testkit.ClickHouse(t)
	pw := os.Getenv("CH_ANALYST_PASSWORD")
	if pw == "" {
		pw = "analyst"
	}
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, Auth: clickhouse.Auth{Database: st.Database(), Username: "analyst", Password: pw}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	if err := conn.Ping(ctx); err != nil {
		msg := "the test server has no analyst user (deploy/dev/clickhouse.sh creates one): " + err.Error()
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	for _, v := range []string{"p99_by_model_minute", "tail_requests", "culprit_history", "gpu_health_minute"} {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM "+v).Scan(&n); err != nil {
			t.Errorf("analyst reads %s: %v", v, err)
		} else if n == 0 && v != "gpu_health_minute" {
			t.Errorf("analyst reads %s: no rows", v)
		}
	}
	for _, stmt := range []string{"CREATE TABLE x (a UInt8) ENGINE = Memory", "DROP TABLE requests", "INSERT INTO incidents (incident_id) SELECT 'x'"} {
		err := conn.Exec(ctx, stmt)
		var ex *clickhouse.Exception
		if !errors.As(err, &ex) || ex.Code != 164 {
			t.Errorf("analyst %q: %v, want code 164 (READONLY)", stmt, err)
		}
	}
}

// TestAnalystConfig checks deploy/clickhouse/users.d/analyst.xml: a user on
// a readonly profile and a quota that exist, a password from the
// environment, and the tailcause database only. (Loaded by a real 26.9
// server, users.d beside its users.xml: see the file's comment.)
func TestAnalystConfig(t *testing.T) {
	root, err := testkit.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "clickhouse", "users.d", "analyst.xml"))
	if err != nil {
		t.Fatal(err)
	}
	type anyElem struct {
		XMLName xml.Name
		Attrs   []xml.Attr `xml:",any,attr"`
		Text    string     `xml:",chardata"`
		Kids    []anyElem  `xml:",any"`
	}
	var doc anyElem
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("analyst.xml: %v", err)
	}
	if doc.XMLName.Local != "clickhouse" {
		t.Errorf("root <%s>, want <clickhouse>", doc.XMLName.Local)
	}
	find := func(e anyElem, path ...string) (anyElem, bool) {
		for _, p := range path {
			found := false
			for _, k := range e.Kids {
				if k.XMLName.Local == p {
					e, found = k, true
					break
				}
			}
			if !found {
				return anyElem{}, false
			}
		}
		return e, true
	}
	user, ok := find(doc, "users", "analyst")
	if !ok {
		t.Fatal("no users/analyst")
	}
	prof, _ := find(user, "profile")
	quota, _ := find(user, "quota")
	if p, ok := find(doc, "profiles", strings.TrimSpace(prof.Text), "readonly"); !ok || strings.TrimSpace(p.Text) != "1" {
		t.Errorf("profile %q must exist with readonly 1", prof.Text)
	}
	if _, ok := find(doc, "quotas", strings.TrimSpace(quota.Text)); !ok {
		t.Errorf("quota %q must exist", quota.Text)
	}
	pw, ok := find(user, "password_sha256_hex")
	if !ok || len(pw.Attrs) != 1 || pw.Attrs[0].Name.Local != "from_env" || strings.TrimSpace(pw.Text) != "" {
		t.Errorf("password: want <password_sha256_hex from_env=\"...\"/>, no literal secret")
	}
	if db, ok := find(user, "allow_databases", "database"); !ok || strings.TrimSpace(db.Text) != "tailcause" {
		t.Errorf("allow_databases: want tailcause only")
	}
}
