package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"sigs.k8s.io/yaml"

	"github.com/tailcause/tailcause/enrich"
	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/internal/otlpfixture"
	"github.com/tailcause/tailcause/internal/promexpo"
	"github.com/tailcause/tailcause/internal/testkit"
)

// The Collector end-to-end tests run the project's own Collector build
// (deploy/otelcol) with the shipped configs. Only service discovery is
// swapped: each scrape job's kubernetes_sd_configs become a static target
// (a promexpo server replaying the otlp fixture's scrapes as text
// exposition with explicit timestamps) carrying the discovery labels a
// pod on node-1 would have, and the listeners move to free loopback ports.
// Processors, exporters, metric relabelling and pipelines are the shipped
// ones.

// envOtelcolBin names the Collector binary; `make test` sets it.
const envOtelcolBin = "TAILCAUSE_OTELCOL_BIN"

// otelcolBinary returns the Collector build, or skips (fails under CI).
func otelcolBinary(t testing.TB) string {
	t.Helper()
	path := os.Getenv(envOtelcolBin)
	if path == "" {
		// The default of deploy/otelcol/build.sh, for a plain go test.
		cache := os.Getenv("TAILCAUSE_CACHE")
		if cache == "" {
			if home, err := os.UserHomeDir(); err == nil {
				cache = filepath.Join(home, ".cache", "tailcause")
			}
		}
		path = filepath.Join(cache, "otelcol", "bin", "otelcol-tailcause")
	}
	if fi, err := os.Stat(path); err != nil || fi.IsDir() {
		msg := fmt.Sprintf("no Collector build at %s: run `make collector` (deploy/otelcol/build.sh) or set %s", path, envOtelcolBin)
		if os.Getenv("CI") != "" {
			t.Fatal("CI must not skip the Collector end-to-end tests: " + msg)
		}
		t.Skip(msg)
	}
	return path
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// node is the fixture's node: the Collector runs "on" it.
var node = otlpfixture.Host

// collectorConfig loads a shipped config and swaps discovery and
// listeners as described above; targets maps a job name to its address.
func collectorConfig(t *testing.T, name string, targets map[string]string, ports collectorPorts) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "otelcol", name))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(js, &cfg); err != nil {
		t.Fatal(err)
	}
	at := func(m map[string]any, path ...string) map[string]any {
		for _, p := range path {
			next, ok := m[p].(map[string]any)
			if !ok {
				t.Fatalf("%s: no map at %s", name, strings.Join(path, "::"))
			}
			m = next
		}
		return m
	}
	at(cfg, "extensions", "health_check")["endpoint"] = ports.health
	protos := at(cfg, "receivers", "otlp", "protocols")
	at(protos, "grpc")["endpoint"] = ports.grpc
	at(protos, "http")["endpoint"] = ports.http
	jobs, _ := at(cfg, "receivers", "prometheus", "config")["scrape_configs"].([]any)
	if len(jobs) != len(targets) {
		t.Fatalf("%s has %d scrape jobs, the test serves %d", name, len(jobs), len(targets))
	}
	for _, j := range jobs {
		job := j.(map[string]any)
		jobName, _ := job["job_name"].(string)
		addr, ok := targets[jobName]
		if !ok {
			t.Fatalf("%s: no test target for job %q", name, jobName)
		}
		if _, ok := job["kubernetes_sd_configs"]; !ok {
			t.Fatalf("%s: job %q does not use kubernetes_sd_configs", name, jobName)
		}
		delete(job, "kubernetes_sd_configs")
		delete(job, "relabel_configs") // they select among discovered pods
		job["scrape_interval"], job["scrape_timeout"] = "250ms", "200ms"
		labels := map[string]string{"__meta_kubernetes_pod_node_name": node}
		if jobName != "dcgm-exporter" {
			// The engine pod, as kubernetes_sd_configs (role: pod) labels it.
			labels["__meta_kubernetes_pod_name"] = otlpfixture.Pod
			labels["__meta_kubernetes_namespace"] = otlpfixture.Namespace
		}
		job["static_configs"] = []any{map[string]any{"targets": []string{addr}, "labels": labels}}
	}
	tel := at(cfg, "service", "telemetry", "metrics")
	tel["readers"] = []any{map[string]any{"pull": map[string]any{"exporter": map[string]any{"prometheus": map[string]any{
		"host": "127.0.0.1", "port": ports.telemetry,
	}}}}}
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "otelcol.json")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

type collectorPorts struct {
	health, grpc, http string
	telemetry          int
}

func newCollectorPorts(t *testing.T) collectorPorts {
	t.Helper()
	_, tp, _ := net.SplitHostPort(freePort(t))
	var port int
	fmt.Sscan(tp, &port)
	return collectorPorts{health: freePort(t), grpc: freePort(t), http: freePort(t), telemetry: port}
}

// tailBuffer keeps the last bytes a process wrote.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - 64<<10; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// startCollector runs the Collector with config and env until the test
// ends, and waits for its health check.
func startCollector(t *testing.T, bin, config string, ports collectorPorts, env ...string) {
	t.Helper()
	cmd := exec.Command(bin, "--config", config)
	cmd.Env = append(os.Environ(), env...)
	logs := &tailBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("Collector output (tail):\n%s", logs.String())
		}
	})
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("Collector exited: %v\n%s", err, logs.String())
		default:
		}
		if resp, err := c.Get("http://" + ports.health + "/"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Collector not healthy after 60 s:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scrapeTargets serves the fixture's engine and DCGM scrapes, each exactly
// once and in order, on two endpoints; it returns the job → address map.
func scrapeTargets(t *testing.T) (map[string]string, []*promexpo.Handler) {
	t.Helper()
	engine, dcgm := promexpo.NewHandler(promexpo.Options{}), promexpo.NewHandler(promexpo.Options{})
	for _, md := range otlpfixture.Metrics() {
		h := engine
		if job, _ := md.ResourceMetrics().At(0).Resource().Attributes().Get("service.name"); job.Str() == "dcgm-exporter" {
			h = dcgm
		}
		if err := h.Enqueue(md); err != nil {
			t.Fatal(err)
		}
	}
	es, ds := httptest.NewServer(engine), httptest.NewServer(dcgm)
	t.Cleanup(es.Close)
	t.Cleanup(ds.Close)
	host := func(u string) string { return strings.TrimPrefix(u, "http://") }
	return map[string]string{"llm-engine": host(es.URL), "dcgm-exporter": host(ds.URL)}, []*promexpo.Handler{engine, dcgm}
}

func countFixtureScrapes() (engine, gpu int) {
	for _, md := range otlpfixture.Metrics() {
		if job, _ := md.ResourceMetrics().At(0).Resource().Attributes().Get("service.name"); job.Str() == "dcgm-exporter" {
			gpu++
		} else {
			engine++
		}
	}
	return engine, gpu
}

// checkCollectorPath waits for the scrapes to be served and their samples
// to land, asserts that the receiver kept the exposition's timestamps and
// derived the placement, then sends the spans to the Collector and checks
// the enriched rows.
func checkCollectorPath(t *testing.T, st *chstore.Store, handlers []*promexpo.Handler, ports collectorPorts) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for _, h := range handlers {
		for h.Pending() > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the Collector scraped only %d times; %d scrapes still queued", h.Served(), h.Pending())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	engineScrapes, gpuScrapes := countFixtureScrapes()
	// 8 mapped engine metrics and 8 DCGM fields per scrape (as the direct
	// path writes them: enrich's pipeline test).
	wantEngine, wantGPU := uint64(8*engineScrapes), uint64(8*gpuScrapes)
	for countRows(t, st, "SELECT count() FROM engine_samples FINAL") < wantEngine ||
		countRows(t, st, "SELECT count() FROM gpu_samples FINAL") < wantGPU {
		if time.Now().After(deadline) {
			t.Fatalf("samples: engine %d of %d, gpu %d of %d", countRows(t, st, "SELECT count() FROM engine_samples FINAL"), wantEngine,
				countRows(t, st, "SELECT count() FROM gpu_samples FINAL"), wantGPU)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if n := countRows(t, st, "SELECT count() FROM engine_samples FINAL"); n != wantEngine {
		t.Errorf("engine samples %d, want %d", n, wantEngine)
	}
	if n := countRows(t, st, "SELECT count() FROM gpu_samples FINAL"); n != wantGPU {
		t.Errorf("gpu samples %d, want %d", n, wantGPU)
	}
	// The receiver kept the explicit timestamps (2026-11-01), not the
	// scrape time, and derived host and pod as in a cluster.
	t0 := uint64(otlpfixture.T0.UnixNano())
	var minNs, maxNs uint64
	var hosts, pods []string
	if err := st.Conn().QueryRow(context.Background(),
		"SELECT min(time_ns), max(time_ns), groupUniqArray(host), groupUniqArray(pod) FROM engine_samples").Scan(&minNs, &maxNs, &hosts, &pods); err != nil {
		t.Fatal(err)
	}
	if wantMax := t0 + uint64(engineScrapes-1)*uint64(10*time.Second); minNs != t0 || maxNs != wantMax {
		t.Errorf("engine sample times [%d, %d], want [%d, %d]: the receiver did not keep the exposition's timestamps", minNs, maxNs, t0, wantMax)
	}
	if len(hosts) != 1 || hosts[0] != node || len(pods) != 1 || pods[0] != otlpfixture.Pod {
		t.Errorf("engine samples placed on hosts %v pods %v, want %s / %s", hosts, pods, node, otlpfixture.Pod)
	}
	if err := st.Conn().QueryRow(context.Background(),
		"SELECT min(time_ns), max(time_ns) FROM gpu_samples").Scan(&minNs, &maxNs); err != nil {
		t.Fatal(err)
	}
	if wantMax := t0 + uint64(gpuScrapes-1)*uint64(30*time.Second); minNs != t0 || maxNs != wantMax {
		t.Errorf("gpu sample times [%d, %d], want [%d, %d]", minNs, maxNs, t0, wantMax)
	}

	// The engines' spans, over OTLP/gRPC to the Collector.
	conn, err := grpc.NewClient(ports.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ptraceotlp.NewGRPCClient(conn).Export(ctx, ptraceotlp.NewExportRequestFromTraces(otlpfixture.Traces())); err != nil {
		t.Fatal(err)
	}
	waitRows(t, st, otlpfixture.Requests+1)
	otlpfixture.CheckRows(t, st.Conn())
}

// TestCollectorKafkaEndToEnd: engine /metrics and dcgm-exporter scraped by
// the real Collector build, spans received over OTLP, exported to the real
// Kafka by the kafka exporter (config.yaml), consumed by enrich: the rows
// in ClickHouse carry the same enriched values as through ingest.
func TestCollectorKafkaEndToEnd(t *testing.T) {
	bin := otelcolBinary(t)
	kafkaAddr := testkit.Kafka(t)
	st := chstoretest.Fresh(t)
	spans, metrics, logs := testkit.FreshTopic(t, kafkaAddr, 3), testkit.FreshTopic(t, kafkaAddr, 2), testkit.FreshTopic(t, kafkaAddr, 1)

	ec := enrich.DefaultConfig()
	ec.IdleFlush, ec.BatchWait, ec.CommitInterval = time.Second, 200*time.Millisecond, 200*time.Millisecond
	ec.Brokers, ec.SpansTopic, ec.MetricsTopic = []string{kafkaAddr}, spans, metrics
	ec.GroupID, ec.SamplesGroupID = "g-"+spans, "s-"+spans
	ec.DeadLetterTopic = testkit.FreshTopic(t, kafkaAddr, 1)
	p, err := enrich.New(ec, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("enrich: %v", err)
		}
	})

	targets, handlers := scrapeTargets(t)
	ports := newCollectorPorts(t)
	cfg := collectorConfig(t, "config.yaml", targets, ports)
	setTopics(t, cfg, spans, metrics, logs)
	startCollector(t, bin, cfg, ports, "K8S_NODE_NAME="+node, "TAILCAUSE_KAFKA="+kafkaAddr)
	checkCollectorPath(t, st, handlers, ports)
	if n := p.C.Rejected.Load(); n != 0 {
		t.Errorf("enrich rejected %d records from the Collector", n)
	}
}

// setTopics points the kafka exporter of the config at path to fresh topics.
func setTopics(t *testing.T, path, spans, metrics, logs string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	k := cfg["exporters"].(map[string]any)["kafka"].(map[string]any)
	for signal, topic := range map[string]string{"traces": spans, "metrics": metrics, "logs": logs} {
		k[signal].(map[string]any)["topic"] = topic
	}
	if b, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCollectorOTLPEndToEnd: the same with config.otlp.yaml, the
// Collector exporting OTLP/gRPC to ingest (with its bearer token), ingest
// writing Kafka.
func TestCollectorOTLPEndToEnd(t *testing.T) {
	bin := otelcolBinary(t)
	const token = "collector-e2e-token"
	p, st := startTestPipeline(t, token)
	targets, handlers := scrapeTargets(t)
	ports := newCollectorPorts(t)
	cfg := collectorConfig(t, "config.otlp.yaml", targets, ports)
	startCollector(t, bin, cfg, ports, "K8S_NODE_NAME="+node,
		"TAILCAUSE_INGEST_ENDPOINT="+hostPort(p.ingest.GRPCAddr()), "TAILCAUSE_INGEST_TOKEN="+token)
	checkCollectorPath(t, st, handlers, ports)
	if n := p.enrich.C.Rejected.Load(); n != 0 {
		t.Errorf("enrich rejected %d records", n)
	}
}

// TestPromexpoScrapeShape guards the test's own assumption: the fixture's
// scrapes render with explicit timestamps and the exact names the
// telemetry reference lists.
func TestPromexpoScrapeShape(t *testing.T) {
	var all bytes.Buffer
	for _, md := range otlpfixture.Metrics() {
		b, err := promexpo.Append(nil, promexpo.Options{}, md)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	text := all.String()
	ms := fmt.Sprint(otlpfixture.T0.UnixMilli())
	for _, want := range []string{
		"# TYPE vllm:num_preemptions_total counter\n",
		"# TYPE vllm:kv_cache_usage_perc gauge\n",
		`vllm:num_requests_running{model_name="llama-3-8b",engine="0"} 4 ` + ms + "\n",
		`DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="` + otlpfixture.GPU + `",`,
		`Hostname="node-1",pod="vllm-llama-0",namespace="serving",container="vllm"} 1980 ` + ms + "\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
}
