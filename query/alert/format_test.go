package alert

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func testPayload(id, cause, host string) []byte {
	doc := map[string]any{
		"incident_id": id, "status": "firing",
		"slo":    map[string]any{"signal": "e2e_latency", "quantile": 0.99, "threshold_ms": 2500.0, "scope": map[string]string{"model": "llama-3-8b"}},
		"window": map[string]string{"start": "2025-03-01T10:30:00Z", "end": "2025-03-01T10:45:00Z"}, "baseline": map[string]string{"start": "2025-03-01T10:00:00Z", "end": "2025-03-01T10:30:00Z"},
		"observed_p99_ms": 4253.0, "baseline_p99_ms": 1000.0, "requests": 300, "tail_requests": 3,
		"culprits": []map[string]any{
			{"rank": 1, "cause": cause, "entity": map[string]string{"host": host, "gpu": "GPU-b"}, "effect_ms": 2140.0, "ci95_ms": []float64{1810, 2470},
				"attributable_fraction": 0.61, "counterfactual_p99_ms": 2350.0, "health": 0.07, "adjusted_for": []string{}, "evidence": []string{}, "exemplar_trace_ids": []string{}},
		},
		"method": map[string]string{"estimator": "backdoor-ols-hc3", "dag": "default@1", "version": "test"},
	}
	b, _ := json.Marshal(doc)
	return b
}

func TestGenericBody(t *testing.T) {
	ev := Event{IncidentID: "inc-1", Version: 3, Kind: EventOpened, Payload: testPayload("inc-1", "kv_cache.preemption", "node-2")}
	b, err := genericBody(ev, "https://tc.example.com/incidents/inc-1/report?exp=1&sig=ab")
	if err != nil {
		t.Fatal(err)
	}
	var got, doc map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("generic body is not JSON: %v\n%s", err, b)
	}
	_ = json.Unmarshal(ev.Payload, &doc)
	for k, v := range doc {
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("%s: %v, want the v1 value %v", k, got[k], v)
		}
	}
	if got["event"] != "opened" || got["delivery_id"] != "inc-1:3:opened" || got["incident_version"] != 3.0 || got["report_url"] == "" {
		t.Errorf("added fields: %v", got)
	}
	if _, err := genericBody(Event{Payload: []byte(`[1]`)}, ""); err == nil {
		t.Error("a non-object payload was accepted")
	}
}

func TestSlackBody(t *testing.T) {
	ev := Event{IncidentID: "inc-<1>", Version: 2, Kind: EventTopCulpritChanged, Payload: testPayload("inc-<1>", "kv_cache.preemption", "node-2")}
	b, err := slackBody(ev, "https://tc.example.com/incidents/inc-1/report?exp=1&sig=ab")
	if err != nil {
		t.Fatal(err)
	}
	var msg struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
			Text *struct {
				Type, Text string
			} `json:"text"`
			Elements []struct{ Type, Text string } `json:"elements"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(b, &msg); err != nil {
		t.Fatalf("slack body: %v", err)
	}
	if !strings.Contains(msg.Text, "top culprit changed") || !strings.Contains(msg.Text, "kv_cache.preemption") || !strings.Contains(msg.Text, "https://tc.example.com/") {
		t.Errorf("fallback text %q", msg.Text)
	}
	if len(msg.Blocks) != 4 || msg.Blocks[0].Type != "header" || msg.Blocks[3].Type != "context" {
		t.Fatalf("blocks %+v: want header, summary, culprits, context", msg.Blocks)
	}
	if s := msg.Blocks[1].Text.Text; !strings.Contains(s, "inc-&lt;1&gt;") || strings.Contains(s, "<1>") {
		t.Errorf("summary %q: the incident id must be mrkdwn-escaped", s)
	}
	if s := msg.Blocks[2].Text.Text; !strings.Contains(s, "1. `kv_cache.preemption` on host=node-2 gpu=GPU-b: 61% of the tail") {
		t.Errorf("culprits %q", s)
	}
	if s := msg.Blocks[3].Elements[0].Text; s != "<https://tc.example.com/incidents/inc-1/report?exp=1&sig=ab|Open the incident report>" {
		t.Errorf("report link %q", s)
	}
}
