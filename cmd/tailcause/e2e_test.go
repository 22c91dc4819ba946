package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/tailcause/tailcause/enrich"
	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/internal/otlpfixture"
	"github.com/tailcause/tailcause/internal/testkit"
)

func testEnv(t *testing.T) *env {
	return &env{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler), getenv: func(string) string { return "" }}
}

func countRows(t *testing.T, st *chstore.Store, q string) uint64 {
	t.Helper()
	var n uint64
	if err := st.Conn().QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// startTestPipeline runs ingest + enrich on the real broker with fresh
// topics and a fresh database.
func startTestPipeline(t *testing.T, token string) (*pipeline, *chstore.Store) {
	t.Helper()
	kafkaAddr := testkit.Kafka(t)
	st := chstoretest.Fresh(t)
	ec := enrich.DefaultConfig()
	ec.IdleFlush, ec.BatchWait, ec.CommitInterval = time.Second, 200*time.Millisecond, 200*time.Millisecond
	spans := testkit.FreshTopic(t, kafkaAddr, 3)
	ec.GroupID, ec.SamplesGroupID = "g-"+spans, "s-"+spans
	ec.DeadLetterTopic = testkit.FreshTopic(t, kafkaAddr, 1)
	ctx, cancel := context.WithCancel(context.Background())
	p, err := startPipeline(ctx, testEnv(t), st, pipelineOptions{
		brokers: []string{kafkaAddr}, grpcAddr: "127.0.0.1:0", httpAddr: "127.0.0.1:0", token: token, enrich: ec,
		spans: spans, metrics: testkit.FreshTopic(t, kafkaAddr, 2), logs: testkit.FreshTopic(t, kafkaAddr, 1),
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("pipeline: %v", err)
		}
	})
	return p, st
}

func waitRows(t *testing.T, st *chstore.Store, want uint64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for countRows(t, st, "SELECT count() FROM requests FINAL") < want {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d requests", want)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestEndToEndOTLPHTTP: OTLP/HTTP protobuf in → real Kafka → enrich → rows
// in ClickHouse whose joined features have the expected values.
func TestEndToEndOTLPHTTP(t *testing.T) {
	p, st := startTestPipeline(t, "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := &http.Client{Timeout: 10 * time.Second}
	// Without the token nothing is accepted.
	if err := sendTracesHTTP(ctx, c, p.httpEndpoint(), "", otlpfixture.Traces()); err == nil {
		t.Fatal("request without the bearer token was accepted")
	}
	for _, md := range otlpfixture.Metrics() {
		if err := sendMetricsHTTP(ctx, c, p.httpEndpoint(), "s3cret", md); err != nil {
			t.Fatal(err)
		}
	}
	if err := sendTracesHTTP(ctx, c, p.httpEndpoint(), "s3cret", otlpfixture.Traces()); err != nil {
		t.Fatal(err)
	}
	waitRows(t, st, otlpfixture.Requests+1)
	otlpfixture.CheckRows(t, st.Conn())
}

// TestEndToEndOTLPGRPC: the same through OTLP/gRPC.
func TestEndToEndOTLPGRPC(t *testing.T) {
	p, st := startTestPipeline(t, "s3cret")
	conn, err := grpc.NewClient(hostPort(p.ingest.GRPCAddr()), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")
	mc := pmetricotlp.NewGRPCClient(conn)
	for _, md := range otlpfixture.Metrics() {
		if _, err := mc.Export(ctx, pmetricotlp.NewExportRequestFromMetrics(md)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ptraceotlp.NewGRPCClient(conn).Export(ctx, ptraceotlp.NewExportRequestFromTraces(otlpfixture.Traces())); err != nil {
		t.Fatal(err)
	}
	waitRows(t, st, otlpfixture.Requests+1)
	otlpfixture.CheckRows(t, st.Conn())
}
