// Package chstore is the ClickHouse plumbing every role shares: connecting
// over the native protocol (clickhouse-go v2), detecting the server version,
// applying the embedded migrations of package schemas with checksums, and
// batched inserts that always name their columns (ClickHouse 18.16 needs it).
package chstore
