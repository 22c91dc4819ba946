// Package otelcol holds no code: it is the OpenTelemetry Collector
// distribution for LLM-serving nodes (builder-config.yaml, built by
// build.sh) and its configs (config.yaml: kafka exporter into tailcause's
// topics; config.otlp.yaml: OTLP to `tailcause ingest`). Its test validates
// both configs with the built binary and checks the settings tailcause
// depends on (topics, encoding, partitioning, scrape intervals, one release
// for every module). kustomization.yaml runs it as a DaemonSet. See
// README.md.
package otelcol
