package ingest_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/tailcause/tailcause/ingest"
	"github.com/tailcause/tailcause/internal/kafkax/kafkaxtest"
)

// handler is a server's HTTP handler without listeners, writing to an
// in-memory producer that keeps nothing.
func handler(tb testing.TB, mod func(*ingest.Config)) http.Handler {
	tb.Helper()
	cfg := testConfig()
	cfg.MaxBodyBytes, cfg.MaxWireBytes = 1<<20, 1<<20
	if mod != nil {
		mod(&cfg)
	}
	srv, err := ingest.New(cfg, &kafkaxtest.Producer{Discard: true}, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return srv.Handler()
}

var fuzzPaths = [...]string{ingest.PathTraces, ingest.PathMetrics, ingest.PathLogs}

// FuzzHTTPBody drives arbitrary bodies through content negotiation,
// decompression, decoding and encoding: no panics, and only the statuses
// that a body can cause.
func FuzzHTTPBody(f *testing.F) {
	pb, _ := ptraceotlp.NewExportRequestFromTraces(vllmTraces()).MarshalProto()
	f.Add(pb, uint8(0), false, false)
	f.Add(gz(f, pb), uint8(0), false, true)
	f.Add([]byte(jsonTraces), uint8(0), true, false)
	f.Add([]byte(`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"x","gauge":{"dataPoints":[{"asInt":"3"}]}}]}]}]}`), uint8(1), true, false)
	f.Add([]byte(`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"hi"}}]}]}]}`), uint8(2), true, false)
	f.Add([]byte{0x0a, 0xff, 0xff}, uint8(1), false, false)
	h := handler(f, func(c *ingest.Config) { c.Encoding.MaxMessageBytes = 1024 })
	f.Fuzz(func(t *testing.T, body []byte, path uint8, json, gzipped bool) {
		req := httptest.NewRequest(http.MethodPost, fuzzPaths[int(path)%len(fuzzPaths)], bytes.NewReader(body))
		if json {
			req.Header.Set("Content-Type", "application/json")
		} else {
			req.Header.Set("Content-Type", "application/x-protobuf")
		}
		if gzipped {
			req.Header.Set("Content-Encoding", "gzip")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for a body: %s", rec.Code, rec.Body.Bytes())
		}
	})
}

// benchBatch is 500 vLLM spans in 50 traces over 5 engines.
func benchBatch() ptrace.Traces {
	td := ptrace.NewTraces()
	for r := 0; r < 5; r++ {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", fmt.Sprintf("vllm-%d", r))
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName("vllm.llm_engine")
		for i := 0; i < 100; i++ {
			sp := ss.Spans().AppendEmpty()
			sp.SetTraceID(pcommon.TraceID{byte(r), byte(i % 10), 15: 1})
			sp.SetSpanID(pcommon.SpanID{byte(r), byte(i), 7: 1})
			sp.SetName("llm_request")
			sp.SetKind(ptrace.SpanKindServer)
			a := sp.Attributes()
			a.PutDouble("gen_ai.latency.time_to_first_token", 0.12)
			a.PutDouble("gen_ai.latency.e2e", 1.9)
			a.PutInt("gen_ai.usage.prompt_tokens", 812)
			a.PutInt("gen_ai.usage.completion_tokens", 256)
			a.PutStr("gen_ai.request.id", fmt.Sprintf("cmpl-%d-%d", r, i))
			a.PutStr("gen_ai.response.finish_reasons", `["stop"]`)
		}
	}
	return td
}

func benchmarkHTTP(b *testing.B, gzipped bool) {
	body, err := ptraceotlp.NewExportRequestFromTraces(benchBatch()).MarshalProto()
	if err != nil {
		b.Fatal(err)
	}
	if gzipped {
		body = gz(b, body)
	}
	h := handler(b, nil)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, ingest.PathTraces, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-protobuf")
		if gzipped {
			req.Header.Set("Content-Encoding", "gzip")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body.Bytes())
		}
	}
}

// BenchmarkHTTPProtobufTraces is one OTLP/HTTP request end to end (decode,
// split into 50 records, in-memory produce, response) without the network.
func BenchmarkHTTPProtobufTraces(b *testing.B)     { benchmarkHTTP(b, false) }
func BenchmarkHTTPProtobufTracesGzip(b *testing.B) { benchmarkHTTP(b, true) }
