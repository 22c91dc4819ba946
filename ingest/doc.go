// Package ingest is the `tailcause ingest` role: an OTLP receiver (gRPC on
// 4317, HTTP on 4318 with protobuf or JSON bodies, optionally gzip) that
// writes what it receives to Kafka exactly as the Collector's kafka exporter
// would (see internal/otlpkafka), so the Collector-to-Kafka path and the
// Collector-to-ingest path look the same downstream.
//
// Contract with clients:
//
//   - A request is acknowledged (HTTP 200, gRPC OK) only after Kafka has
//     acknowledged every record derived from it, with acks=all. Any failure
//     before that is reported, and nothing is acknowledged; some records may
//     already be in Kafka (at-least-once: a retried request can duplicate).
//   - Failures follow OTLP semantics: malformed or permanently unacceptable
//     data is not retryable (400/413/415, InvalidArgument); overload and
//     Kafka outages are (429/503 with Retry-After, ResourceExhausted and
//     Unavailable with a RetryInfo detail).
//   - With a token set, a request without it is refused before any of its
//     body is read: over HTTP before the body, over gRPC in the tap, when
//     the stream's headers arrive (grpc-go decodes a message before any
//     handler or interceptor runs).
//   - Everything is bounded: request bodies before and after decompression,
//     concurrent requests (a semaphore: over it, 429) and gRPC streams per
//     connection, the bytes being decoded at once (Config.MaxDecodeBytes),
//     and the time a request waits for Kafka.
//
// The Kafka side is the Producer interface, satisfied by
// internal/kafkax.Producer and by the in-memory kafkaxtest.Producer.
package ingest
