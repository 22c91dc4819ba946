// Package schemas holds tailcause's contracts: the ClickHouse migrations
// (for ClickHouse 24.8 and newer, rendered with the deployment's TTL), the
// Kafka topic list, the payload schemas (v1 ranked culprits), and the
// default causal DAG. Stages meet only through what is declared here. It
// imports nothing of the module.
package schemas
