package normalize

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tailcause/tailcause/internal/otlpfixture"
)

// sameTracesAsPdata checks TracesProto against pdata on pb
// (wireMatchesPdata).
func sameTracesAsPdata(t testing.TB, pb []byte) bool {
	t.Helper()
	return wireMatchesPdata(t, pb, TracesProto, DecodeTraces, Traces)
}

func marshalTraces(t testing.TB, td ptrace.Traces) []byte {
	t.Helper()
	var m ptrace.ProtoMarshaler
	pb, err := m.MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	return pb
}

// traceFixtures are the testdata payloads, re-encoded as protobuf, by file
// name.
func traceFixtures(t testing.TB) map[string][]byte {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join("testdata", "*_traces.json"))
	if len(paths) == 0 {
		t.Fatal("no trace fixtures in testdata")
	}
	out := map[string][]byte{}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		td, err := DecodeTraces(raw, EncodingJSON)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out[filepath.Base(p)] = marshalTraces(t, td)
	}
	return out
}

// tracesProtoCases are payloads in the shapes the wire path takes, each
// exercising a rule of Traces the fixtures may not: scalar attribute types,
// duplicate keys, status codes, events, links, several resources and
// scopes, and spans Traces rejects.
func tracesProtoCases() map[string]ptrace.Traces {
	t0 := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	tid := pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	sid := func(n byte) pcommon.SpanID { return pcommon.SpanID{0, 0, 0, 0, 0, 0, 0, n} }
	at := func(d time.Duration) pcommon.Timestamp { return pcommon.NewTimestampFromTime(t0.Add(d)) }
	vllm := func(sp ptrace.Span, n byte) {
		sp.SetName("llm_request")
		sp.SetTraceID(tid)
		sp.SetSpanID(sid(n))
		sp.SetStartTimestamp(at(0))
		sp.SetEndTimestamp(at(2 * time.Second))
		a := sp.Attributes()
		a.PutDouble("gen_ai.latency.e2e", 2)
		a.PutDouble("gen_ai.latency.time_to_first_token", 0.25)
		a.PutStr("gen_ai.latency.time_in_queue", "0.125")
		a.PutInt("gen_ai.usage.prompt_tokens", 812)
		a.PutStr("gen_ai.usage.completion_tokens", "64")
		a.PutStr("gen_ai.response.finish_reasons", `["stop"]`)
		a.PutStr("gen_ai.request.model", "llama-3-8b")
		a.PutDouble("gen_ai.request.temperature", 0.7)
		a.PutDouble("gen_ai.request.top_p", 1e-7)
		a.PutBool("stream", true)
		a.PutInt("gen_ai.request.n", -3)
		a.PutEmpty("empty")
	}
	cases := map[string]ptrace.Traces{}
	add := func(name string, f func(td ptrace.Traces)) {
		td := ptrace.NewTraces()
		f(td)
		cases[name] = td
	}
	add("empty", func(ptrace.Traces) {})
	add("vllm, every scalar type", func(td ptrace.Traces) {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", "vllm")
		rs.Resource().Attributes().PutStr("host.name", "node-1")
		rs.Resource().Attributes().PutInt("k8s.pod.uid", 7)
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName("vllm.llm_engine")
		ss.Scope().SetVersion("0.9")
		ss.Scope().Attributes().PutStr("a", "b")
		vllm(ss.Spans().AppendEmpty(), 1)
	})
	add("duplicate keys, error status, parent", func(td ptrace.Traces) {
		ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
		sp := ss.Spans().AppendEmpty()
		vllm(sp, 2)
		sp.SetParentSpanID(sid(9))
		sp.Status().SetCode(ptrace.StatusCodeError)
		sp.Status().SetMessage("boom")
		sp.SetKind(ptrace.SpanKindServer)
		sp.SetFlags(1)
		sp.TraceState().FromRaw("a=b")
		sp.SetDroppedAttributesCount(2)
		sp.SetDroppedEventsCount(1)
		sp.SetDroppedLinksCount(1)
		// The first of two equal keys wins in Get; All sees both.
		sp.Attributes().PutStr("host.name", "first")
		raw := sp.Attributes()
		kv := raw.PutEmpty("x.dup")
		kv.SetStr("one")
	})
	add("rejects", func(td ptrace.Traces) {
		ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
		vllm(ss.Spans().AppendEmpty(), 0) // no span id
		sp := ss.Spans().AppendEmpty()
		vllm(sp, 3)
		sp.SetEndTimestamp(0)
		sp = ss.Spans().AppendEmpty()
		vllm(sp, 4)
		sp.SetStartTimestamp(at(time.Hour))
		ss.Spans().AppendEmpty().SetName("GET /health")
	})
	add("trt-llm events, tgi links, two resources", func(td ptrace.Traces) {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", "trtllm-serve")
		sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		vllm(sp, 5)
		ev := sp.Events().AppendEmpty()
		ev.SetName("kv_cache_transfer_start")
		ev.SetTimestamp(at(10 * time.Millisecond))
		ev.Attributes().PutInt("bytes", 4096)
		ev = sp.Events().AppendEmpty()
		ev.SetName("kv_cache_transfer_end")
		ev.SetTimestamp(at(30 * time.Millisecond))
		ev.SetDroppedAttributesCount(1)

		rs = td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", "text-generation-inference.router")
		ss := rs.ScopeSpans().AppendEmpty()
		req := ss.Spans().AppendEmpty()
		req.SetName("generate")
		req.SetTraceID(tid)
		req.SetSpanID(sid(20))
		req.SetStartTimestamp(at(0))
		req.SetEndTimestamp(at(time.Second))
		req.Attributes().PutStr("total_time", "1s")
		req.Attributes().PutStr("inference_time", "800ms")
		req.Attributes().PutStr("time_per_token", "20ms")
		infer := ss.Spans().AppendEmpty()
		infer.SetName("infer")
		infer.SetTraceID(tid)
		infer.SetSpanID(sid(21))
		infer.SetParentSpanID(sid(20))
		infer.SetStartTimestamp(at(100 * time.Millisecond))
		infer.SetEndTimestamp(at(time.Second))
		batch := ss.Spans().AppendEmpty()
		batch.SetName("batch")
		batch.SetTraceID(tid)
		batch.SetSpanID(sid(22))
		batch.SetStartTimestamp(at(100 * time.Millisecond))
		batch.SetEndTimestamp(at(time.Second))
		lk := batch.Links().AppendEmpty()
		lk.SetTraceID(tid)
		lk.SetSpanID(sid(21))
		lk.SetFlags(1)
		lk.TraceState().FromRaw("k=v")
		lk.Attributes().PutStr("a", "b")
		pre := ss.Spans().AppendEmpty()
		pre.SetName("prefill")
		pre.SetTraceID(tid)
		pre.SetSpanID(sid(23))
		pre.SetParentSpanID(sid(22))
		pre.SetStartTimestamp(at(100 * time.Millisecond))
		pre.SetEndTimestamp(at(300 * time.Millisecond))
	})
	return cases
}

// TestTracesProtoMatchesPdata: the wire path takes the fixtures of every
// source whose attributes are scalars, the cases above and the benchmark's
// load, and normalizes each exactly as pdata and Traces do.
func TestTracesProtoMatchesPdata(t *testing.T) {
	for name, pb := range traceFixtures(t) {
		took := sameTracesAsPdata(t, pb)
		// GenAI spans carry their finish reasons as string[]: pdata's.
		if want := name != "genai_traces.json"; took != want {
			t.Errorf("%s: the wire path took it: %v, want %v", name, took, want)
		}
	}
	for name, td := range tracesProtoCases() {
		if !sameTracesAsPdata(t, marshalTraces(t, td)) {
			t.Errorf("%s: the wire path declined it", name)
		}
	}
	l := otlpfixture.Load{Hosts: 4, Duration: time.Minute, Requests: 200, Seed: 3}
	for i, td := range l.Traces(50) {
		if !sameTracesAsPdata(t, marshalTraces(t, td)) {
			t.Errorf("load export %d: the wire path declined it", i)
		}
	}
	if !sameTracesAsPdata(t, marshalTraces(t, otlpfixture.Traces())) {
		t.Error("otlpfixture.Traces: the wire path declined it")
	}
}

// TestTracesDecoderReuse: one decoder over many records gives each the
// Batch pdata and Traces give it (nothing of one record leaks into the
// next, declined and malformed ones included), and its Batches stay intact
// after later records reuse its scratch space.
func TestTracesDecoderReuse(t *testing.T) {
	var payloads [][]byte
	for _, pb := range traceFixtures(t) {
		payloads = append(payloads, pb, []byte{0x0a, 0x7f})
	}
	for _, td := range tracesProtoCases() {
		payloads = append(payloads, marshalTraces(t, td))
	}
	l := otlpfixture.Load{Hosts: 2, Duration: time.Minute, Requests: 40, Seed: 4}
	for _, td := range l.Traces(7) {
		payloads = append(payloads, marshalTraces(t, td))
	}
	var d TracesDecoder
	type result struct {
		got  Batch
		want Batch
	}
	var kept []result
	for i, pb := range payloads {
		got, gotErr := d.Record(pb, EncodingProto)
		td, err := DecodeTraces(pb, EncodingProto)
		if err != nil {
			if gotErr == nil || gotErr.Error() != err.Error() {
				t.Fatalf("payload %d: error %v, want %v", i, gotErr, err)
			}
			continue
		}
		if gotErr != nil {
			t.Fatalf("payload %d: %v", i, gotErr)
		}
		want := Traces(td)
		if diff := cmp.Diff(want, got, cmpopts.EquateNaNs()); diff != "" {
			t.Fatalf("payload %d (-pdata +decoder):\n%s", i, diff)
		}
		kept = append(kept, result{got, want})
		// The caller owns the payload: nothing of the Batch aliases it.
		for j := range pb {
			pb[j] = 0xff
		}
	}
	for i, r := range kept {
		if diff := cmp.Diff(r.want, r.got, cmpopts.EquateNaNs()); diff != "" {
			t.Fatalf("batch %d changed after later records (-pdata +decoder):\n%s", i, diff)
		}
	}
}

// TestTracesProtoDeclines: shapes the wire path leaves to pdata, and
// malformed payloads, which TracesDecoder still reports as DecodeTraces
// does.
func TestTracesProtoDeclines(t *testing.T) {
	one := func(f func(sp ptrace.Span, rs ptrace.ResourceSpans)) []byte {
		td := ptrace.NewTraces()
		rs := td.ResourceSpans().AppendEmpty()
		sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		sp.SetName("llm_request")
		sp.SetTraceID(pcommon.TraceID{1})
		sp.SetSpanID(pcommon.SpanID{1})
		sp.SetStartTimestamp(1)
		sp.SetEndTimestamp(2)
		f(sp, rs)
		return marshalTraces(t, td)
	}
	none := func(ptrace.Span, ptrace.ResourceSpans) {}
	declined := map[string][]byte{
		"slice attribute": one(func(sp ptrace.Span, _ ptrace.ResourceSpans) {
			sp.Attributes().PutEmptySlice("gen_ai.response.finish_reasons").AppendEmpty().SetStr("stop")
		}),
		"map attribute": one(func(sp ptrace.Span, _ ptrace.ResourceSpans) {
			sp.Attributes().PutEmptyMap("m").PutStr("a", "b")
		}),
		"bytes attribute": one(func(sp ptrace.Span, _ ptrace.ResourceSpans) {
			sp.Attributes().PutEmptyBytes("b").FromRaw([]byte{1})
		}),
		"event with a slice attribute": one(func(sp ptrace.Span, _ ptrace.ResourceSpans) {
			sp.Events().AppendEmpty().Attributes().PutEmptySlice("s")
		}),
		"unknown span field":      wrapSpanField(append(spanIDFields(), 0x98, 0x06, 0x01)), // field 99, varint
		"unknown top-level field": append(one(none), 0x98, 0x06, 0x01),
	}
	for name, pb := range declined {
		if _, ok := TracesProto(pb); ok {
			t.Errorf("%s: the wire path took it", name)
		}
		want, err := DecodeTraces(pb, EncodingProto)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var d TracesDecoder
		got, err := d.Record(pb, EncodingProto)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(Traces(want), got, cmpopts.EquateNaNs()); diff != "" {
			t.Errorf("%s: TracesDecoder differs from pdata (-pdata +got):\n%s", name, diff)
		}
	}
	good := one(none)
	for name, pb := range map[string][]byte{
		"truncated":        good[:len(good)-3],
		"bad wire type":    {0x0b},
		"field zero":       {0x02, 0x00},
		"overlong":         {0x0a, 0x7f},
		"varint too big":   {0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"short trace id":   wrapSpanField([]byte{0x0a, 0x03, 1, 2, 3}),
		"long span id":     wrapSpanField(append([]byte{0x12, 0x09}, make([]byte, 9)...)),
		"span name cut":    wrapSpanField([]byte{0x2a, 0x05, 'a'}),
		"start wrong type": wrapSpanField([]byte{0x38, 0x01}),
	} {
		if _, ok := TracesProto(pb); ok {
			t.Errorf("%s: the wire path took it", name)
		}
		_, want := DecodeTraces(pb, EncodingProto)
		var d TracesDecoder
		_, got := d.Record(pb, EncodingProto)
		if want == nil || got == nil || got.Error() != want.Error() {
			t.Errorf("%s: TracesDecoder error %v, DecodeTraces error %v", name, got, want)
		}
		if got != nil && !strings.Contains(got.Error(), "malformed") {
			t.Errorf("%s: error %q does not say the payload is malformed", name, got)
		}
	}
}

// wrapSpanField is an ExportTraceServiceRequest holding one span made of
// the given fields (at most 127 bytes).
func wrapSpanField(fields []byte) []byte {
	ss := append([]byte{0x12, byte(len(fields))}, fields...)
	rs := append([]byte{0x12, byte(len(ss))}, ss...)
	return append([]byte{0x0a, byte(len(rs))}, rs...)
}

// spanIDFields are a span's trace id, span id and name, as fields.
func spanIDFields() []byte {
	b := append([]byte{0x0a, 16}, make([]byte, 16)...)
	b[2] = 1
	b = append(b, 0x12, 8, 1, 0, 0, 0, 0, 0, 0, 0)
	return append(b, 0x2a, 3, 'a', 'b', 'c')
}

// FuzzTracesProto holds the wire path to pdata: whatever it takes, pdata
// accepts and normalizes to the same Batch; whatever it declines, the
// decoder reports as DecodeTraces does. Malformed input never panics.
func FuzzTracesProto(f *testing.F) {
	for _, td := range tracesProtoCases() {
		f.Add(marshalTraces(f, td))
	}
	for _, pb := range traceFixtures(f) {
		f.Add(pb)
	}
	f.Add(marshalTraces(f, otlpfixture.Traces()))
	f.Fuzz(func(t *testing.T, b []byte) {
		if sameTracesAsPdata(t, b) {
			return
		}
		var d TracesDecoder
		got, gotErr := d.Record(b, EncodingProto)
		td, err := DecodeTraces(b, EncodingProto)
		if (err == nil) != (gotErr == nil) || err != nil && err.Error() != gotErr.Error() {
			t.Fatalf("decoder error %v, DecodeTraces error %v", gotErr, err)
		}
		if err == nil {
			if diff := cmp.Diff(Traces(td), got, cmpopts.EquateNaNs()); diff != "" {
				t.Fatalf("(-pdata +decoder):\n%s", diff)
			}
		}
	})
}

// TestDoubleString: doubles render as pdata renders them.
func TestDoubleString(t *testing.T) {
	vals := []float64{0, math.Copysign(0, -1), 1, -1, 0.7, 1e-7, 1.5e-7, 1e-6, 9.99e-7, 1e20, 1e21, 1.2e21, -3e-9,
		math.MaxFloat64, math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1), math.Inf(-1), 123456789.125, 1e-10, 2.5e-100}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		vals = append(vals, math.Float64frombits(r.Uint64()))
	}
	for _, f := range vals {
		if got, want := doubleString(f), pcommon.NewValueDouble(f).AsString(); got != want {
			t.Errorf("doubleString(%v) = %q, pdata %q", f, got, want)
		}
	}
}
