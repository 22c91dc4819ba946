package query

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// nopDB fails every query: for tests that must be answered before any
// query runs.
type nopDB struct{}

func (nopDB) Query(context.Context, string, ...any) (Rows, error) {
	return nil, errors.New("nopDB: no database")
}
func (nopDB) Ping(context.Context) error { return errors.New("nopDB: no database") }

// connDB is a DB over a bare clickhouse-go connection (one to a server
// that is not there cannot be opened as a chstore.Store).
type connDB struct{ c driver.Conn }

func (d connDB) Query(ctx context.Context, q string, args ...any) (Rows, error) {
	rows, err := d.c.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}
func (d connDB) Ping(ctx context.Context) error { return d.c.Ping(ctx) }

// get calls path with the test token, checks the status and that the
// response matches the OpenAPI document, and decodes a JSON body.
func get(t *testing.T, hs *httptest.Server, path string, want int) map[string]any {
	t.Helper()
	return do(t, hs, "GET", path, testToken, want)
}

func do(t *testing.T, hs *httptest.Server, method, path, token string, want int) map[string]any {
	t.Helper()
	status, ct, body := call(t, hs, method, path, token)
	if status != want {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, path, status, want, body)
	}
	u, _ := url.Parse(path)
	if err := loadOpenAPI(t).checkResponse(method, u.Path, status, ct, body); err != nil {
		t.Errorf("%s %s: %v", method, path, err)
	}
	if !strings.Contains(ct, "json") {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%s %s: decode: %v", method, path, err)
	}
	return m
}

// problem checks an RFC 9457 answer.
func problem(t *testing.T, hs *httptest.Server, method, path, token string, want int, kind string) {
	t.Helper()
	status, ct, body := call(t, hs, method, path, token)
	if status != want || ct != "application/problem+json" {
		t.Fatalf("%s %s: %d %s, want %d application/problem+json; body %s", method, path, status, ct, want, body)
	}
	var p Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("decode problem: %v", err)
	}
	if p.Type != problemTypePrefix+kind || p.Status != want || p.Title == "" || p.Detail == "" {
		t.Errorf("%s %s: problem %+v, want type %s status %d with title and detail", method, path, p, problemTypePrefix+kind, want)
	}
	u, _ := url.Parse(path)
	if _, ok := loadOpenAPI(t).pathTemplate(u.Path); ok && status != http.StatusMethodNotAllowed {
		if err := loadOpenAPI(t).checkResponse(method, u.Path, status, ct, body); err != nil {
			t.Errorf("%v", err)
		}
	}
}

func q(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return "?" + v.Encode()
}

func ts(t time.Time) string { return t.Format(time.RFC3339) }

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6*math.Max(1, math.Abs(b)) }

// TestAPIContract runs every read route against inserted rows and asserts
// the values (quantiles recomputed in Go with quantileExact's definition).
func TestAPIContract(t *testing.T) {
	_, hs := testServer(t, nil)
	reqs := fixtureRequests()

	t.Run("health", func(t *testing.T) {
		if m := do(t, hs, "GET", "/healthz", "", 200); m["status"] != "ok" {
			t.Errorf("healthz %v", m)
		}
		if m := do(t, hs, "GET", "/readyz", "", 200); m["status"] != "ready" {
			t.Errorf("readyz %v", m)
		}
	})

	t.Run("list incidents", func(t *testing.T) {
		m := get(t, hs, "/v1/incidents", 200)
		ids := incidentIDs(m)
		if want := []string{"inc-kv", "inc-mis", "inc-old"}; !reflect.DeepEqual(ids, want) {
			t.Fatalf("incidents %v, want %v (newest first)", ids, want)
		}
		first := m["incidents"].([]any)[0].(map[string]any)
		if first["version"] != 2.0 || first["top_cause"] != "kv_cache.preemption" || first["observed_p99_ms"] != 4253.0 ||
			first["status"] != "firing" || first["resolved_at"] != nil || first["scope"].(map[string]any)["model"] != "llama-3-8b" {
			t.Errorf("inc-kv summary %v: want version 2, top cause kv_cache.preemption, P99 4253, firing, model scope", first)
		}
		if w := first["window"].(map[string]any); w["start"] != ts(winStart) || w["end"] != ts(winEnd) {
			t.Errorf("inc-kv window %v", w)
		}
		old := m["incidents"].([]any)[2].(map[string]any)
		if old["status"] != "resolved" || old["resolved_at"] == nil {
			t.Errorf("inc-old %v: want resolved with resolved_at", old)
		}
		for _, c := range []struct{ query, want string }{
			{q("status", "resolved"), "inc-old"},
			{q("model", "mistral-7b"), "inc-mis"},
			{q("cause", "kv_cache.preemption"), "inc-kv"},
			{q("from", ts(t0), "to", ts(t0.Add(25*time.Minute))), "inc-mis"},
		} {
			if ids := incidentIDs(get(t, hs, "/v1/incidents"+c.query, 200)); !reflect.DeepEqual(ids, []string{c.want}) {
				t.Errorf("incidents%s: %v, want [%s]", c.query, ids, c.want)
			}
		}
	})

	t.Run("paginate incidents", func(t *testing.T) {
		var seen []string
		path := "/v1/incidents?limit=1"
		for page := 0; page < 5; page++ {
			m := get(t, hs, path, 200)
			seen = append(seen, incidentIDs(m)...)
			next, _ := m["next_cursor"].(string)
			if next == "" {
				break
			}
			path = "/v1/incidents?limit=1&cursor=" + url.QueryEscape(next)
		}
		if want := []string{"inc-kv", "inc-mis", "inc-old"}; !reflect.DeepEqual(seen, want) {
			t.Errorf("pages %v, want %v", seen, want)
		}
	})

	t.Run("get incident", func(t *testing.T) {
		m := get(t, hs, "/v1/incidents/inc-kv", 200)
		want := fixtureIncidents()[1].doc
		wb, _ := json.Marshal(want)
		var wm map[string]any
		_ = json.Unmarshal(wb, &wm)
		if !reflect.DeepEqual(m, wm) {
			t.Errorf("GET /v1/incidents/inc-kv is not the stored v1 payload of version 2:\n got %v\nwant %v", m, wm)
		}
		req, _ := http.NewRequest("GET", hs.URL+"/v1/incidents/inc-kv", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("If-None-Match", `"2"`)
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotModified {
			t.Errorf("If-None-Match of the current version: %d, want 304", resp.StatusCode)
		}
		problem(t, hs, "GET", "/v1/incidents/nope", testToken, 404, "not-found")
	})

	t.Run("exemplars", func(t *testing.T) {
		m := get(t, hs, "/v1/incidents/inc-kv/exemplars", 200)
		ex := m["exemplars"].([]any)
		if len(ex) != 2 {
			t.Fatalf("exemplars %v: want trace-35-01 and trace-36-03", ex)
		}
		e0 := ex[0].(map[string]any)
		if e0["trace_id"] != "trace-35-01" || !reflect.DeepEqual(e0["culprit_ranks"], []any{1.0, 2.0}) {
			t.Errorf("first exemplar %v: want trace-35-01 of culprits 1 and 2", e0)
		}
		rs := e0["requests"].([]any)
		if len(rs) != 1 {
			t.Fatalf("trace-35-01 requests %v: want one (duplicates collapsed by FINAL)", rs)
		}
		r := rs[0].(map[string]any)
		want := reqs[35*22+1]
		if r["uid"] != "req-35-01" || r["host"] != "node-2" || !near(r["e2e_ms"].(float64), want.e2e) {
			t.Errorf("exemplar request %v: want req-35-01 on node-2 with e2e %v", r, want.e2e)
		}
	})

	t.Run("p99 by scope", func(t *testing.T) {
		m := get(t, hs, "/v1/p99/scopes"+q("by", "model", "from", ts(t0), "to", ts(winEnd)), 200)
		groups := m["groups"].([]any)
		if len(groups) != 2 {
			t.Fatalf("groups %v: want llama-3-8b and mistral-7b", groups)
		}
		byModel := map[string][]float64{}
		errs := map[string]float64{}
		for _, r := range reqs {
			byModel[r.model] = append(byModel[r.model], r.e2e)
			errs[r.model] += float64(r.errFlag)
		}
		for i, model := range []string{"llama-3-8b", "mistral-7b"} { // slowest first
			g := groups[i].(map[string]any)
			if g["key"].(map[string]any)["model"] != model {
				t.Fatalf("group %d: %v, want %s", i, g["key"], model)
			}
			vals := byModel[model]
			if g["requests"] != float64(len(vals)) || g["errors"] != errs[model] ||
				!near(g["p99_ms"].(float64), quantileExact(vals, 0.99)) || !near(g["p50_ms"].(float64), quantileExact(vals, 0.5)) {
				t.Errorf("%s: %v, want requests %d errors %v p50 %v p99 %v", model, g, len(vals), errs[model], quantileExact(vals, 0.5), quantileExact(vals, 0.99))
			}
		}
		if m := get(t, hs, "/v1/p99/scopes"+q("by", "service", "from", ts(t0), "to", ts(winEnd), "service", "batch"), 200); len(m["groups"].([]any)) != 1 {
			t.Errorf("service=batch: %v", m["groups"])
		}
	})

	t.Run("p99 by entity", func(t *testing.T) {
		m := get(t, hs, "/v1/p99/entities"+q("by", "gpu", "model", "llama-3-8b", "from", ts(winStart), "to", ts(winEnd)), 200)
		groups := m["groups"].([]any)
		if len(groups) != 2 {
			t.Fatalf("groups %v: want GPU-b and GPU-a", groups)
		}
		var slow []float64
		for _, r := range reqs {
			if r.model == "llama-3-8b" && r.gpu == "GPU-b" && !r.start.Before(winStart) && r.start.Before(winEnd) {
				slow = append(slow, r.e2e)
			}
		}
		g := groups[0].(map[string]any)
		if k := g["key"].(map[string]any); k["gpu"] != "GPU-b" || k["host"] != "node-2" {
			t.Errorf("slowest GPU %v: want node-2/GPU-b", k)
		}
		if g["requests"] != float64(len(slow)) || !near(g["p99_ms"].(float64), quantileExact(slow, 0.99)) || !near(g["max_ms"].(float64), quantileExact(slow, 1)) {
			t.Errorf("GPU-b %v: want %d requests, p99 %v", g, len(slow), quantileExact(slow, 0.99))
		}
		if m := get(t, hs, "/v1/p99/entities"+q("by", "engine", "from", ts(t0), "to", ts(winEnd), "limit", "1"), 200); len(m["groups"].([]any)) != 1 || m["truncated"] != true {
			t.Errorf("limit 1: %v groups, truncated %v; want 1 and true", len(m["groups"].([]any)), m["truncated"])
		}
	})

	t.Run("p99 per minute", func(t *testing.T) {
		m := get(t, hs, "/v1/p99/timeseries"+q("model", "llama-3-8b", "from", ts(t0), "to", ts(winEnd)), 200)
		pts := m["points"].([]any)
		if len(pts) != 45 {
			t.Fatalf("%d points, want 45", len(pts))
		}
		var minute35 []float64
		for _, r := range reqs {
			if r.model == "llama-3-8b" && r.start.Sub(t0) >= 35*time.Minute && r.start.Sub(t0) < 36*time.Minute {
				minute35 = append(minute35, r.e2e)
			}
		}
		p := pts[35].(map[string]any)
		if p["minute"] != ts(t0.Add(35*time.Minute)) || p["requests"] != 20.0 || !near(p["p99_ms"].(float64), quantileExact(minute35, 0.99)) {
			t.Errorf("minute 35: %v, want 20 requests, p99 %v", p, quantileExact(minute35, 0.99))
		}
		m = get(t, hs, "/v1/p99/timeseries"+q("model", "llama-3-8b", "signal", "ttft_ms", "from", ts(t0), "to", ts(t0.Add(time.Minute))), 200)
		if len(m["points"].([]any)) != 1 || m["signal"] != "ttft_ms" {
			t.Errorf("ttft one minute: %v", m)
		}
	})

	t.Run("request drill-down", func(t *testing.T) {
		m := get(t, hs, "/v1/requests/req-35-01", 200)
		want := reqs[35*22+1]
		if m["trace_id"] != "trace-35-01" || m["host"] != "node-2" || m["gpu"] != "GPU-b" || m["start"] != want.start.Format(time.RFC3339Nano) {
			t.Errorf("identity %v", m)
		}
		lat := m["latency"].(map[string]any)
		if !near(lat["e2e_ms"].(float64), want.e2e) || !near(lat["ttft_ms"].(float64), want.ttft) {
			t.Errorf("latency %v, want e2e %v ttft %v", lat, want.e2e, want.ttft)
		}
		f := m["features"].(map[string]any)
		if kv := f["kv_usage_max"].(map[string]any); kv["value"] != 0.97 || kv["age_ms"] != 100.0 {
			t.Errorf("kv_usage_max %v: want 0.97, age 100", kv)
		}
		if ph := f["prefix_hit_ratio"].(map[string]any); ph["value"] != nil {
			t.Errorf("prefix_hit_ratio %v: NaN must be null", ph)
		}
		if m["attributes"].(map[string]any)["http.route"] != "/v1/chat/completions" {
			t.Errorf("attributes %v", m["attributes"])
		}
		stalls := m["stalls"].([]any)
		if len(stalls) != 2 {
			t.Fatalf("stalls %v: want 2", stalls)
		}
		s1 := stalls[1].(map[string]any)
		if s1["token_index"] != 50.0 || s1["duration_ms"] != 250.0 || !reflect.DeepEqual(s1["events"], []any{"prefill_batched", "kv_high"}) {
			t.Errorf("second stall %v", s1)
		}
		problem(t, hs, "GET", "/v1/requests/req-nope", testToken, 404, "not-found")
		// Out of the given range: not found.
		problem(t, hs, "GET", "/v1/requests/req-35-01"+q("from", ts(t0.Add(-time.Hour)), "to", ts(t0)), testToken, 404, "not-found")
	})
}

func incidentIDs(m map[string]any) []string {
	var ids []string
	for _, i := range m["incidents"].([]any) {
		ids = append(ids, i.(map[string]any)["incident_id"].(string))
	}
	return ids
}

func nopServer(t *testing.T, db DB) *httptest.Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Token = testToken
	srv, err := New(db, cfg, Options{Now: func() time.Time { return fixedNow }})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs
}

// TestAPIAuth: every route but the probes needs the bearer token.
func TestAPIAuth(t *testing.T) {
	hs := nopServer(t, nopDB{})
	for _, p := range []string{"/v1/incidents", "/v1/incidents/x", "/v1/p99/scopes?by=model", "/v1/requests/x", "/openapi.json", "/incidents/x/report", "/incidents/x/plots/health.svg"} {
		problem(t, hs, "GET", p, "", 401, "unauthorized")
		problem(t, hs, "GET", p, "wrong-token-0123456789", 401, "unauthorized")
		problem(t, hs, "GET", p, testToken+"x", 401, "unauthorized")
	}
	status, _, _ := call(t, hs, "GET", "/v1/incidents", "")
	if status != 401 {
		t.Fatal(status)
	}
	resp, err := hs.Client().Get(hs.URL + "/v1/incidents")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	// The probes are open; readiness follows ClickHouse (nopDB is down).
	do(t, hs, "GET", "/healthz", "", 200)
	problem(t, hs, "GET", "/readyz", "", 503, "store-unavailable")
	// A valid token passes auth (and then fails on the missing store).
	problem(t, hs, "GET", "/v1/incidents", testToken, 500, "internal")
}

// TestReadyzUnreachable: a real client pointed at a closed port is not ready.
func TestReadyzUnreachable(t *testing.T) {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{"127.0.0.1:1"}, DialTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hs := nopServer(t, connDB{conn})
	problem(t, hs, "GET", "/readyz", "", 503, "store-unavailable")
	// It says which dependency failed, not where it is or what it said.
	if _, _, body := call(t, hs, "GET", "/readyz", ""); !strings.Contains(string(body), "ClickHouse") ||
		strings.Contains(string(body), "127.0.0.1") || strings.Contains(string(body), "dial") {
		t.Errorf("/readyz shows internals or no check: %s", body)
	}
}

// TestAPILimits: ranges, limits and parameters are checked before any query.
func TestAPILimits(t *testing.T) {
	hs := nopServer(t, nopDB{})
	for _, c := range []struct {
		path string
		kind string
	}{
		{"/v1/p99/timeseries" + q("from", ts(t0), "to", ts(t0.Add(25*time.Hour))), "invalid-time-range"},
		{"/v1/p99/timeseries" + q("from", ts(t0)), "invalid-time-range"},
		{"/v1/p99/timeseries" + q("to", ts(t0)), "invalid-time-range"},
		{"/v1/p99/timeseries" + q("from", ts(t0), "to", ts(t0)), "invalid-time-range"},
		{"/v1/p99/timeseries" + q("from", ts(t0.Add(time.Hour)), "to", ts(t0)), "invalid-time-range"},
		{"/v1/p99/timeseries" + q("from", "yesterday", "to", ts(t0)), "invalid-parameter"},
		{"/v1/p99/timeseries" + q("from", ts(t0), "to", ts(t0.Add(time.Hour)), "signal", "bogus"), "invalid-parameter"},
		{"/v1/p99/timeseries" + q("from", ts(t0), "to", ts(t0.Add(time.Hour)), "modle", "x"), "invalid-parameter"},
		{"/v1/p99/scopes" + q("by", "gpu", "from", ts(t0), "to", ts(t0.Add(time.Hour))), "invalid-parameter"},
		{"/v1/p99/entities" + q("by", "model", "from", ts(t0), "to", ts(t0.Add(time.Hour))), "invalid-parameter"},
		{"/v1/p99/entities" + q("by", "host", "from", ts(t0), "to", ts(t0.Add(time.Hour)), "limit", "0"), "invalid-parameter"},
		{"/v1/p99/entities" + q("by", "host", "from", ts(t0), "to", ts(t0.Add(time.Hour)), "limit", "501"), "invalid-parameter"},
		{"/v1/p99/entities" + q("by", "host", "from", ts(t0), "to", ts(t0.Add(time.Hour)), "host", "a", "host", "b"), "invalid-parameter"},
		{"/v1/incidents" + q("limit", "abc"), "invalid-parameter"},
		{"/v1/incidents" + q("limit", "100000"), "invalid-parameter"},
		{"/v1/incidents" + q("cursor", "not-a-cursor"), "invalid-parameter"},
		{"/v1/incidents" + q("from", ts(t0.Add(-100*24*time.Hour)), "to", ts(t0)), "invalid-time-range"},
		{"/v1/incidents" + q("status", "a b"), "invalid-parameter"},
		{"/v1/requests/x" + q("from", ts(t0.Add(-8*24*time.Hour)), "to", ts(t0)), "invalid-time-range"},
		{"/v1/requests/" + strings.Repeat("x", 300), "invalid-parameter"},
		{"/incidents/x/plots/latency_cdf.png", "not-found"},
		{"/incidents/x/plots/nope.svg", "not-found"},
	} {
		problem(t, hs, "GET", c.path, testToken, 400+boolInt(c.kind == "not-found")*4, c.kind)
	}
	problem(t, hs, "GET", "/v2/nothing", testToken, 404, "not-found")
	problem(t, hs, "POST", "/v1/incidents", testToken, 405, "method-not-allowed")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestReportLinks: a signed link opens the report without a bearer token;
// a tampered or expired one does not.
func TestReportLinks(t *testing.T) {
	st := chstoretest.Fresh(t)
	loadFixture(t, st)
	srv, hs := serverOver(t, st, func(c *Config) { c.BaseURL = "https://tailcause.example.com" })
	link := srv.ReportURL("inc-kv")
	if !strings.HasPrefix(link, "https://tailcause.example.com/incidents/inc-kv/report?exp=") {
		t.Fatalf("report url %s", link)
	}
	u, _ := url.Parse(link)
	status, ct, body := call(t, hs, "GET", u.RequestURI(), "")
	if status != 200 || !strings.HasPrefix(ct, "text/html") || !strings.Contains(string(body), "Incident inc-kv") {
		t.Fatalf("signed link: %d %s", status, ct)
	}
	plot := "/incidents/inc-kv/plots/health.svg?" + u.RawQuery
	if status, ct, _ := call(t, hs, "GET", plot, ""); status != 200 || ct != "image/svg+xml" {
		t.Errorf("plot with the link's signature: %d %s", status, ct)
	}
	problem(t, hs, "GET", strings.Replace(u.RequestURI(), "sig=", "sig=0", 1), "", 401, "unauthorized")
	problem(t, hs, "GET", "/incidents/inc-mis/report?"+u.RawQuery, "", 401, "unauthorized") // signed for another incident
	// The same link, after it expired.
	cfg := DefaultConfig()
	cfg.Token = testToken
	later, err := New(ClickHouse(st), cfg, Options{Now: func() time.Time { return fixedNow.Add(8 * 24 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	hl := httptest.NewServer(later.Handler())
	defer hl.Close()
	problem(t, hl, "GET", u.RequestURI(), "", 401, "unauthorized")
}
