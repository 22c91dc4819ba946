package sink

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/otlpkafka"
)

// KafkaConfig configures the Kafka sink.
type KafkaConfig struct {
	Brokers      []string
	TracesTopic  string // default otlp_spans
	MetricsTopic string // default otlp_metrics
	// MaxMessageBytes is the producer's max.message.bytes (default
	// 1,000,000, the Collector's default): larger payloads are split at
	// resource, scope and span boundaries, as the Collector splits them.
	MaxMessageBytes int
	// Security is how the producer reaches the brokers (TLS, SASL).
	Security kafkax.Security
}

// Kafka writes what the Collector's kafka exporter writes with encoding
// otlp_proto, partition_traces_by_id and
// partition_metrics_by_resource_attributes — through the same encoder
// (internal/otlpkafka: one record per trace keyed by its hex id, one per
// ResourceMetrics keyed by the Collector's resource-attribute hash) and the
// same producer (internal/kafkax: acks=all, murmur2 partitioner) as
// `tailcause ingest`, so what the fault lab writes is what production
// writes.
type Kafka struct {
	cfg  KafkaConfig
	enc  *otlpkafka.Encoder
	prod *kafkax.Producer
	recs []kafkax.Record
	buf  []byte
}

// NewKafka makes the sink. It does not contact the brokers; the first
// write does.
func NewKafka(cfg KafkaConfig) (*Kafka, error) {
	if len(cfg.Brokers) == 0 {
		return nil, fmt.Errorf("kafka sink: no brokers")
	}
	if cfg.TracesTopic == "" {
		cfg.TracesTopic = "otlp_spans"
	}
	if cfg.MetricsTopic == "" {
		cfg.MetricsTopic = "otlp_metrics"
	}
	ec := otlpkafka.DefaultConfig()
	if cfg.MaxMessageBytes != 0 {
		ec.MaxMessageBytes = cfg.MaxMessageBytes
	}
	cfg.MaxMessageBytes = ec.MaxMessageBytes
	enc, err := otlpkafka.NewEncoder(ec)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: %w", err)
	}
	pc := kafkax.DefaultConfig()
	pc.Brokers = cfg.Brokers
	pc.Security = cfg.Security
	pc.ClientID = "tailcause-faultlab"
	pc.MaxAttempts = 5
	pc.WriteTimeout = 30 * time.Second
	// Every record must fit one produce batch (as `tailcause ingest` sizes it).
	pc.BatchBytes = max(pc.BatchBytes, int64(ec.MaxMessageBytes)+64<<10)
	prod, err := kafkax.NewProducer(pc)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: %w", err)
	}
	return &Kafka{cfg: cfg, enc: enc, prod: prod}, nil
}

// Traces writes one record per trace (more when a trace exceeds
// MaxMessageBytes).
func (k *Kafka) Traces(ctx context.Context, td ptrace.Traces) error {
	recs, buf, err := k.enc.AppendTraces(k.recs[:0], k.buf[:0], td)
	if err != nil {
		return fmt.Errorf("kafka sink: %w", err)
	}
	return k.write(ctx, k.cfg.TracesTopic, recs, buf)
}

// Metrics writes one record per resource.
func (k *Kafka) Metrics(ctx context.Context, md pmetric.Metrics) error {
	recs, buf, err := k.enc.AppendMetrics(k.recs[:0], k.buf[:0], md)
	if err != nil {
		return fmt.Errorf("kafka sink: %w", err)
	}
	return k.write(ctx, k.cfg.MetricsTopic, recs, buf)
}

func (k *Kafka) write(ctx context.Context, topic string, recs []kafkax.Record, buf []byte) error {
	if err := k.prod.WriteRecords(ctx, topic, recs); err != nil {
		// The records may still be in flight: never reuse their bytes.
		k.recs, k.buf = nil, nil
		return fmt.Errorf("kafka sink: write %d records: %w", len(recs), err)
	}
	clear(recs)
	k.recs, k.buf = recs[:0], buf[:0]
	return nil
}

// Close flushes and closes the producer.
func (k *Kafka) Close() error { return k.prod.Close() }
