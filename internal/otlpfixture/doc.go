// Package otlpfixture builds a small, fully known OTLP workload — vLLM
// llm_request spans, one SGLang request with per-step spans, vLLM engine
// metrics and dcgm-exporter metrics of one host, shaped as the Collector
// delivers them — together with the values the enricher must derive from
// it. End-to-end tests send it through ingest or Kafka and compare the
// ClickHouse rows with Expected.
package otlpfixture
