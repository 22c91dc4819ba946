// Package kafkax is the Kafka plumbing that several roles share, built on
// github.com/segmentio/kafka-go:
//
//   - Record and Header, the one record shape every role produces;
//   - Producer, a synchronous writer: WriteRecords returns only after the
//     brokers acknowledged every record with acks=all, keys are placed with
//     the murmur2 partitioner that Java clients, librdkafka and franz-go use
//     (so a key lands on the same partition whoever writes it), and batches
//     are bounded in records and bytes;
//   - Error and IsRetriable, which tell a failure worth retrying later
//     (broker down, leader moving, timeout) from a permanent one (record too
//     large, authorization);
//   - EnsureTopics and CheckTopics, which create the declared topics
//     (schemas.Topics) and validate existing ones (`tailcause topics`).
//   - SecurityConfig and Security: TLS (CA, client certificate, server
//     name) and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), built once per
//     process; every Kafka client of tailcause dials with its Transport or
//     Dialer, and its String never shows the password.
//
// Everything here works against a real broker and against the in-process
// kfake broker used by fast tests; the producer's conformance suite
// (conformance_test.go) runs the same assertions on both.
package kafkax
