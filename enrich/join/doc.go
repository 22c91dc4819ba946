// Package join is the enricher's event-time as-of join: it keeps bounded
// per-host state of engine (vLLM/SGLang/TGI) and GPU (dcgm-exporter)
// samples, holds each request until the metric streams of its host have
// passed its end (or a bounded event-time wait ran out), and then computes
// the request's token-timeline features and the engine/KV and GPU state it
// ran under, each with the staleness of its sample. It is pure and
// single-threaded: the caller owns the goroutine, I/O and offsets.
package join
