package normalize

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

func loadTraces(t *testing.T, fixture string) Batch {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", fixture))
	if err != nil {
		t.Fatal(err)
	}
	td, err := DecodeTraces(raw, EncodingJSON)
	if err != nil {
		t.Fatal(err)
	}
	return Traces(td)
}

// keyFields is the part of a Request the table below asserts.
type keyFields struct {
	Source                                                   Source
	RequestID, Model, Service, Host, FinishReason            string
	Error                                                    bool
	E2E, TTFT, Queue, Prefill, Decode, Inference, KVTransfer float64
	Prompt, Completion, Cached, MaxTokens                    int64
	Retracts                                                 int
	Timeline                                                 TimelineSource
}

func keyOf(r Request) keyFields {
	return keyFields{
		Source: r.Source, RequestID: r.RequestID, Model: r.Model, Service: r.Service, Host: r.Placement.Host,
		FinishReason: r.FinishReason, Error: r.Error,
		E2E: r.E2EMs, TTFT: r.TTFTMs, Queue: r.QueueMs, Prefill: r.PrefillMs, Decode: r.DecodeMs,
		Inference: r.InferenceMs, KVTransfer: r.KVTransferMs,
		Prompt: r.PromptTokens, Completion: r.CompletionTokens, Cached: r.CachedTokens, MaxTokens: r.MaxTokens,
		Retracts: r.Retracts, Timeline: r.TimelineSource,
	}
}

func TestTracesKeyValues(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name, fixture, uid string
		want               keyFields
	}{
		{
			name: "vllm seconds to ms, JSON-text finish reason", fixture: "vllm_traces.json",
			uid: "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
			want: keyFields{Source: SourceVLLM, RequestID: "chatcmpl-3f9b2c1d8e7a4b6c", Model: "meta-llama/Llama-3.1-8B-Instruct",
				Service: "vllm-llama3-8b", Host: "gpu-node-3", FinishReason: "stop",
				E2E: 1734.5, TTFT: 210.5, Queue: 12.5, Prefill: 198, Decode: 1524, Inference: 1722, KVTransfer: nan,
				Prompt: 512, Completion: 128, Cached: -1, MaxTokens: 256, Timeline: TimelineAggregate},
		},
		{
			name: "vllm abort is an error", fixture: "vllm_traces.json",
			uid: "5c0a3f1e9d8b4a7c8e6f5d4c3b2a1908-1a2b3c4d5e6f7081",
			want: keyFields{Source: SourceVLLM, RequestID: "cmpl-aborted-77", Model: "meta-llama/Llama-3.1-8B-Instruct",
				Service: "vllm-llama3-8b", Host: "gpu-node-3", FinishReason: "abort", Error: true,
				E2E: 5000, TTFT: nan, Queue: 4200, Prefill: nan, Decode: nan, Inference: nan, KVTransfer: nan,
				Prompt: 8000, Completion: 3, Cached: -1, MaxTokens: -1, Timeline: TimelineAggregate},
		},
		{
			name: "vllm string-typed numbers", fixture: "vllm_traces.json",
			uid: "6d1b4e2f0a9c4b8d9f7e6d5c4b3a2019-2b3c4d5e6f708192",
			want: keyFields{Source: SourceVLLM, RequestID: "cmpl-strnum-1", Model: "meta-llama/Llama-3.1-8B-Instruct",
				Service: "vllm-llama3-8b", Host: "gpu-node-3", FinishReason: "length",
				E2E: 125, TTFT: 31, Queue: nan, Prefill: nan, Decode: nan, Inference: nan, KVTransfer: nan,
				Prompt: 42, Completion: 7, Cached: -1, MaxTokens: -1, Timeline: TimelineAggregate},
		},
		{
			name: "trtllm kv transfer attribute", fixture: "trtllm_traces.json",
			uid: "8f3d6a4b2c1e4d0f9b8a7f6e5d4c3b21-4d5e6f7081920314",
			want: keyFields{Source: SourceTRTLLM, RequestID: "trt-req-0001", Model: "llama-3.1-70b-fp8",
				Service: "trtllm-serve", Host: "gpu-node-7", FinishReason: "length",
				E2E: 820, TTFT: 310, Queue: 4, Prefill: nan, Decode: nan, Inference: nan, KVTransfer: 45.5,
				Prompt: 2048, Completion: 32, Cached: -1, MaxTokens: -1, Timeline: TimelineAggregate},
		},
		{
			name: "trtllm kv transfer events, host from k8s.node.name", fixture: "trtllm_traces.json",
			uid: "9a4e7b5c3d2f4e1a0c9b8a7f6e5d4c32-5e6f708192031425",
			want: keyFields{Source: SourceTRTLLM, RequestID: "trt-req-0002", Model: "llama-3.1-70b-fp8",
				Service: "llm-decode-1", Host: "gpu-node-8",
				E2E: 500, TTFT: nan, Queue: nan, Prefill: nan, Decode: nan, Inference: nan, KVTransfer: 28.25,
				Prompt: 1024, Completion: 16, Cached: -1, MaxTokens: -1, Timeline: TimelineAggregate},
		},
		{
			name: "sglang unified root with leading space and 64-bit trace id", fixture: "sglang_traces.json",
			uid: "00000000000000007f3a9c2e5b1d4f60-5a6b7c8d9e0f1a2b",
			want: keyFields{Source: SourceSGLang, RequestID: "1a2b3c4d5e6f47a8b9c0d1e2f3a4b5c6", Model: "Qwen/Qwen2.5-7B-Instruct",
				Service: "sglang", Host: "gpu-node-5", FinishReason: "length",
				// Prefill includes queueing; queue is unknown.
				E2E: 1734, TTFT: 212, Queue: nan, Prefill: 205, Decode: 1522, Inference: nan, KVTransfer: nan,
				Prompt: 1024, Completion: 4, Cached: 512, MaxTokens: 4, Retracts: 1, Timeline: TimelineSteps},
		},
		{
			name: "sglang prefill role", fixture: "sglang_traces.json",
			uid: "00000000000000001c2d3e4f5a6b7c8d-aa00bb11cc22dd33",
			want: keyFields{Source: SourceSGLang, RequestID: "9e8d7c6b5a4f4e3d2c1b0a9f8e7d6c5b", Model: "Qwen/Qwen2.5-7B-Instruct",
				Service: "sglang-prefill", Host: "gpu-node-6",
				E2E: 95, TTFT: nan, Queue: nan, Prefill: 90, Decode: nan, Inference: nan, KVTransfer: nan,
				Prompt: 3000, Completion: -1, Cached: -1, MaxTokens: -1, Timeline: TimelineSteps},
		},
		{
			name: "tgi debug durations, children and complete steps", fixture: "tgi_traces.json",
			uid: "aa11bb22cc33dd44ee55ff6600778899-1000000000000001",
			want: keyFields{Source: SourceTGI, Service: "text-generation-inference.router", Host: "gpu-node-9",
				E2E: 152.304713, TTFT: 50.1, Queue: 1.1025, Prefill: 48.3, Decode: 102, Inference: 150.987654, KVTransfer: nan,
				Prompt: -1, Completion: 3, Cached: -1, MaxTokens: 3, Timeline: TimelineSteps},
		},
		{
			name: "tgi seconds and us durations", fixture: "tgi_traces.json",
			uid: "dd44ee55ff6600778899001122334455-4000000000000001",
			want: keyFields{Source: SourceTGI, Service: "text-generation-inference.router", Host: "gpu-node-9",
				E2E: 2100, TTFT: nan, Queue: 0.35, Prefill: nan, Decode: nan, Inference: 2050, KVTransfer: nan,
				Prompt: -1, Completion: 100, Cached: -1, MaxTokens: -1, Timeline: TimelineSteps},
		},
		{
			name: "tgi error, unparsable total_time falls back to the span", fixture: "tgi_traces.json",
			uid: "ee55ff66007788990011223344556677-5000000000000001",
			want: keyFields{Source: SourceTGI, Service: "text-generation-inference.router", Host: "gpu-node-9", Error: true,
				E2E: 0.5, TTFT: nan, Queue: 0.35, Prefill: nan, Decode: nan, Inference: nan, KVTransfer: nan,
				Prompt: -1, Completion: -1, Cached: -1, MaxTokens: -1, Timeline: TimelineSteps},
		},
		{
			name: "triton events over InferRequest, model and compute spans", fixture: "triton_traces.json",
			uid: "f00dfeedbeef4000a000b000c000d001-6100000000000001",
			want: keyFields{Source: SourceTriton, RequestID: "req-7", Model: "llama3_trtllm",
				Service: "triton-inference-server", Host: "gpu-node-2",
				E2E: 48, TTFT: nan, Queue: 2, Prefill: nan, Decode: nan, Inference: 44.65, KVTransfer: nan,
				Prompt: -1, Completion: -1, Cached: -1, MaxTokens: -1, Timeline: TimelineEvents},
		},
		{
			name: "genai new names, string[] finish reasons", fixture: "genai_traces.json",
			uid: "0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
			want: keyFields{Source: SourceGenAI, RequestID: "chatcmpl-9xYzAbC", Model: "gpt-4o",
				Service: "chat-frontend", FinishReason: "stop",
				E2E: 2150, TTFT: 342, Queue: nan, Prefill: nan, Decode: nan, Inference: nan, KVTransfer: nan,
				Prompt: 14, Completion: 96, Cached: -1, MaxTokens: -1, Timeline: TimelineAggregate},
		},
		{
			name: "genai old names, JSON-text finish reasons, error.type", fixture: "genai_traces.json",
			uid: "1bf8762a27de54ee9559fc322d91420d-d9cf8d938b425553",
			want: keyFields{Source: SourceGenAI, RequestID: "gw-req-42", Model: "llama-3-8b",
				Service: "llm-gateway", Host: "gw-1", FinishReason: "length", Error: true,
				E2E: 30000, TTFT: nan, Queue: nan, Prefill: nan, Decode: nan, Inference: nan, KVTransfer: nan,
				Prompt: 900, Completion: 0, Cached: -1, MaxTokens: -1, Timeline: TimelineAggregate},
		},
	}
	batches := map[string]Batch{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, ok := batches[tt.fixture]
			if !ok {
				b = loadTraces(t, tt.fixture)
				batches[tt.fixture] = b
			}
			var got *Request
			for i := range b.Requests {
				if b.Requests[i].UID == tt.uid {
					got = &b.Requests[i]
				}
			}
			if got == nil {
				t.Fatalf("no request %s", tt.uid)
			}
			opts := cmp.Options{cmpopts.EquateNaNs(), cmpopts.EquateApprox(0, 1e-9)}
			if diff := cmp.Diff(tt.want, keyOf(*got), opts); diff != "" {
				t.Errorf("request %s (-want +got):\n%s", tt.uid, diff)
			}
		})
	}
}

func TestTracesAccounting(t *testing.T) {
	// Every span lands in exactly one of Requests, Steps, Rejects, Ignored
	// (retract events add Steps of their own).
	tests := []struct {
		fixture                                   string
		spans, requests, steps, retracts, rejects int
	}{
		{"vllm_traces.json", 5, 3, 0, 0, 1},
		{"trtllm_traces.json", 2, 2, 0, 0, 0},
		{"sglang_traces.json", 14, 2, 6, 2, 0},
		{"tgi_traces.json", 14, 3, 3, 0, 0},
		{"triton_traces.json", 4, 2, 0, 0, 0},
		{"genai_traces.json", 4, 3, 0, 0, 0},
	}
	for _, tt := range tests {
		b := loadTraces(t, tt.fixture)
		ignored := 0
		for _, n := range b.Ignored {
			ignored += n
		}
		if len(b.Requests) != tt.requests || len(b.Steps) != tt.steps+tt.retracts || len(b.Rejects) != tt.rejects {
			t.Errorf("%s: %d requests, %d steps, %d rejects; want %d, %d, %d", tt.fixture,
				len(b.Requests), len(b.Steps), len(b.Rejects), tt.requests, tt.steps+tt.retracts, tt.rejects)
		}
		if got := len(b.Requests) + len(b.Steps) - tt.retracts + len(b.Rejects) + ignored; got != tt.spans {
			t.Errorf("%s: accounted for %d spans, fixture has %d (ignored %v)", tt.fixture, got, tt.spans, b.Ignored)
		}
	}
}

func TestSGLangSteps(t *testing.T) {
	b := loadTraces(t, "sglang_traces.json")
	const root = "5a6b7c8d9e0f1a2b"
	var decode, prefill, retract, orphan int
	for _, s := range b.Steps {
		switch {
		case s.RequestSpanID == "":
			orphan++ // chunked_prefill whose thread span is in another message
			if s.Kind != StepPrefill {
				t.Errorf("orphan step %+v, want the chunked prefills", s)
			}
		case s.RequestSpanID != root:
			t.Errorf("step %s resolved to %s, want %s", s.SpanID, s.RequestSpanID, root)
		case s.Kind == StepDecode:
			decode++
			if s.Tokens != 1 {
				t.Errorf("decode step tokens = %d, want 1", s.Tokens)
			}
		case s.Kind == StepPrefill:
			prefill++
		case s.Kind == StepRetract:
			retract++
			if s.StartNs != s.EndNs {
				t.Errorf("retract step %+v: want an instant", s)
			}
		}
	}
	if decode != 3 || prefill != 1 || retract != 2 || orphan != 2 {
		t.Errorf("decode=%d prefill=%d retract=%d orphan=%d; want 3 1 2 2", decode, prefill, retract, orphan)
	}
	if b.Ignored[IgnoredSGLangThreadSpan] != 2 || b.Ignored[IgnoredSGLangStageSpan] != 4 {
		t.Errorf("ignored = %v", b.Ignored)
	}
}

// spanOpts builds one span for the programmatic tests.
type spanOpts struct {
	trace   [16]byte
	id      byte
	parent  byte
	name    string
	start   uint64
	end     uint64
	attrs   map[string]any
	service string
}

func buildTraces(t *testing.T, spans ...spanOpts) ptrace.Traces {
	t.Helper()
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty()
	ss.Resource().Attributes().PutStr("service.name", "svc")
	for _, o := range spans {
		if o.service != "" {
			ss.Resource().Attributes().PutStr("service.name", o.service)
		}
	}
	list := ss.ScopeSpans().AppendEmpty().Spans()
	for _, o := range spans {
		sp := list.AppendEmpty()
		sp.SetTraceID(pcommon.TraceID(o.trace))
		if o.id != 0 {
			sp.SetSpanID(pcommon.SpanID{0, 0, 0, 0, 0, 0, 0, o.id})
		}
		if o.parent != 0 {
			sp.SetParentSpanID(pcommon.SpanID{0, 0, 0, 0, 0, 0, 0, o.parent})
		}
		sp.SetName(o.name)
		sp.SetStartTimestamp(pcommon.Timestamp(o.start))
		sp.SetEndTimestamp(pcommon.Timestamp(o.end))
		if err := sp.Attributes().FromRaw(o.attrs); err != nil {
			t.Fatal(err)
		}
	}
	return td
}

var tid = [16]byte{8: 1, 15: 9} // upper 64 bits zero, as SGLang makes them

func TestTracesParentWalk(t *testing.T) {
	b := Traces(buildTraces(t,
		spanOpts{trace: tid, id: 1, name: " Req abcd1234", start: 10, end: 100, attrs: map[string]any{"rid": "abcd1234"}},
		spanOpts{trace: tid, id: 2, parent: 1, name: "Scheduler [TP 1] (host:1 | pid:2)", start: 10, end: 100},
		spanOpts{trace: tid, id: 3, parent: 2, name: "decode_loop", start: 20, end: 30},
		// A parent cycle (hostile input) must end the walk, not hang it.
		spanOpts{trace: tid, id: 4, parent: 5, name: "decode_loop", start: 20, end: 30},
		spanOpts{trace: tid, id: 5, parent: 4, name: "x", start: 20, end: 30},
		// A span that is its own parent.
		spanOpts{trace: tid, id: 6, parent: 6, name: "decode_loop", start: 20, end: 30},
	))
	want := map[string]string{"0000000000000003": "0000000000000001", "0000000000000004": "", "0000000000000006": ""}
	if len(b.Steps) != 3 {
		t.Fatalf("steps = %+v", b.Steps)
	}
	for _, s := range b.Steps {
		if s.RequestSpanID != want[s.SpanID] {
			t.Errorf("step %s: RequestSpanID %q, want %q", s.SpanID, s.RequestSpanID, want[s.SpanID])
		}
		if s.TraceID != "00000000000000000100000000000009" {
			t.Errorf("step trace id %s", s.TraceID)
		}
	}
}

func TestTracesRejects(t *testing.T) {
	vllm := map[string]any{"gen_ai.latency.e2e": 0.1}
	b := Traces(buildTraces(t,
		spanOpts{trace: tid, id: 1, name: "llm_request", start: 0, end: 10, attrs: vllm},
		spanOpts{trace: tid, id: 2, name: "llm_request", start: 10, end: 0, attrs: vllm},
		spanOpts{trace: tid, id: 3, name: "llm_request", start: 20, end: 10, attrs: vllm},
		spanOpts{trace: tid, id: 0, name: "decode_loop", start: 1, end: 2},
		spanOpts{trace: [16]byte{}, id: 5, name: "llm_request", start: 1, end: 2},
		// Not a request or step: timestamps are not checked.
		spanOpts{trace: tid, id: 6, name: "GET /health", start: 0, end: 0},
	))
	var reasons []string
	for _, r := range b.Rejects {
		reasons = append(reasons, r.Reason)
		if r.Signal != "traces" || r.Detail == "" {
			t.Errorf("reject %+v", r)
		}
	}
	want := []string{"no_span_id", "no_timestamp", "no_timestamp", "bad_timestamp", "no_span_id"}
	if diff := cmp.Diff(want, reasons); diff != "" {
		t.Errorf("reject reasons (-want +got):\n%s", diff)
	}
	if len(b.Requests) != 0 || b.Ignored[IgnoredNonRequestSpan] != 1 {
		t.Errorf("requests %d, ignored %v", len(b.Requests), b.Ignored)
	}
}

func TestTracesRejectsBounded(t *testing.T) {
	var spans []spanOpts
	for i := 0; i < maxRejects+44; i++ {
		spans = append(spans, spanOpts{trace: tid, id: byte(i%250 + 1), name: "decode_loop", start: 5, end: 1})
	}
	b := Traces(buildTraces(t, spans...))
	if len(b.Rejects) != maxRejects || b.Ignored[IgnoredRejectsDropped] != 44 {
		t.Errorf("%d rejects, %d dropped; want %d, 44", len(b.Rejects), b.Ignored[IgnoredRejectsDropped], maxRejects)
	}
}

func TestExtrasBounded(t *testing.T) {
	attrs := map[string]any{"gen_ai.latency.e2e": 0.2}
	long := strings.Repeat("é", 200) // 400 bytes of 2-byte runes
	for i := 0; i < 40; i++ {
		attrs["x.attr."+string(rune('a'+i%26))+string(rune('a'+i/26))] = long
	}
	b := Traces(buildTraces(t, spanOpts{trace: tid, id: 1, name: "llm_request", start: 1, end: 2, attrs: attrs}))
	if len(b.Requests) != 1 {
		t.Fatalf("requests: %+v", b)
	}
	r := b.Requests[0]
	if len(r.AttrKeys) != maxExtraAttrs || len(r.AttrValues) != maxExtraAttrs {
		t.Fatalf("%d keys, %d values; want %d", len(r.AttrKeys), len(r.AttrValues), maxExtraAttrs)
	}
	for i, k := range r.AttrKeys {
		if i > 0 && r.AttrKeys[i-1] >= k {
			t.Errorf("keys not sorted: %q before %q", r.AttrKeys[i-1], k)
		}
		v := r.AttrValues[i]
		if len(v) > maxAttrValueLen || len(v) < maxAttrValueLen-1 || !utf8.ValidString(v) {
			t.Errorf("value %d: %d bytes, valid UTF-8 %v", i, len(v), utf8.ValidString(v))
		}
	}
	if r.AttrKeys[0] != "x.attr.aa" {
		t.Errorf("first key %q", r.AttrKeys[0])
	}
}

func TestTGIPartialSteps(t *testing.T) {
	// 3 tokens, only 2 send_generation spans here: TTFT cannot be told.
	tgi := "text-generation-inference.router"
	b := Traces(buildTraces(t,
		spanOpts{trace: tid, id: 1, name: "generate", start: 1e9, end: 2e9, service: tgi, attrs: map[string]any{
			"inference_time": "300ms", "time_per_token": "100ms", "total_time": "1s"}},
		spanOpts{trace: tid, id: 2, parent: 1, name: "infer", start: 1e9, end: 2e9},
		spanOpts{trace: tid, id: 3, parent: 2, name: "send_generation", start: 1.5e9, end: 1.6e9},
		spanOpts{trace: tid, id: 4, parent: 2, name: "send_generation", start: 1.7e9, end: 1.8e9},
	))
	if len(b.Requests) != 1 || len(b.Steps) != 2 {
		t.Fatalf("batch %+v", b)
	}
	r := b.Requests[0]
	if r.CompletionTokens != 3 || !math.IsNaN(r.TTFTMs) || !math.IsNaN(r.DecodeMs) || r.E2EMs != 1000 {
		t.Errorf("request %+v", keyOf(r))
	}
	for _, s := range b.Steps {
		if s.RequestSpanID != "0000000000000001" || s.Source != SourceTGI {
			t.Errorf("step %+v", s)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name    string
		scope   string
		service string
		attrs   map[string]any
		want    spanClass
	}{
		{name: "llm_request", want: classEngine},
		{name: "anything", scope: "vllm.llm_engine", want: classEngine},
		{name: "engine.request", attrs: map[string]any{"gen_ai.latency.e2e": 1.0}, want: classEngine},
		{name: " Req 1a2b3c4d", attrs: map[string]any{"rid": "1a2b3c4d"}, want: classSGLangRoot},
		{name: "decode Req 1a2b3c4d", attrs: map[string]any{"rid": "1a2b3c4d"}, want: classSGLangRoot},
		{name: "renamed", attrs: map[string]any{"module": "sglang::request"}, want: classSGLangRoot},
		{name: " Req 1a2b3c4d", want: classOther}, // no rid: not SGLang's
		{name: "my prefill Req 1a2b", attrs: map[string]any{"rid": "x"}, want: classOther},
		{name: "generate", service: "text-generation-inference.router", want: classTGIRequest},
		{name: "generate", service: "other", want: classOther},
		{name: "generate_stream", service: "my-tgi", attrs: map[string]any{"total_time": "1.5s"}, want: classTGIRequest},
		{name: "generate", scope: "text_generation_router::server", want: classTGIRequest},
		{name: "queued", service: "text-generation-inference.router", want: classTGIInternal},
		{name: "send_generation", want: classTGIStep},
		{name: "InferRequest", want: classTriton},
		{name: "decode_loop", want: classSGLangDecode},
		{name: "chunked_prefill", want: classSGLangPrefill},
		{name: "Scheduler [TP 0] (host:8f2c1d3e | pid:4242)", want: classSGLangThread},
		{name: "decode_forward", want: classSGLangStage},
		{name: "chat gpt-4o", attrs: map[string]any{"gen_ai.operation.name": "chat"}, want: classGenAI},
		{name: "invoke_agent x", attrs: map[string]any{"gen_ai.operation.name": "invoke_agent"}, want: classGenAINonInference},
		{name: "completion", attrs: map[string]any{"gen_ai.system": "openai"}, want: classGenAI},
		{name: "GET /v1/models", want: classOther},
	}
	for _, tt := range tests {
		td := buildTraces(t, spanOpts{trace: tid, id: 1, name: tt.name, attrs: tt.attrs})
		sp := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
		ri := &resInfo{service: tt.service, tgi: strings.HasPrefix(tt.service, "text-generation-inference")}
		s := pdataSpan(sp, 0)
		if got, _ := classify(&s, ri, tt.scope); got != tt.want {
			t.Errorf("classify(%q, scope %q, service %q) = %d, want %d", tt.name, tt.scope, tt.service, got, tt.want)
		}
	}
}

func TestSGLangRootName(t *testing.T) {
	tests := []struct {
		in   string
		role string
		ok   bool
	}{
		{" Req 1a2b3c4d", "", true},
		{"prefill Req 1a2b3c4d", "prefill", true},
		{"decode Req 9e8d7c6b", "decode", true},
		{"Req 1a2b3c4d", "", false},
		{" Req ", "", false},
		{"a b Req 1", "", false},
		{" Req 1 2", "", false},
	}
	for _, tt := range tests {
		role, ok := sglangRootName(tt.in)
		if role != tt.role || ok != tt.ok {
			t.Errorf("sglangRootName(%q) = %q, %v; want %q, %v", tt.in, role, ok, tt.role, tt.ok)
		}
	}
}

func TestFirstFinishReason(t *testing.T) {
	slice := pcommon.NewValueSlice()
	slice.Slice().AppendEmpty().SetStr("")
	slice.Slice().AppendEmpty().SetStr("length")
	tests := []struct {
		v    pcommon.Value
		want string
	}{
		{pcommon.NewValueStr(`["stop"]`), "stop"},
		{pcommon.NewValueStr(`["length", "stop"]`), "length"},
		{pcommon.NewValueStr(`[]`), ""},
		{pcommon.NewValueStr(`[stop, length]`), "stop"},
		{pcommon.NewValueStr(`stop`), "stop"},
		{pcommon.NewValueStr(` "abort" `), "abort"},
		{pcommon.NewValueStr(`[null, "error"]`), "error"},
		{slice, "length"},
		{pcommon.NewValueSlice(), ""},
		{pcommon.NewValueInt(3), ""},
	}
	for _, tt := range tests {
		if got := firstFinishReason(pdataValue(tt.v)); got != tt.want {
			t.Errorf("firstFinishReason(%s) = %q, want %q", tt.v.AsString(), got, tt.want)
		}
	}
}

func TestCountAndNum(t *testing.T) {
	tests := []struct {
		v      pcommon.Value
		want   int64
		wantOK bool
	}{
		{pcommon.NewValueInt(14), 14, true},
		{pcommon.NewValueStr("14"), 14, true},
		{pcommon.NewValueStr(" 14 "), 14, true},
		{pcommon.NewValueStr("14.0"), 14, true},
		{pcommon.NewValueDouble(96), 96, true},
		{pcommon.NewValueDouble(9.5), 0, false},
		{pcommon.NewValueInt(-1), 0, false},
		{pcommon.NewValueStr("-3"), 0, false},
		{pcommon.NewValueStr("NaN"), 0, false},
		{pcommon.NewValueStr("many"), 0, false},
		{pcommon.NewValueBool(true), 0, false},
		{pcommon.NewValueDouble(math.Inf(1)), 0, false},
	}
	for _, tt := range tests {
		got, ok := count(pdataValue(tt.v))
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("count(%s %s) = %d, %v; want %d, %v", tt.v.Type(), tt.v.AsString(), got, ok, tt.want, tt.wantOK)
		}
	}
	if ms := secondsToMs(pdataValue(pcommon.NewValueStr("0.25"))); ms != 250 {
		t.Errorf("secondsToMs(\"0.25\") = %v", ms)
	}
	if ms := secondsToMs(pdataValue(pcommon.NewValueDouble(-1))); !math.IsNaN(ms) {
		t.Errorf("secondsToMs(-1) = %v, want NaN", ms)
	}
}
