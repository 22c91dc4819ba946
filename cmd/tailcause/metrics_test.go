package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/otlpfixture"
	"github.com/tailcause/tailcause/internal/testkit"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricValue finds one sample line "name{labels} value" (labels given as
// they are printed, or none).
func metricValue(body, series string) (string, bool) {
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, series+" ") {
			return strings.TrimPrefix(line, series+" "), true
		}
	}
	return "", false
}

// TestAllServesMetricsAndReadiness runs `tailcause all --embedded-kafka`
// as a user would, sends the fixture over OTLP/HTTP, and reads /metrics and
// /readyz: the counters moved by exactly what was sent and written.
func TestAllServesMetricsAndReadiness(t *testing.T) {
	chAddr := testkit.ClickHouse(t)
	db := testkit.FreshDatabase(t, chAddr)
	httpAddr, metricsAddr := freePort(t), freePort(t)
	var stderr bytes.Buffer
	e := &env{stdout: io.Discard, stderr: &stderr, log: slog.New(slog.NewTextHandler(&stderr, nil)), getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, e, []string{"all", "--embedded-kafka", "--clickhouse", chAddr, "--database", db, "--ttl", "0", "--insecure-no-auth", // the fixture is dated 2026-11-01
			"--grpc-addr", freePort(t), "--http-addr", httpAddr, "--metrics-addr", metricsAddr, "--idle-flush", "1s", "--batch-wait", "200ms"})
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("tailcause all exited %d: %s", code, stderr.String())
		}
	}()
	base := "http://" + metricsAddr
	deadline := time.Now().Add(60 * time.Second)
	for {
		if code, _ := httpGet(t, base+"/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			code, body := httpGet(t, base+"/readyz")
			t.Fatalf("/readyz never became ready: %d %s\n%s", code, body, stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, _ := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d", code)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
	defer scancel()
	for _, md := range otlpfixture.Metrics() {
		if err := sendMetricsHTTP(sctx, c, "http://"+httpAddr, "", md); err != nil {
			t.Fatal(err)
		}
	}
	if err := sendTracesHTTP(sctx, c, "http://"+httpAddr, "", otlpfixture.Traces()); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"tailcause_enrich_requests_total":                                         "13",
		"tailcause_enrich_rejected_total":                                         "0",
		`tailcause_ingest_requests_total{signal="traces",transport="http"}`:       "1",
		`tailcause_ingest_requests_total{signal="metrics",transport="http"}`:      "18",
		`tailcause_ingest_accepted_items_total{signal="traces",transport="http"}`: "43",
		"tailcause_enrich_unknown_metrics_total":                                  "13",
		"tailcause_join_hosts":                                                    "1",
		"tailcause_join_dropped_samples_total":                                    "0",
		"tailcause_join_evicted_hosts_total":                                      "0",
	}
	var body string
	for deadline := time.Now().Add(90 * time.Second); ; {
		_, body = httpGet(t, base+"/metrics")
		if v, _ := metricValue(body, "tailcause_enrich_requests_total"); v == "13" {
			if v, _ := metricValue(body, "tailcause_enrich_unknown_metrics_total"); v == "13" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("counters did not reach their values:\n%s", grepLines(body, "tailcause_"))
		}
		time.Sleep(300 * time.Millisecond)
	}
	for series, v := range want {
		if got, ok := metricValue(body, series); !ok || got != v {
			t.Errorf("%s = %q (present %v), want %s", series, got, ok, v)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", grepLines(body, "tailcause_"))
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestCausalServesMetrics runs the scheduled mode against an empty store
// (every evaluation is ok: too few requests to judge): the evaluation
// counters, the latency histogram and the open-incident gauge move.
func TestCausalServesMetrics(t *testing.T) {
	chAddr := testkit.ClickHouse(t)
	db := testkit.FreshDatabase(t, chAddr)
	metricsAddr := freePort(t)
	var stderr bytes.Buffer
	e := &env{stdout: io.Discard, stderr: &stderr, log: slog.New(slog.NewTextHandler(&stderr, nil)), getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, e, []string{"causal", "--clickhouse", chAddr, "--database", db, "--metrics-addr", metricsAddr,
			"--interval", "200ms", "--scope", "model=llama"})
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("tailcause causal exited %d: %s", code, stderr.String())
		}
	}()
	var body string
	for deadline := time.Now().Add(60 * time.Second); ; {
		_, body = httpGet(t, "http://"+metricsAddr+"/metrics")
		ok, _ := metricValue(body, `tailcause_causal_evaluations_total{result="ok"}`)
		if ok != "" && ok != "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no evaluation counted:\n%s\n%s", grepLines(body, "tailcause_causal"), stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if v, _ := metricValue(body, `tailcause_causal_evaluations_total{result="error"}`); v != "0" {
		t.Errorf("failed evaluations %q:\n%s", v, stderr.String())
	}
	if v, ok := metricValue(body, "tailcause_causal_evaluation_seconds_count"); !ok || v == "0" {
		t.Errorf("evaluation latency histogram count %q", v)
	}
	if v, _ := metricValue(body, "tailcause_causal_open_incidents"); v != "0" {
		t.Errorf("open incidents %q, want 0", v)
	}
	if v, _ := metricValue(body, `tailcause_causal_transitions_total{kind="open"}`); v != "0" {
		t.Errorf("open transitions %q, want 0", v)
	}
}
