package normalize

import (
	"errors"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

func TestParseEncoding(t *testing.T) {
	for in, want := range map[string]Encoding{"": EncodingProto, "otlp_proto": EncodingProto, "otlp_json": EncodingJSON} {
		got, err := ParseEncoding(in)
		if err != nil || got != want {
			t.Errorf("ParseEncoding(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseEncoding("zipkin_json"); !errors.Is(err, ErrUnknownEncoding) {
		t.Errorf("ParseEncoding(zipkin_json) error = %v, want ErrUnknownEncoding", err)
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	td := ptrace.NewTraces()
	sp := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetName("llm_request")
	md := pmetric.NewMetrics()
	md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty().SetEmptyGauge().DataPoints().AppendEmpty().SetIntValue(3)
	ld := plog.NewLogs()
	ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Body().SetStr("hello")

	var tpm ptrace.ProtoMarshaler
	var tjm ptrace.JSONMarshaler
	var mpm pmetric.ProtoMarshaler
	var mjm pmetric.JSONMarshaler
	var lpm plog.ProtoMarshaler
	var ljm plog.JSONMarshaler
	must := func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, enc := range []Encoding{"", EncodingProto, EncodingJSON} {
		tb, mb, lb := must(tpm.MarshalTraces(td)), must(mpm.MarshalMetrics(md)), must(lpm.MarshalLogs(ld))
		if enc == EncodingJSON {
			tb, mb, lb = must(tjm.MarshalTraces(td)), must(mjm.MarshalMetrics(md)), must(ljm.MarshalLogs(ld))
		}
		gt, err := DecodeTraces(tb, enc)
		if err != nil || gt.SpanCount() != 1 || gt.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Name() != "llm_request" {
			t.Errorf("DecodeTraces(%q): %v", enc, err)
		}
		gm, err := DecodeMetrics(mb, enc)
		if err != nil || gm.DataPointCount() != 1 {
			t.Errorf("DecodeMetrics(%q): %v", enc, err)
		}
		gl, err := DecodeLogs(lb, enc)
		if err != nil || gl.LogRecordCount() != 1 {
			t.Errorf("DecodeLogs(%q): %v", enc, err)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	garbage := []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f} // a length far past the end
	for _, enc := range []Encoding{EncodingProto, EncodingJSON} {
		if _, err := DecodeTraces(garbage, enc); !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeTraces(garbage, %s) error = %v, want ErrMalformed", enc, err)
		}
		if _, err := DecodeMetrics(garbage, enc); !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeMetrics(garbage, %s) error = %v, want ErrMalformed", enc, err)
		}
		if _, err := DecodeLogs(garbage, enc); !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeLogs(garbage, %s) error = %v, want ErrMalformed", enc, err)
		}
	}
	if _, err := DecodeTraces([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"xyz"}]}]}]}`), EncodingJSON); !errors.Is(err, ErrMalformed) {
		t.Errorf("DecodeTraces(bad trace id) error = %v, want ErrMalformed", err)
	}
	if _, err := DecodeTraces(nil, "otlp_avro"); !errors.Is(err, ErrUnknownEncoding) {
		t.Errorf("DecodeTraces(otlp_avro) error = %v, want ErrUnknownEncoding", err)
	}
	if _, err := DecodeMetrics(nil, "otlp_avro"); !errors.Is(err, ErrUnknownEncoding) {
		t.Errorf("DecodeMetrics(otlp_avro) error = %v, want ErrUnknownEncoding", err)
	}
	if _, err := DecodeLogs(nil, "otlp_avro"); !errors.Is(err, ErrUnknownEncoding) {
		t.Errorf("DecodeLogs(otlp_avro) error = %v, want ErrUnknownEncoding", err)
	}
	// An empty protobuf message is a valid, empty request.
	if td, err := DecodeTraces(nil, EncodingProto); err != nil || td.SpanCount() != 0 {
		t.Errorf("DecodeTraces(nil) = %d spans, %v", td.SpanCount(), err)
	}
}
