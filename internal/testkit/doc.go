// Package testkit connects integration tests to the real dev/test services
// that deploy/dev starts: a ClickHouse 26.9 server (from PyPI's chdb-core
// wheel) and a single-node Kafka 4.x broker.
//
// Tests find the services through TAILCAUSE_TEST_CLICKHOUSE and
// TAILCAUSE_TEST_KAFKA (host:port), which `eval "$(deploy/dev/services.sh up)"`
// exports. When a variable is unset the test is skipped with a message that
// names the script, except under CI (env CI non-empty), where it fails: CI
// must never pass by skipping. Reading the environment here is deliberate:
// this package is test plumbing, not production wiring.
//
// Each test gets its own database (FreshDatabase) and topics (FreshTopic),
// dropped on cleanup, so tests may run in parallel against one server. Fault
// tests stop, start and restart the services through the same scripts
// (StopClickHouse, StartClickHouse, RestartKafka); such tests have "Fault"
// in their name and run only in make test's serial fault pass (EnvFaults).
//
// StartSecureKafka starts a second, secured broker for one test package
// (deploy/dev/kafka.sh with KAFKA_SECURE=1: SSL with client certificates and
// SASL_SSL with PLAIN and SCRAM users) and stops it at the end; NewCA
// issues certificates for TLS tests.
package testkit
