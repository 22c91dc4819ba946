package sink

import (
	"context"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// KafkaConfig configures the Kafka sink.
type KafkaConfig struct {
	Brokers      []string
	TracesTopic  string // default otlp_spans
	MetricsTopic string // default otlp_metrics
	// MaxMessageBytes is the producer's max.message.bytes (default
	// 1,000,000, the Collector's default); larger messages are an error.
	MaxMessageBytes int
}

// Kafka writes what the Collector's kafka exporter writes with encoding
// otlp_proto, partition_traces_by_id and
// partition_metrics_by_resource_attributes.
type Kafka struct {
	cfg KafkaConfig
	w   *kafka.Writer
}

// NewKafka makes a synchronous writer with RequiredAcks=all and a
// murmur2 key partitioner (the Java/franz-go default).
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
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = 1_000_000
	}
	w := &kafka.Writer{
		Addr:         kafka.TCP(cfg.Brokers...),
		Balancer:     &kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll,
		BatchSize:    1000,
		BatchBytes:   int64(cfg.MaxMessageBytes) * 4,
		BatchTimeout: 10 * time.Millisecond,
		MaxAttempts:  5,
		WriteTimeout: 30 * time.Second,
	}
	return &Kafka{cfg: cfg, w: w}, nil
}

// Traces writes one message per trace.
func (k *Kafka) Traces(ctx context.Context, td ptrace.Traces) error {
	msgs, err := TraceMessages(k.cfg.TracesTopic, td, k.cfg.MaxMessageBytes)
	if err != nil {
		return err
	}
	if err := k.w.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("write %d trace messages to kafka: %w", len(msgs), err)
	}
	return nil
}

// Metrics writes one message per resource.
func (k *Kafka) Metrics(ctx context.Context, md pmetric.Metrics) error {
	msgs, err := MetricMessages(k.cfg.MetricsTopic, md, k.cfg.MaxMessageBytes)
	if err != nil {
		return err
	}
	if err := k.w.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("write %d metric messages to kafka: %w", len(msgs), err)
	}
	return nil
}

// Close flushes and closes the writer.
func (k *Kafka) Close() error { return k.w.Close() }

// TraceMessages splits td into one ExportTraceServiceRequest per trace id
// (keeping each span's resource and scope), keyed by the hex trace id, in
// order of first appearance.
func TraceMessages(topic string, td ptrace.Traces, maxBytes int) ([]kafka.Message, error) {
	var order []pcommon.TraceID
	byID := map[pcommon.TraceID]ptrace.Traces{}
	type slot struct {
		rs ptrace.ResourceSpans
		ss ptrace.ScopeSpans
	}
	// last resource/scope created in each trace's batch, to reuse while the
	// source resource/scope is the same
	cur := map[pcommon.TraceID]*slot{}
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			ss := sss.At(j)
			for key := range cur {
				delete(cur, key)
			}
			spans := ss.Spans()
			for s := 0; s < spans.Len(); s++ {
				sp := spans.At(s)
				id := sp.TraceID()
				out, ok := byID[id]
				if !ok {
					out = ptrace.NewTraces()
					byID[id] = out
					order = append(order, id)
				}
				sl := cur[id]
				if sl == nil {
					nrs := out.ResourceSpans().AppendEmpty()
					rs.Resource().CopyTo(nrs.Resource())
					nrs.SetSchemaUrl(rs.SchemaUrl())
					nss := nrs.ScopeSpans().AppendEmpty()
					ss.Scope().CopyTo(nss.Scope())
					nss.SetSchemaUrl(ss.SchemaUrl())
					sl = &slot{nrs, nss}
					cur[id] = sl
				}
				sp.CopyTo(sl.ss.Spans().AppendEmpty())
			}
		}
	}
	var m ptrace.ProtoMarshaler
	msgs := make([]kafka.Message, 0, len(order))
	for _, id := range order {
		b, err := m.MarshalTraces(byID[id])
		if err != nil {
			return nil, fmt.Errorf("marshal trace %s: %w", hex.EncodeToString(id[:]), err)
		}
		if maxBytes > 0 && len(b) > maxBytes {
			return nil, fmt.Errorf("trace %s: message of %d bytes exceeds max.message.bytes %d", hex.EncodeToString(id[:]), len(b), maxBytes)
		}
		msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte(hex.EncodeToString(id[:])), Value: b})
	}
	return msgs, nil
}

// MetricMessages splits md into one ExportMetricsServiceRequest per
// resource, keyed by a 16-byte hash of the resource attributes.
func MetricMessages(topic string, md pmetric.Metrics, maxBytes int) ([]kafka.Message, error) {
	var m pmetric.ProtoMarshaler
	rms := md.ResourceMetrics()
	msgs := make([]kafka.Message, 0, rms.Len())
	for i := 0; i < rms.Len(); i++ {
		rm := rms.At(i)
		one := pmetric.NewMetrics()
		rm.CopyTo(one.ResourceMetrics().AppendEmpty())
		b, err := m.MarshalMetrics(one)
		if err != nil {
			return nil, fmt.Errorf("marshal metrics: %w", err)
		}
		if maxBytes > 0 && len(b) > maxBytes {
			return nil, fmt.Errorf("metrics of one resource: message of %d bytes exceeds max.message.bytes %d", len(b), maxBytes)
		}
		msgs = append(msgs, kafka.Message{Topic: topic, Key: ResourceKey(rm.Resource().Attributes()), Value: b})
	}
	return msgs, nil
}

// ResourceKey hashes resource attributes, independent of their order.
func ResourceKey(attrs pcommon.Map) []byte {
	kv := make([]string, 0, attrs.Len())
	for k, v := range attrs.All() {
		kv = append(kv, k+"\x00"+v.AsString())
	}
	slices.Sort(kv)
	h := fnv.New128a()
	h.Write([]byte(strings.Join(kv, "\x01")))
	return h.Sum(nil)
}
