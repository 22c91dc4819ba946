package query

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// The fixture: two models on two hosts. llama-3-8b runs on node-1 (GPU-a)
// and node-2 (GPU-b); from 10:30 to 10:45 node-2's requests slow down by
// 3 s with its KV cache full. Incident inc-kv covers that window.
var (
	t0        = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	winStart  = t0.Add(30 * time.Minute)
	winEnd    = t0.Add(45 * time.Minute)
	fixedNow  = t0.Add(2 * time.Hour)
	testToken = "test-token-0123456789abcdef"
)

type reqFix struct {
	uid, trace, model, service, host, gpu, engine string
	start                                         time.Time
	e2e, ttft, kvMax, waiting                     float64
	errFlag                                       uint8
}

func fixtureRequests() []reqFix {
	var out []reqFix
	for m := 0; m < 45; m++ {
		for i := 0; i < 20; i++ {
			host, gpu := "node-1", "GPU-a"
			if i%2 == 1 {
				host, gpu = "node-2", "GPU-b"
			}
			start := t0.Add(time.Duration(m)*time.Minute + time.Duration(i)*2*time.Second)
			e2e := 800 + 10*float64(i) + float64(m%5)
			kv := 0.5
			inWin := !start.Before(winStart) && start.Before(winEnd)
			if host == "node-2" && inWin {
				e2e += 3000 + 50*float64(i)
				kv = 0.97
			}
			var errFlag uint8
			if i == 19 && m%10 == 0 {
				errFlag = 1
			}
			uid := fmt.Sprintf("req-%02d-%02d", m, i)
			out = append(out, reqFix{uid: uid, trace: fmt.Sprintf("trace-%02d-%02d", m, i), model: "llama-3-8b", service: "chat",
				host: host, gpu: gpu, engine: "0", start: start, e2e: e2e, ttft: e2e / 10, kvMax: kv, waiting: float64(i % 3), errFlag: errFlag})
		}
		// A second model, 2 requests a minute on node-3.
		for i := 0; i < 2; i++ {
			start := t0.Add(time.Duration(m)*time.Minute + time.Duration(30+i)*time.Second)
			out = append(out, reqFix{uid: fmt.Sprintf("mis-%02d-%d", m, i), trace: fmt.Sprintf("mtrace-%02d-%d", m, i), model: "mistral-7b", service: "batch",
				host: "node-3", gpu: "GPU-c", engine: "1", start: start, e2e: 400 + float64(i*100), ttft: 40, kvMax: 0.2, waiting: 0})
		}
	}
	return out
}

// quantileExact is ClickHouse's quantileExact: the element at index
// floor(level·n) of the sorted values (clamped to the last).
func quantileExact(vals []float64, level float64) float64 {
	if len(vals) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), vals...)
	sort.Float64s(s)
	i := int(level * float64(len(s)))
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

var requestCols = chstore.Table{Name: "requests", Columns: []string{
	"uid", "trace_id", "span_id", "request_id", "source", "service", "model", "host", "pod", "engine", "gpu",
	"start_ns", "end_ns", "start_time", "error", "finish_reason",
	"e2e_ms", "ttft_ms", "queue_ms", "prefill_ms", "decode_ms", "inference_ms", "tpot_ms", "kv_transfer_ms",
	"prompt_tokens", "completion_tokens", "cached_tokens", "max_tokens",
	"timeline_source", "itl_p50_ms", "itl_p99_ms", "itl_max_ms", "stall_count", "stall_ms", "retracts",
	"engine_match", "gpu_match",
	"running_at_arrival", "running_age_ms", "waiting_at_arrival", "waiting_age_ms",
	"kv_usage_at_arrival", "kv_usage_max", "kv_usage_age_ms", "preemptions_during", "preemptions_age_ms",
	"prefix_hit_ratio", "prefix_age_ms", "engine_prompt_tps", "engine_gen_tps", "engine_tps_age_ms",
	"sm_clock_min_mhz", "sm_clock_norm_mhz", "sm_clock_ratio", "sm_clock_age_ms",
	"throttle_reasons", "throttle_age_ms", "gpu_temp_max_c", "gpu_temp_age_ms", "power_max_w", "power_age_ms",
	"dram_active_max", "dram_active_age_ms", "pcie_bytes_per_s_max", "pcie_age_ms", "xid_last", "xid_age_ms",
	"attr_keys", "attr_values", "enriched_at",
}}

func requestRow(r reqFix) []any {
	ns := uint64(r.start.UnixNano())
	end := ns + uint64(r.e2e*1e6)
	nan := math.NaN()
	return []any{r.uid, r.trace, "span-" + r.uid, "rid-" + r.uid, "vllm", r.service, r.model, r.host, "pod-" + r.host, r.engine, r.gpu,
		ns, end, r.start.Truncate(time.Second), r.errFlag, "stop",
		r.e2e, r.ttft, 5.0, r.ttft - 5, r.e2e - r.ttft, r.e2e - 5, 20.0, 0.0,
		int64(512), int64(128), int64(64), int64(256),
		"steps", 18.0, 40.0, 55.0, uint32(1), 30.0, uint32(0),
		"pod", "pod",
		4.0, 100.0, r.waiting, 100.0,
		r.kvMax - 0.05, r.kvMax, 100.0, 0.0, 200.0,
		nan, nan, 1500.0, 900.0, 300.0,
		1400.0, 1410.0, 1400.0 / 1410.0, 900.0,
		uint32(0), 900.0, 61.0, 900.0, 300.0, 900.0,
		0.4, 900.0, 1e9, 900.0, uint32(0), 900.0,
		[]string{"http.route"}, []string{"/v1/chat/completions"}, fixedNow.Truncate(time.Second)}
}

var stallCols = chstore.Table{Name: "token_stalls", Columns: []string{
	"request_uid", "trace_id", "service", "model", "host", "pod", "engine", "gpu", "token_index",
	"start_ns", "end_ns", "start_time", "duration_ms", "preemptions", "retracts", "kv_usage_max",
	"throttle_reasons", "sm_clock_min_mhz", "xid_last", "engine_prompt_tps", "events",
}}

var incidentCols = chstore.Table{Name: "incidents", Columns: []string{
	"incident_id", "version", "status", "scope", "scope_keys", "scope_values", "signal", "quantile", "threshold_ms",
	"window_start", "window_end", "baseline_start", "baseline_end", "opened_at", "updated_at", "resolved_at",
	"observed_p99_ms", "baseline_p99_ms", "requests", "tail_requests", "top_cause", "top_entity",
	"method_estimator", "method_dag", "method_version", "payload",
}}

var culpritCols = chstore.Table{Name: "culprits", Columns: []string{
	"incident_id", "version", "rank", "cause", "entity_host", "entity_gpu", "entity_engine", "entity_model", "entity_pod", "entity_service",
	"effect_ms", "ci95_low_ms", "ci95_high_ms", "attributable_fraction", "counterfactual_p99_ms", "health",
	"adjusted_for", "evidence", "exemplar_trace_ids", "computed_at",
}}

// v1 builds a ranked-culprits document (schemas/culprits.v1.schema.json).
func v1(id, status, model string, win, base [2]time.Time, observed float64, culprits []map[string]any) map[string]any {
	if culprits == nil {
		culprits = []map[string]any{}
	}
	return map[string]any{
		"incident_id": id, "status": status,
		"slo":             map[string]any{"signal": "e2e_latency", "quantile": 0.99, "threshold_ms": 2500.0, "scope": map[string]string{"model": model}},
		"window":          map[string]string{"start": win[0].Format(time.RFC3339), "end": win[1].Format(time.RFC3339)},
		"baseline":        map[string]string{"start": base[0].Format(time.RFC3339), "end": base[1].Format(time.RFC3339)},
		"observed_p99_ms": observed, "baseline_p99_ms": 1000.0, "requests": 300, "tail_requests": 3,
		"culprits": culprits,
		"method":   map[string]string{"estimator": "backdoor-ols-hc3", "dag": "default@1", "version": "test"},
	}
}

func culprit(rank int, cause string, entity map[string]string, af, cf, health float64, exemplars ...string) map[string]any {
	if exemplars == nil {
		exemplars = []string{}
	}
	return map[string]any{"rank": rank, "cause": cause, "entity": entity, "effect_ms": 3000.0 * af, "ci95_ms": []float64{2000 * af, 4000 * af},
		"attributable_fraction": af, "counterfactual_p99_ms": cf, "health": health,
		"adjusted_for": []string{"prompt_tokens"}, "evidence": []string{"kv_usage_max 0.97 vs 0.50"}, "exemplar_trace_ids": exemplars}
}

type incFix struct {
	id      string
	version uint64
	status  string
	model   string
	opened  time.Time
	win     [2]time.Time
	doc     map[string]any
}

func fixtureIncidents() []incFix {
	win := [2]time.Time{winStart, winEnd}
	base := [2]time.Time{t0, winStart}
	kv := []map[string]any{
		culprit(1, "kv_cache.preemption", map[string]string{"host": "node-2", "gpu": "GPU-b", "engine": "0", "model": "llama-3-8b"}, 0.61, 1900, 0.07, "trace-35-01", "trace-36-03"),
		culprit(2, "queue.saturation", map[string]string{"host": "node-2", "engine": "0"}, 0.2, 3400, 0.4, "trace-35-01"),
		culprit(3, "gpu.thermal_throttle", map[string]string{"gpu": "GPU-a", "host": "node-1"}, 0.05, 3900, 0.9),
	}
	return []incFix{
		// inc-kv: version 1 had a different top culprit; version 2 is newest.
		{"inc-kv", 1, "firing", "llama-3-8b", winStart.Add(2 * time.Minute), win, v1("inc-kv", "firing", "llama-3-8b", win, base, 4200, kv[1:2])},
		{"inc-kv", 2, "firing", "llama-3-8b", winStart.Add(2 * time.Minute), win, v1("inc-kv", "firing", "llama-3-8b", win, base, 4253, kv)},
		{"inc-old", 3, "resolved", "llama-3-8b", t0.Add(-24 * time.Hour), [2]time.Time{t0.Add(-24 * time.Hour), t0.Add(-23 * time.Hour)},
			v1("inc-old", "firing", "llama-3-8b", [2]time.Time{t0.Add(-24 * time.Hour), t0.Add(-23 * time.Hour)}, [2]time.Time{t0.Add(-25 * time.Hour), t0.Add(-24 * time.Hour)}, 3000,
				[]map[string]any{culprit(1, "gpu.power_cap", map[string]string{"gpu": "GPU-a"}, 0.5, 2000, 0.2)})},
		{"inc-mis", 1, "firing", "mistral-7b", t0.Add(10 * time.Minute), [2]time.Time{t0.Add(10 * time.Minute), t0.Add(20 * time.Minute)},
			v1("inc-mis", "firing", "mistral-7b", [2]time.Time{t0.Add(10 * time.Minute), t0.Add(20 * time.Minute)}, [2]time.Time{t0, t0.Add(10 * time.Minute)}, 2600,
				[]map[string]any{culprit(1, "entity.degraded", map[string]string{"host": "node-3"}, 0.3, 2400, 0.3)})},
	}
}

func incidentRow(f incFix) ([]any, [][]any) {
	payload, _ := json.Marshal(f.doc)
	cs := f.doc["culprits"].([]map[string]any)
	topCause, topEntity := "", ""
	var crows [][]any
	for _, c := range cs {
		e := c["entity"].(map[string]string)
		if c["rank"].(int) == 1 {
			topCause = c["cause"].(string)
			topEntity = entityLabel(e)
		}
		ci := c["ci95_ms"].([]float64)
		crows = append(crows, []any{f.id, f.version, uint16(c["rank"].(int)), c["cause"], e["host"], e["gpu"], e["engine"], e["model"], e["pod"], e["service"],
			c["effect_ms"], ci[0], ci[1], c["attributable_fraction"], c["counterfactual_p99_ms"], c["health"],
			c["adjusted_for"], c["evidence"], c["exemplar_trace_ids"], fixedNow.Truncate(time.Second)})
	}
	resolved := time.Unix(0, 0).UTC()
	if f.status == "resolved" {
		resolved = f.win[1]
	}
	base := f.doc["baseline"].(map[string]string)
	bs, _ := time.Parse(time.RFC3339, base["start"])
	be, _ := time.Parse(time.RFC3339, base["end"])
	return []any{f.id, f.version, f.status, "model=" + f.model, []string{"model"}, []string{f.model}, "e2e_latency", 0.99, 2500.0,
		f.win[0], f.win[1], bs, be, f.opened, f.opened.Add(time.Duration(f.version) * time.Minute), resolved,
		f.doc["observed_p99_ms"], 1000.0, uint64(300), uint64(3), topCause, topEntity,
		"backdoor-ols-hc3", "default@1", "test", string(payload)}, crows
}

// loadFixture inserts the fixture (requests twice: FINAL must collapse
// the duplicates, as the at-least-once enrich path may write them).
func loadFixture(t *testing.T, st *chstore.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rows [][]any
	for _, r := range fixtureRequests() {
		rows = append(rows, requestRow(r))
	}
	for pass := 0; pass < 2; pass++ {
		if err := st.Insert(ctx, requestCols, rows); err != nil {
			t.Fatalf("insert requests: %v", err)
		}
	}
	// Two stalls of req-35-01 (node-2, in the window).
	r := fixtureRequests()[35*22+1]
	if r.uid != "req-35-01" {
		t.Fatalf("fixture order changed: %s", r.uid)
	}
	s0 := uint64(r.start.UnixNano()) + 500e6
	var stalls [][]any
	for i, ev := range [][]string{{"preemption"}, {"prefill_batched", "kv_high"}} {
		st0 := s0 + uint64(i)*1e9
		stalls = append(stalls, []any{r.uid, r.trace, r.service, r.model, r.host, "pod-" + r.host, r.engine, r.gpu, uint32(10 + 40*i),
			st0, st0 + 250e6, time.Unix(0, int64(st0)).UTC().Truncate(time.Second), 250.0, float64(1 - i), uint32(0), 0.97,
			uint32(0), 1400.0, uint32(0), 1500.0, ev})
	}
	if err := st.Insert(ctx, stallCols, stalls); err != nil {
		t.Fatalf("insert stalls: %v", err)
	}
	var irows, crows [][]any
	for _, f := range fixtureIncidents() {
		ir, cr := incidentRow(f)
		irows = append(irows, ir)
		crows = append(crows, cr...)
	}
	if err := st.Insert(ctx, incidentCols, irows); err != nil {
		t.Fatalf("insert incidents: %v", err)
	}
	if err := st.Insert(ctx, culpritCols, crows); err != nil {
		t.Fatalf("insert culprits: %v", err)
	}
}

// testServer is a server over a fresh database with the fixture loaded.
func testServer(t *testing.T, mutate func(*Config)) (*Server, *httptest.Server) {
	t.Helper()
	st := chstoretest.Fresh(t)
	loadFixture(t, st)
	return serverOver(t, st, mutate)
}

func serverOver(t *testing.T, st *chstore.Store, mutate func(*Config)) (*Server, *httptest.Server) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Token = testToken
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := New(ClickHouse(st), cfg, Options{Now: func() time.Time { return fixedNow }})
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return srv, hs
}

// call does one request and returns status, content type and body.
func call(t *testing.T, hs *httptest.Server, method, path, token string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, hs.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	buf, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), buf
}
