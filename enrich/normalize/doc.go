// Package normalize owns the edge of the enricher: it decodes the OTLP
// records the Collector's kafka exporter writes (otlp_proto or otlp_json,
// no framing) and turns what LLM-serving systems emit into one model
// (model.go) with fixed units: Unix-nanosecond times, millisecond
// durations (NaN when unknown), int64 token counts (-1 when unknown).
//
// Decoding: DecodeTraces, DecodeMetrics and DecodeLogs. Every decode error
// wraps ErrMalformed (permanent: dead-letter it) or ErrUnknownEncoding.
// TracesDecoder and MetricsDecoder decode and normalize records in one
// step, from the wire form where the payload has the shape they read
// (traceswire.go, metricswire.go) and through pdata otherwise, with the
// same result and the same errors.
//
// # Request spans (Traces)
//
// One Batch per OTLP message. Spans are classified by name, scope and
// attributes, never by position in the message:
//
//   - vLLM "llm_request" (scope vllm.llm_engine): gen_ai.latency.* float
//     seconds → ms, gen_ai.usage.*, gen_ai.request.id, finish reasons from
//     JSON text. TimelineAggregate.
//   - TensorRT-LLM: the same attributes plus
//     gen_ai.latency.kv_cache_transfer_time or kv_cache_transfer_start/end
//     events (KVTransferMs). The events are no token timeline, so its
//     TimelineSource is also aggregate.
//   - SGLang root "{role} Req {rid[:8]}" (a leading space on a unified
//     server; role kept as extra attribute "sglang.role" when set).
//     SGLang's time_in_model_prefill includes queueing and it sets no
//     time_in_queue: QueueMs stays NaN and PrefillMs is SGLang's value
//     (queue + prefill). decode_loop spans are decode Steps (1 token each),
//     prefill_forward / chunked_prefill are prefill Steps (0 tokens: the
//     first token's time is StartNs + TTFTMs), "retract" events are retract
//     Steps, and count in Request.Retracts when on the root. SGLang's
//     64-bit ids need nothing special.
//   - TGI (service text-generation-inference.router) generate,
//     generate_stream, chat_completions, completions: total_time,
//     queue_time, inference_time, time_per_token are Rust Debug durations
//     (ParseRustDuration). CompletionTokens = round(inference_time /
//     time_per_token) as TGI computes the latter. QueueMs falls back to the
//     "queued" child span, PrefillMs is the "prefill" span under the batch
//     span the request's "infer" span is linked with. send_generation spans
//     are decode Steps (one per token, the first included); TTFTMs and
//     DecodeMs come from them only when the message holds all of them.
//   - Triton InferRequest → <model_name> → compute: one Request per
//     InferRequest; the timeline events of all three give QueueMs
//     (COMPUTE_START − QUEUE_START) and InferenceMs (COMPUTE_END −
//     COMPUTE_START); the compute phases are kept as extra attributes
//     triton.compute_{input,infer,output}_ms. TimelineEvents.
//   - OpenTelemetry GenAI client / gateway spans (gen_ai.operation.name or
//     gen_ai.provider.name / gen_ai.system): old and new token attribute
//     names, finish reasons as string[] or JSON text,
//     gen_ai.response.time_to_first_chunk. Tool and agent operations are
//     ignored. RequestID falls back to gen_ai.response.id.
//
// For every source E2EMs falls back to the span's duration. Numbers are
// read from int, double or numeric-string attributes. Placement comes from
// resource attributes first, span attributes filling gaps; attributes no
// field holds are kept, sorted, in AttrKeys/AttrValues (at most 32, values
// cut to 256 bytes). Steps find their request by walking parent links
// inside the message; spans of one trace may arrive in several messages, so
// RequestSpanID may be empty and the join groups by TraceID. Only spans
// that would become Requests or Steps are validated: zero ids or
// timestamps, or end before start, make a Reject.
//
// # Metric samples (Metrics)
//
// vLLM (V1 and older names), SGLang, TGI and dcgm-exporter metrics map to
// the canonical Metric names, with or without the "_total" suffix. Units:
// DCGM % → 0–1; everything else keeps its unit. The canonical kind wins
// over the wire type. Engine placement is the scraped target (host.name |
// k8s.node.name | server.address, k8s.pod.name, service.instance.id) plus
// the engine / dp_rank label; GPU placement comes from the point's labels
// (Hostname | hostname, UUID | uuid, gpu, pod, namespace), because the
// resource's k8s.* attributes describe the exporter's own pod.
// DCGM_EXP_XID_ERRORS_{COUNT,TOTAL} are summed over their xid label.
//
// # Counters
//
// Counters turns Cumulative samples into deltas and rates per series,
// across counter resets, bounded by an LRU on series.
package normalize
