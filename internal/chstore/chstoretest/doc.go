// Package chstoretest opens chstore stores for tests: a fresh, migrated
// database on the test ClickHouse (testkit.ClickHouse), closed when the test
// ends. Its telemetry tables have no TTL, so rows at any date stay.
package chstoretest
