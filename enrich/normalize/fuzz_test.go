package normalize

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// addFixtureSeeds seeds a fuzzer with the fixtures, as OTLP-JSON and
// re-encoded as protobuf (encoding byte 0 = proto, 1 = json).
func addFixtureSeeds(f *testing.F, suffix string, toProto func([]byte) ([]byte, bool)) {
	f.Helper()
	paths, _ := filepath.Glob(filepath.Join("testdata", "*"+suffix))
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw, byte(1))
		if pb, ok := toProto(raw); ok {
			f.Add(pb, byte(0))
		}
	}
	f.Add([]byte{}, byte(0))
	f.Add([]byte(`{}`), byte(1))
}

func encodingFor(b byte) Encoding {
	if b%2 == 1 {
		return EncodingJSON
	}
	return EncodingProto
}

func FuzzDecodeTraces(f *testing.F) {
	addFixtureSeeds(f, "_traces.json", func(raw []byte) ([]byte, bool) {
		td, err := DecodeTraces(raw, EncodingJSON)
		if err != nil {
			return nil, false
		}
		var m ptrace.ProtoMarshaler
		pb, err := m.MarshalTraces(td)
		return pb, err == nil
	})
	f.Fuzz(func(t *testing.T, b []byte, enc byte) {
		td, err := DecodeTraces(b, encodingFor(enc))
		if err != nil {
			return
		}
		out := Traces(td)
		// Every step and request names a trace; a request's UID is its ids.
		for _, r := range out.Requests {
			if r.UID != r.TraceID+"-"+r.SpanID || r.EndNs < r.StartNs || r.StartNs == 0 {
				t.Fatalf("bad request %+v", r)
			}
			if len(r.AttrKeys) != len(r.AttrValues) || len(r.AttrKeys) > maxExtraAttrs {
				t.Fatalf("bad extras: %d keys, %d values", len(r.AttrKeys), len(r.AttrValues))
			}
		}
		for _, s := range out.Steps {
			if s.TraceID == "" || s.EndNs < s.StartNs {
				t.Fatalf("bad step %+v", s)
			}
		}
		if len(out.Rejects) > maxRejects {
			t.Fatalf("%d rejects, bound is %d", len(out.Rejects), maxRejects)
		}
	})
}

func FuzzDecodeMetrics(f *testing.F) {
	addFixtureSeeds(f, "_metrics.json", func(raw []byte) ([]byte, bool) {
		md, err := DecodeMetrics(raw, EncodingJSON)
		if err != nil {
			return nil, false
		}
		var m pmetric.ProtoMarshaler
		pb, err := m.MarshalMetrics(md)
		return pb, err == nil
	})
	f.Fuzz(func(t *testing.T, b []byte, enc byte) {
		md, err := DecodeMetrics(b, encodingFor(enc))
		if err != nil {
			return
		}
		out := Metrics(md)
		c := NewCounters(8)
		for _, s := range out.Samples {
			if s.TimeNs == 0 || s.Metric == "" || strings.TrimSpace(string(s.Family)) == "" {
				t.Fatalf("bad sample %+v", s)
			}
			if d, _, ok := c.Observe(s); ok && d < 0 {
				t.Fatalf("negative delta %v for %+v", d, s)
			}
		}
		if c.Len() > 8 {
			t.Fatalf("counters hold %d series, bound is 8", c.Len())
		}
	})
}
