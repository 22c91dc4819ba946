// Package chstore is the ClickHouse plumbing every role shares: connecting
// over the native protocol (clickhouse-go v2), refusing servers older than
// schemas.MinServer (24.8), applying the embedded migrations of package
// schemas with checksums and the configured telemetry TTL, and batched
// inserts that name their columns and warn when rows arrive older than
// their table's TTL (ClickHouse deletes them right after the insert).
package chstore
