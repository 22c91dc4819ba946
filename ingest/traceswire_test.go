package ingest

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// wireSeeds are requests pdata writes (every span field, events, links,
// nested attribute values, an empty trace id) and a few broken ones.
func wireSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.SetSchemaUrl("https://opentelemetry.io/schemas/1.26.0")
	rs.Resource().Attributes().PutStr("service.name", "vllm")
	rs.Resource().SetDroppedAttributesCount(1)
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("vllm.llm_engine")
	ss.Scope().SetVersion("1")
	ss.Scope().Attributes().PutInt("n", 3)
	sp := ss.Spans().AppendEmpty()
	sp.SetTraceID(pcommon.TraceID{1, 15: 2})
	sp.SetSpanID(pcommon.SpanID{3, 7: 4})
	sp.SetParentSpanID(pcommon.SpanID{5})
	sp.TraceState().FromRaw("a=b")
	sp.SetFlags(1)
	sp.SetName("llm_request")
	sp.SetKind(ptrace.SpanKindServer)
	sp.SetStartTimestamp(1)
	sp.SetEndTimestamp(2)
	a := sp.Attributes()
	a.PutDouble("gen_ai.latency.e2e", 1.5)
	a.PutBool("ok", true)
	a.PutEmptyBytes("raw").FromRaw([]byte{1, 2})
	arr := a.PutEmptySlice("list")
	arr.AppendEmpty().SetStr("x")
	arr.AppendEmpty().SetEmptyMap().PutInt("deep", 1)
	a.PutEmptyMap("map").PutEmptySlice("inner").AppendEmpty().SetDouble(2)
	sp.SetDroppedAttributesCount(2)
	ev := sp.Events().AppendEmpty()
	ev.SetName("retract")
	ev.SetTimestamp(3)
	ev.Attributes().PutStr("k", "v")
	ev.SetDroppedAttributesCount(1)
	sp.SetDroppedEventsCount(1)
	ln := sp.Links().AppendEmpty()
	ln.SetTraceID(pcommon.TraceID{9})
	ln.SetSpanID(pcommon.SpanID{8})
	ln.TraceState().FromRaw("c=d")
	ln.Attributes().PutStr("l", "m")
	ln.SetDroppedAttributesCount(1)
	ln.SetFlags(1)
	sp.SetDroppedLinksCount(1)
	sp.Status().SetCode(ptrace.StatusCodeError)
	sp.Status().SetMessage("boom")
	ss.Spans().AppendEmpty().SetName("no ids")
	td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	full, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		tb.Fatal(err)
	}
	// Attribute values nested past pdata's recursion limit, and just within.
	deep := func(levels int) []byte {
		td := ptrace.NewTraces()
		v := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty().Attributes().PutEmptySlice("deep")
		for range levels {
			v = v.AppendEmpty().SetEmptySlice()
		}
		b, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	return [][]byte{
		full,
		deep(48),
		deep(49),
		deep(60),
		full[:len(full)/2],
		{},
		{0x0a, 0x02, 0x12, 0x00}, // a resource with one empty scope
		{0x0a, 0x05, 0xc2, 0x3e, 0x02, 0x12, 0x00},       // the deprecated scope field 1000
		{0x0a, 0x04, 0x12, 0x02, 0x12, 0x00},             // one empty span
		{0x0a, 0x06, 0x12, 0x04, 0x12, 0x02, 0x0a, 0x01}, // a 1-byte trace id
		{0x0b, 0x0c},       // an empty group
		{0x08, 0x01},       // field 1 as a varint
		{0x1a, 0x80, 0x01}, // a truncated unknown field
	}
}

// checkLikePdata fails unless validateTraces and pdata agree on b: both
// accept it with the same span count, or both refuse it.
func checkLikePdata(t *testing.T, b []byte) {
	t.Helper()
	n, err := validateTraces(b)
	req := ptraceotlp.NewExportRequest()
	perr := req.UnmarshalProto(b)
	switch {
	case (err == nil) != (perr == nil):
		t.Fatalf("validateTraces: %v, pdata: %v, for %x", err, perr, b)
	case err == nil && n != req.Traces().SpanCount():
		t.Fatalf("validateTraces counts %d spans, pdata %d, in %x", n, req.Traces().SpanCount(), b)
	}
}

func TestValidateTracesLikePdata(t *testing.T) {
	for _, b := range wireSeeds(t) {
		checkLikePdata(t, b)
	}
	// Every prefix and every single-byte change of the full request.
	full := wireSeeds(t)[0]
	for i := range full {
		checkLikePdata(t, full[:i])
		for _, c := range []byte{0x00, 0x01, 0x02, 0x05, 0x08, 0x0b, 0x0c, 0x7f, 0x80, 0xff} {
			b := append([]byte(nil), full...)
			b[i] = c
			checkLikePdata(t, b)
		}
	}
}

// FuzzValidateTraces holds validateTraces to pdata's rules.
func FuzzValidateTraces(f *testing.F) {
	for _, b := range wireSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(checkLikePdata)
}
