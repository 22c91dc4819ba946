package otlpkafka

import (
	"fmt"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tailcause/tailcause/internal/kafkax"
)

// benchTraces is a vLLM-like batch: 50 traces of 10 spans each, spread over 5
// engines, with the gen_ai attributes vLLM sets.
func benchTraces() ptrace.Traces {
	td := ptrace.NewTraces()
	for r := 0; r < 5; r++ {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", fmt.Sprintf("vllm-%d", r))
		rs.Resource().Attributes().PutStr("host.name", fmt.Sprintf("node-%d", r))
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName("vllm.llm_engine")
		for i := 0; i < 100; i++ {
			sp := ss.Spans().AppendEmpty()
			var tid pcommon.TraceID
			tid[0], tid[1] = byte(r), byte(i%10) // 10 traces per engine
			sp.SetTraceID(tid)
			sp.SetSpanID(pcommon.SpanID{byte(r), byte(i), 1, 2, 3, 4, 5, 6})
			sp.SetName("llm_request")
			sp.SetKind(ptrace.SpanKindServer)
			sp.SetStartTimestamp(pcommon.Timestamp(1_700_000_000_000_000_000 + i))
			sp.SetEndTimestamp(pcommon.Timestamp(1_700_000_001_000_000_000 + i))
			a := sp.Attributes()
			a.PutDouble("gen_ai.latency.time_to_first_token", 0.12)
			a.PutDouble("gen_ai.latency.e2e", 1.9)
			a.PutDouble("gen_ai.latency.time_in_queue", 0.01)
			a.PutInt("gen_ai.usage.prompt_tokens", 812)
			a.PutInt("gen_ai.usage.completion_tokens", 256)
			a.PutStr("gen_ai.request.id", fmt.Sprintf("cmpl-%d-%d", r, i))
			a.PutStr("gen_ai.response.finish_reasons", `["stop"]`)
		}
	}
	return td
}

func BenchmarkAppendTraces(b *testing.B) {
	td := benchTraces()
	e := newEncoder(b, nil)
	var recs []kafkax.Record
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		var err error
		recs, buf, err = e.AppendTraces(recs[:0], buf[:0], td)
		if err != nil {
			b.Fatal(err)
		}
	}
	if len(recs) != 50 {
		b.Fatalf("got %d records", len(recs))
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkAppendTracesFresh gives every call new dst and buf, as a caller
// without reuse would.
func BenchmarkAppendTracesFresh(b *testing.B) {
	td := benchTraces()
	e := newEncoder(b, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := e.AppendTraces(nil, nil, td); err != nil {
			b.Fatal(err)
		}
	}
}
