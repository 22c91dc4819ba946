package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"sigs.k8s.io/yaml"

	"github.com/tailcause/tailcause/internal/otlpfixture"
	"github.com/tailcause/tailcause/internal/testkit"
)

// BenchmarkIngestVsCollector measures `tailcause ingest` (the binary,
// built from this tree) against the project's own Collector build
// (deploy/otelcol, `make collector`) doing the same job: OTLP/gRPC spans in,
// Kafka records out in the kafka exporter's layout (one record per trace,
// keyed by trace id, otlp_proto), on the same broker, with the same
// payloads and the same producer compression (lz4, as config.yaml ships).
// Each process runs on its own; the figure is spans per CPU-second of that
// process (utime + stime from /proc/<pid>/stat) between the first export
// and the moment the topic holds every record (the Collector acknowledges
// before Kafka does; ingest after), and the ratio is ingest's over the
// Collector's, measured in the same run.
//
// Two Collector configurations: "collector" is config.yaml as shipped
// (memory_limiter, resource/node, batch processors, then the kafka
// exporter; only the prometheus receiver is dropped, its targets need
// Kubernetes), "collector-bare" the otlp receiver straight into the same
// kafka exporter. The rounds alternate between the three processes, so
// the machine's noise falls on all of them alike.
//
//	go test -run '^$' -bench IngestVsCollector -benchtime 1x ./cmd/tailcause/
//
// TAILCAUSE_BENCH_SPANS sets the spans per round (default 100000).
func BenchmarkIngestVsCollector(b *testing.B) {
	kafkaAddr := testkit.Kafka(b)
	otelcol := otelcolBinary(b)
	spans := 100000
	if v := os.Getenv("TAILCAUSE_BENCH_SPANS"); v != "" {
		if _, err := fmt.Sscan(v, &spans); err != nil || spans < 1000 {
			b.Fatalf("TAILCAUSE_BENCH_SPANS=%q: want a number of at least 1000", v)
		}
	}
	const perExport, senders, rounds = 100, 4, 2
	load := otlpfixture.Load{Hosts: 16, Duration: 10 * time.Minute, Requests: spans, Seed: 11}
	var reqs [][]byte
	for _, td := range load.Traces(perExport) {
		pb, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
		if err != nil {
			b.Fatal(err)
		}
		reqs = append(reqs, pb)
	}
	warm := otlpfixture.Load{Hosts: 2, Duration: time.Minute, Requests: 500, Seed: 12}
	var warmReqs [][]byte
	for _, td := range warm.Traces(perExport) {
		pb, _ := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
		warmReqs = append(warmReqs, pb)
	}
	tailcause := buildTailcause(b)
	kafkaPID, _ := testkit.ListenerPID(kafkaAddr)

	var targets []*ingestTarget
	for _, name := range []string{"ingest", "collector", "collector-bare"} {
		tg := &ingestTarget{name: name, topic: testkit.FreshTopic(b, kafkaAddr, 3), grpc: freePort(b)}
		metrics, logs := testkit.FreshTopic(b, kafkaAddr, 1), testkit.FreshTopic(b, kafkaAddr, 1)
		var cmd *exec.Cmd
		if name == "ingest" {
			tg.token = "bench-token"
			cmd = exec.Command(tailcause, "ingest", "--kafka", kafkaAddr, "--grpc-addr", tg.grpc, "--http-addr", "",
				"--traces-topic", tg.topic, "--metrics-topic", metrics, "--logs-topic", logs,
				"--compression", "lz4", "--metrics-addr", freePort(b))
			cmd.Env = append(os.Environ(), "TAILCAUSE_INGEST_TOKEN="+tg.token)
		} else {
			cfg := benchCollectorConfig(b, name == "collector-bare", kafkaAddr, tg.grpc, tg.topic, metrics, logs)
			cmd = exec.Command(otelcol, "--config", cfg)
			cmd.Env = append(os.Environ(), "K8S_NODE_NAME="+otlpfixture.Host)
		}
		tg.start(b, cmd)
		targets = append(targets, tg)
	}
	ctx := context.Background()
	for _, tg := range targets {
		// Connections, metadata and the first produce before the clock.
		if err := tg.send(ctx, warmReqs, senders, true); err != nil {
			b.Fatalf("%s: warm-up: %v\n%s", tg.name, err, tg.logs.String())
		}
		if err := tg.waitRecords(ctx, kafkaAddr, int64(warm.Requests)); err != nil {
			b.Fatalf("%s: warm-up: %v\n%s", tg.name, err, tg.logs.String())
		}
	}
	for i := 0; i < b.N; i++ {
		for r := 0; r < rounds; r++ {
			for _, tg := range targets {
				c0, k0, t0 := tg.cpu(b), kafkaCPU(kafkaPID), time.Now()
				if err := tg.send(ctx, reqs, senders, false); err != nil {
					b.Fatalf("%s: %v\n%s", tg.name, err, tg.logs.String())
				}
				if err := tg.waitRecords(ctx, kafkaAddr, tg.expect+int64(spans)); err != nil {
					b.Fatalf("%s: %v\n%s", tg.name, err, tg.logs.String())
				}
				tg.wall += time.Since(t0)
				tg.cpuTime += tg.cpu(b) - c0
				tg.kafkaCPU += kafkaCPU(kafkaPID) - k0
				tg.spans += int64(spans)
				b.Logf("round %d: %-14s %7.0f spans/s, %7.0f spans per CPU-second", r+1, tg.name,
					float64(spans)/time.Since(t0).Seconds(), float64(spans)/(tg.cpu(b)-c0).Seconds())
			}
		}
	}
	per := func(tg *ingestTarget) float64 { return float64(tg.spans) / tg.cpuTime.Seconds() }
	for _, tg := range targets {
		b.ReportMetric(per(tg), tg.name+"-spans/cpu-s")
		b.ReportMetric(float64(tg.spans)/tg.wall.Seconds(), tg.name+"-spans/s")
		if kafkaPID != 0 {
			b.ReportMetric(tg.kafkaCPU.Seconds()*1e5/float64(tg.spans), tg.name+"-kafka-cpu-s/100k-spans")
		}
	}
	b.ReportMetric(per(targets[0])/per(targets[1]), "ratio")
	b.ReportMetric(per(targets[0])/per(targets[2]), "ratio-bare")
}

// ingestTarget is one process under test.
type ingestTarget struct {
	name, topic, grpc, token string
	cmd                      *exec.Cmd
	logs                     *tailBuffer
	expect                   int64 // records in the topic so far
	spans                    int64
	wall, cpuTime, kafkaCPU  time.Duration
}

func (tg *ingestTarget) start(b testing.TB, cmd *exec.Cmd) {
	b.Helper()
	tg.cmd, tg.logs = cmd, &tailBuffer{}
	cmd.Stdout, cmd.Stderr = tg.logs, tg.logs
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", tg.name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
}

func (tg *ingestTarget) cpu(b testing.TB) time.Duration {
	b.Helper()
	d, err := testkit.ProcessCPU(tg.cmd.Process.Pid)
	if err != nil {
		b.Fatalf("%s: %v", tg.name, err)
	}
	return d
}

func kafkaCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	d, _ := testkit.ProcessCPU(pid)
	return d
}

// send exports every request over OTLP/gRPC from `senders` concurrent
// clients. retry (the warm-up) retries until the server is up.
func (tg *ingestTarget) send(ctx context.Context, reqs [][]byte, senders int, retry bool) error {
	conn, err := grpc.NewClient(tg.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := ptraceotlp.NewGRPCClient(conn)
	if tg.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tg.token)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(reqs) {
					return
				}
				req := ptraceotlp.NewExportRequest()
				if err := req.UnmarshalProto(reqs[i]); err != nil {
					errs <- err
					return
				}
				deadline := time.Now().Add(60 * time.Second)
				for {
					cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					_, err := client.Export(cctx, req)
					cancel()
					if err == nil {
						break
					}
					if !retry || time.Now().After(deadline) {
						errs <- fmt.Errorf("export %d: %w", i, err)
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// waitRecords waits until the target's topic holds n records.
func (tg *ingestTarget) waitRecords(ctx context.Context, kafkaAddr string, n int64) error {
	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(kafkaAddr), Timeout: 10 * time.Second, Transport: transport}
	deadline := time.Now().Add(2 * time.Minute)
	var got int64
	for time.Now().Before(deadline) {
		req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{
			tg.topic: {kafka.LastOffsetOf(0), kafka.LastOffsetOf(1), kafka.LastOffsetOf(2)},
		}}
		resp, err := client.ListOffsets(ctx, req)
		if err == nil {
			got = 0
			for _, po := range resp.Topics[tg.topic] {
				got += po.LastOffset
			}
			if got >= n {
				tg.expect = got
				if got > n {
					return fmt.Errorf("topic %s holds %d records, want %d", tg.topic, got, n)
				}
				return nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("topic %s holds %d records after 2 minutes, want %d", tg.topic, got, n)
}

// benchCollectorConfig is deploy/otelcol/config.yaml with the listeners on
// free loopback ports, the kafka exporter on the test broker and topics,
// and no prometheus receiver; bare also drops the processors.
func benchCollectorConfig(b testing.TB, bare bool, kafkaAddr, grpcAddr, spans, metrics, logs string) string {
	b.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "otelcol", "config.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		b.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(js, &cfg); err != nil {
		b.Fatal(err)
	}
	m := func(v any) map[string]any { return v.(map[string]any) }
	m(m(cfg["extensions"])["health_check"])["endpoint"] = freePort(b)
	recv := m(cfg["receivers"])
	delete(recv, "prometheus")
	protos := m(m(recv["otlp"])["protocols"])
	m(protos["grpc"])["endpoint"] = grpcAddr
	delete(protos, "http")
	kx := m(m(cfg["exporters"])["kafka"])
	kx["brokers"] = []string{kafkaAddr}
	m(kx["traces"])["topic"], m(kx["metrics"])["topic"], m(kx["logs"])["topic"] = spans, metrics, logs
	svc := m(cfg["service"])
	for _, pl := range m(svc["pipelines"]) {
		p := m(pl)
		p["receivers"] = []string{"otlp"}
		if bare {
			delete(p, "processors")
		}
	}
	_, ps, _ := net.SplitHostPort(freePort(b))
	var port int
	fmt.Sscan(ps, &port)
	m(m(svc["telemetry"])["metrics"])["readers"] = []any{map[string]any{"pull": map[string]any{"exporter": map[string]any{
		"prometheus": map[string]any{"host": "127.0.0.1", "port": port},
	}}}}
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "otelcol.json")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// buildTailcause builds this tree's binary.
func buildTailcause(b testing.TB) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "tailcause")
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		b.Fatalf("build tailcause: %v\n%s", err, out)
	}
	return bin
}
