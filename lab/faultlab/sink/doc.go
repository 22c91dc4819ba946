// Package sink holds the outputs of the fault lab: each type satisfies
// faultlab.Sink (Traces and Metrics of pdata batches) and writes the
// telemetry the way a real path into tailcause would carry it.
//
//   - File: OTLP-JSON lines, one Export*ServiceRequest per line (the
//     Collector file exporter's format), for tests and offline replays.
//   - GRPC: OTLP/gRPC through pdata's ptraceotlp/pmetricotlp clients.
//   - HTTP: OTLP/HTTP protobuf, POST /v1/traces and /v1/metrics.
//   - Kafka: what the Collector's kafka exporter writes, through the encoder
//     and producer `tailcause ingest` uses (internal/otlpkafka,
//     internal/kafkax): topics otlp_spans and otlp_metrics, raw
//     Export*ServiceRequest protobuf bytes, traces split one record per trace
//     keyed by the hex trace id, metrics one record per resource keyed by the
//     Collector's hash of its attributes, acks from all replicas.
//   - Multi: fans one run out to several sinks.
//
// The package does not import faultlab, so faultlab's tests can use it.
package sink
