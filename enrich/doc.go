// Package enrich is the enricher role: a Kafka consumer group on the OTLP
// span topic that decodes and normalizes each record (package normalize),
// joins every request with the engine/KV and GPU state of its host (package
// join, fed by a broadcast read of the metric topic), and writes enriched
// requests and token stalls to ClickHouse in columnar batches (rows.go,
// chstore.Block), committing Kafka offsets only after ClickHouse
// acknowledged. A second consumer group writes the raw engine and GPU
// samples. Undecodable records go to the dead-letter topic and the
// rejected_input table.
package enrich
