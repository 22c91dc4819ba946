// Package otlpkafka turns OTLP export requests into Kafka records exactly as
// the OpenTelemetry Collector's kafka exporter (contrib, encoding otlp_proto)
// writes them, so data that arrives through `tailcause ingest` and data that
// a Collector writes straight to Kafka look the same downstream:
//
//   - traces (partition_traces_by_id): one record per trace, keyed by the
//     lowercase hex trace id; the value is a raw ExportTraceServiceRequest
//     holding only that trace's spans, each under its original resource and
//     scope;
//   - metrics (partition_metrics_by_resource_attributes): one record per
//     ResourceMetrics, keyed by the 16-byte hash of the resource attributes
//     that the Collector's pdatautil.MapHash computes;
//   - logs: one record per request, unkeyed (or one per ResourceLogs keyed by
//     the same resource hash, like partition_logs_by_resource_attributes).
//
// Values carry no framing (no magic byte, no length prefix). A value larger
// than Config.MaxMessageBytes (producer::max_message_bytes, 1,000,000 by
// default) is split into several records with the same key, at
// resource, scope and span (metric, log record) boundaries; a single span
// (metric, log record) that alone exceeds the limit is an error
// (ErrMessageTooLarge). Output is deterministic: the same input gives the
// same records in the same order.
//
// Grouping and splitting work on the protobuf wire form of the request: the
// request is marshalled once, and every record value is assembled from
// slices of it, appended into a buffer the caller owns. Resource and scope
// bytes are copied verbatim into each record that needs them.
package otlpkafka
