package enrich

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/otlpfixture"
	"github.com/tailcause/tailcause/internal/otlpkafka"
)

// produceFixture writes the fixture as the Collector's kafka exporter
// would: spans one record per trace, metrics one record per resource.
func produceFixture(t *testing.T, brokers []string, spans, metrics string) {
	t.Helper()
	produceMetrics(t, brokers, metrics)
	produceTraces(t, brokers, spans, otlpfixture.Traces())
}

func producer(t *testing.T, brokers []string) (*otlpkafka.Encoder, *kafkax.Producer) {
	t.Helper()
	enc, err := otlpkafka.NewEncoder(otlpkafka.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	pc := kafkax.DefaultConfig()
	pc.Brokers = brokers
	prod, err := kafkax.NewProducer(pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prod.Close() })
	return enc, prod
}

func produceMetrics(t *testing.T, brokers []string, topic string) {
	t.Helper()
	enc, prod := producer(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var recs []kafkax.Record
	var err error
	for _, md := range otlpfixture.Metrics() {
		recs, _, err = enc.AppendMetrics(recs, nil, md)
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := prod.WriteRecords(ctx, topic, recs); err != nil {
		t.Fatalf("produce metrics: %v", err)
	}
}

func produceTraces(t *testing.T, brokers []string, topic string, td ptrace.Traces) {
	t.Helper()
	enc, prod := producer(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recs, _, err := enc.AppendTraces(nil, nil, td)
	if err != nil {
		t.Fatal(err)
	}
	if err := prod.WriteRecords(ctx, topic, recs); err != nil {
		t.Fatalf("produce spans: %v", err)
	}
}

func produceRaw(t *testing.T, brokers []string, topic string, value []byte) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, kafka.Message{Value: value}); err != nil {
		t.Fatal(err)
	}
}

func testConfig(brokers []string, spans, metrics, dlq string) Config {
	cfg := DefaultConfig()
	cfg.Brokers = brokers
	cfg.SpansTopic, cfg.MetricsTopic, cfg.DeadLetterTopic = spans, metrics, dlq
	cfg.GroupID = "g-" + spans
	cfg.SamplesGroupID = "s-" + spans
	cfg.IdleFlush = time.Second
	cfg.BatchWait = 200 * time.Millisecond
	cfg.CommitInterval = 200 * time.Millisecond
	return cfg
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("TAILCAUSE_TEST_VERBOSE") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

func count(t *testing.T, st *chstore.Store, q string) uint64 {
	t.Helper()
	var n uint64
	if err := st.Conn().QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestPipelineOnKFake(t *testing.T) {
	st := chstoretest.Fresh(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "otlp_spans", "otlp_metrics"), kfake.SeedTopics(1, "dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	produceFixture(t, brokers, "otlp_spans", "otlp_metrics")
	produceRaw(t, brokers, "otlp_spans", []byte("\x0a\xff\xff not protobuf"))
	produceRaw(t, brokers, "otlp_metrics", []byte("\x12garbage"))

	p, err := New(testConfig(brokers, "otlp_spans", "otlp_metrics", "dlq"), st, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	want := uint64(otlpfixture.Requests + 1)
	waitFor(t, "all requests in ClickHouse", 90*time.Second, func() bool {
		return count(t, st, "SELECT count() FROM requests") >= want &&
			count(t, st, "SELECT count() FROM rejected_input") >= 2 &&
			count(t, st, "SELECT count() FROM gpu_samples") >= 40
	})
	// Let the committer catch up, then stop.
	waitFor(t, "commits", 10*time.Second, func() bool { return p.C.Commits.Load() > 0 })
	time.Sleep(500 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := count(t, st, "SELECT count() FROM requests"); n != want {
		t.Errorf("requests rows = %d, want %d (no duplicates in a clean run)", n, want)
	}
	otlpfixture.CheckRows(t, st.Conn())
	if n := count(t, st, "SELECT count() FROM engine_samples"); n != 8*otlpfixture.EngineScrapes {
		t.Errorf("engine samples %d, want %d (the unknown metric is not one)", n, 8*otlpfixture.EngineScrapes)
	}
	if n := count(t, st, "SELECT count() FROM gpu_samples"); n != 8*otlpfixture.GPUScrapes {
		t.Errorf("gpu samples %d", n)
	}
	if n := count(t, st, "SELECT count() FROM rejected_input WHERE reason = 'decode'"); n != 2 {
		t.Errorf("rejected rows %d, want 2", n)
	}
	if p.C.UnknownMetrics.Load() != otlpfixture.EngineScrapes {
		t.Errorf("unknown metrics counted %d, want %d", p.C.UnknownMetrics.Load(), otlpfixture.EngineScrapes)
	}
	// Both bad records are in the dead-letter topic with their origin.
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: "dlq", Partition: 0})
	defer r.Close()
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	for i := 0; i < 2; i++ {
		m, err := r.ReadMessage(rctx)
		if err != nil {
			t.Fatalf("read dead letter %d: %v", i, err)
		}
		hs := map[string]string{}
		for _, h := range m.Headers {
			hs[h.Key] = string(h.Value)
		}
		if hs["tailcause.reason"] != "decode" || hs["tailcause.source_topic"] == "" || hs["tailcause.detail"] == "" {
			t.Errorf("dead letter headers %v", hs)
		}
	}
}
