package otlpkafka

import (
	"errors"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

func fuzzSeeds(f *testing.F) {
	var m ptrace.ProtoMarshaler
	for _, td := range []ptrace.Traces{
		makeTraces([]spanRef{{0, 0, 1}, {1, 0, 2}, {0, 1, 1}}, 0),
		makeTraces([]spanRef{{0, 0, 1}, {0, 0, 1}, {0, 0, 1}, {0, 0, 1}}, 600),
		makeTraces([]spanRef{{0, 0, 0}}, 3000),
	} {
		b, _ := m.MarshalTraces(td)
		f.Add(b)
	}
	mb, _ := pmetricotlp.NewExportRequestFromMetrics(makeMetrics(2, 3, 10)).MarshalProto()
	f.Add(mb)
	lb, _ := plogotlp.NewExportRequestFromLogs(makeLogs(2, 3)).MarshalProto()
	f.Add(lb)
	f.Add([]byte{0x0a, 0x02, 0x12, 0x00})
	f.Add([]byte{0x0a, 0x05, 0xc2, 0x3e, 0x02, 0x12, 0x00})
}

// FuzzAppendTracesProto feeds arbitrary bytes to the wire splitter: it must
// never panic, and when pdata accepts the bytes the records must hold every
// span, each record within the limit or a TooLargeError.
func FuzzAppendTracesProto(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		e := newEncoder(t, func(c *Config) { c.MaxMessageBytes = minMaxMessageBytes })
		recs, _, err := e.appendTracesProto(nil, nil, b)
		req := ptraceotlp.NewExportRequest()
		if req.UnmarshalProto(b) != nil {
			return // invalid input: only "no panic" is required
		}
		if err != nil {
			if errors.Is(err, ErrMessageTooLarge) {
				return
			}
			t.Fatalf("pdata accepts the request, the splitter does not: %v", err)
		}
		n := 0
		var u ptrace.ProtoUnmarshaler
		for _, r := range recs {
			if len(r.Value) > minMaxMessageBytes {
				t.Fatalf("record of %d bytes", len(r.Value))
			}
			td, err := u.UnmarshalTraces(r.Value)
			if err != nil {
				t.Fatalf("record does not decode: %v", err)
			}
			n += td.SpanCount()
		}
		if want := req.Traces().SpanCount(); n != want {
			t.Fatalf("records hold %d spans, request has %d", n, want)
		}
	})
}

// FuzzAppendMetricsLogs runs the resource splitter on whatever pdata accepts
// as metrics or logs.
func FuzzAppendMetricsLogs(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		e := newEncoder(t, func(c *Config) { c.MaxMessageBytes = minMaxMessageBytes })
		if mr := pmetricotlp.NewExportRequest(); mr.UnmarshalProto(b) == nil {
			if _, _, err := e.AppendMetrics(nil, nil, mr.Metrics()); err != nil && !errors.Is(err, ErrMessageTooLarge) {
				t.Fatalf("metrics: %v", err)
			}
		}
		if lr := plogotlp.NewExportRequest(); lr.UnmarshalProto(b) == nil {
			if _, _, err := e.AppendLogs(nil, nil, lr.Logs()); err != nil && !errors.Is(err, ErrMessageTooLarge) {
				t.Fatalf("logs: %v", err)
			}
		}
	})
}
