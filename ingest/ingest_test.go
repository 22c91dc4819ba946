package ingest_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tailcause/tailcause/ingest"
	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/kafkax/kafkaxtest"
	"github.com/tailcause/tailcause/internal/otlpkafka"
	"github.com/tailcause/tailcause/schemas"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testServer is a started server and clients for it.
type testServer struct {
	srv     *ingest.Server
	url     string
	grpc    string
	reg     *prometheus.Registry
	client  *http.Client
	conn    *grpc.ClientConn
	brokers []string // set when backed by kfake
	// shutdownErrOK: the test shut the server down itself and checked the
	// result (Shutdown returns that result again at cleanup).
	shutdownErrOK bool
}

func testConfig() ingest.Config {
	cfg := ingest.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Encoding.SignalHeader = true
	cfg.WriteTimeout = 3 * time.Second
	return cfg
}

func start(t *testing.T, p ingest.Producer, mod func(*ingest.Config)) *testServer {
	t.Helper()
	cfg := testConfig()
	if mod != nil {
		mod(&cfg)
	}
	reg := prometheus.NewRegistry()
	srv, err := ingest.New(cfg, p, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ts := &testServer{srv: srv, reg: reg, client: &http.Client{Transport: &http.Transport{}, Timeout: 20 * time.Second}}
	if a := srv.HTTPAddr(); a != nil {
		ts.url = "http://" + a.String()
	}
	if a := srv.GRPCAddr(); a != nil {
		ts.grpc = a.String()
		conn, err := grpc.NewClient(ts.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ts.conn = conn
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil && !ts.shutdownErrOK {
			t.Errorf("shutdown: %v", err)
		}
		ts.client.CloseIdleConnections()
		if ts.conn != nil {
			ts.conn.Close()
		}
	})
	return ts
}

// startKafka starts a server writing through the real kafkax.Producer to an
// in-process kfake broker.
func startKafka(t *testing.T, mod func(*ingest.Config), pmod func(*kafkax.Config)) (*testServer, *kafkaxtest.Producer) {
	t.Helper()
	_, brokers := kafkaxtest.Cluster(t, 3, schemas.TopicSpans, schemas.TopicMetrics, schemas.TopicLogs)
	pcfg := kafkax.DefaultConfig()
	pcfg.Brokers = brokers
	pcfg.MaxAttempts = 2
	pcfg.BackoffMin, pcfg.BackoffMax = 10*time.Millisecond, 50*time.Millisecond
	if pmod != nil {
		pmod(&pcfg)
	}
	p, err := kafkax.NewProducer(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	ts := start(t, p, mod)
	ts.brokers = brokers
	return ts, nil
}

func (ts *testServer) post(t *testing.T, path, ctype string, body []byte, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// vllmTraces is three traces of vLLM llm_request spans on two engines.
func vllmTraces() ptrace.Traces {
	td := ptrace.NewTraces()
	for e := 0; e < 2; e++ {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", fmt.Sprintf("vllm-%d", e))
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName("vllm.llm_engine")
		for i := 0; i < 3; i++ {
			sp := ss.Spans().AppendEmpty()
			sp.SetTraceID(pcommon.TraceID{0x5b, 0x8e, byte(i), 15: 0x0c})
			sp.SetSpanID(pcommon.SpanID{byte(e), byte(i), 7: 1})
			sp.SetName("llm_request")
			sp.SetKind(ptrace.SpanKindServer)
			sp.Attributes().PutInt("gen_ai.usage.prompt_tokens", int64(100*e+i))
			sp.Attributes().PutDouble("gen_ai.latency.e2e", 1.5)
		}
	}
	return td
}

func marshalTraces(t *testing.T, td ptrace.Traces) []byte {
	t.Helper()
	b, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// spanIDsByKey decodes span records and maps each key to its span ids.
func spanIDsByKey(t *testing.T, keys, values [][]byte) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	var u ptrace.ProtoUnmarshaler
	for i := range values {
		td, err := u.UnmarshalTraces(values[i])
		if err != nil {
			t.Fatalf("record %d does not decode: %v", i, err)
		}
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, sp := range ss.Spans().All() {
					if got := sp.TraceID().String(); got != string(keys[i]) {
						t.Errorf("span of trace %s in record keyed %s", got, keys[i])
					}
					out[string(keys[i])] = append(out[string(keys[i])], sp.SpanID().String())
				}
			}
		}
	}
	return out
}

func wantSpanIDs(td ptrace.Traces) map[string][]string {
	out := map[string][]string{}
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				out[sp.TraceID().String()] = append(out[sp.TraceID().String()], sp.SpanID().String())
			}
		}
	}
	return out
}

func sameSpans(t *testing.T, got, want map[string][]string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("spans by trace:\n got %v\nwant %v", got, want)
	}
}

func TestHTTPProtobufTracesReachKafka(t *testing.T) {
	ts, _ := startKafka(t, nil, nil)
	td := vllmTraces()
	resp, body := ts.post(t, ingest.PathTraces, "application/x-protobuf", marshalTraces(t, td))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		t.Errorf("content type %q", ct)
	}
	if err := ptraceotlp.NewExportResponse().UnmarshalProto(body); err != nil {
		t.Errorf("response is not an ExportTraceServiceResponse: %v", err)
	}
	recs := kafkaxtest.Consume(t, ts.brokers, schemas.TopicSpans, 3, 10*time.Second)
	var keys, values [][]byte
	for _, r := range recs {
		if len(r.Key) != 32 || strings.ToLower(string(r.Key)) != string(r.Key) {
			t.Errorf("key %q is not a lowercase hex trace id", r.Key)
		}
		if _, err := hex.DecodeString(string(r.Key)); err != nil {
			t.Errorf("key %q: %v", r.Key, err)
		}
		if len(r.Headers) != 1 || r.Headers[0].Key != otlpkafka.SignalHeader || string(r.Headers[0].Value) != "traces" {
			t.Errorf("headers %v", r.Headers)
		}
		keys, values = append(keys, r.Key), append(values, r.Value)
	}
	sameSpans(t, spanIDsByKey(t, keys, values), wantSpanIDs(td))
}

const jsonTraces = `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"vllm"}}]},
 "scopeSpans":[{"scope":{"name":"vllm.llm_engine"},"spans":[
  {"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"llm_request","kind":2,
   "startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000001900000000",
   "attributes":[{"key":"gen_ai.usage.prompt_tokens","value":{"intValue":"812"}},
                 {"key":"gen_ai.latency.e2e","value":{"doubleValue":1.9}}]}]}]}]}`

func TestHTTPJSONTraces(t *testing.T) {
	p := &kafkaxtest.Producer{}
	ts := start(t, p, nil)
	resp, body := ts.post(t, ingest.PathTraces, "application/json; charset=utf-8", []byte(jsonTraces))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
	if err := ptraceotlp.NewExportResponse().UnmarshalJSON(body); err != nil {
		t.Errorf("response %q is not a JSON ExportTraceServiceResponse: %v", body, err)
	}
	recs := p.Records(schemas.TopicSpans)
	if len(recs) != 1 || string(recs[0].Key) != "5b8efff798038103d269b633813fc60c" {
		t.Fatalf("records %v", recs)
	}
	var u ptrace.ProtoUnmarshaler
	td, err := u.UnmarshalTraces(recs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	sp := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
	if v, _ := sp.Attributes().Get("gen_ai.usage.prompt_tokens"); v.Type() != pcommon.ValueTypeInt || v.Int() != 812 {
		t.Errorf("OTLP-JSON string int: got %v (%s), want int 812", v.AsRaw(), v.Type())
	}
	if sp.EndTimestamp() != 1700000001900000000 || sp.Kind() != ptrace.SpanKindServer {
		t.Errorf("span %v %v", sp.EndTimestamp(), sp.Kind())
	}
}

func dcgmMetrics() pmetric.Metrics {
	md := pmetric.NewMetrics()
	for n := 0; n < 2; n++ {
		rm := md.ResourceMetrics().AppendEmpty()
		rm.Resource().Attributes().PutStr("service.name", "dcgm-exporter")
		rm.Resource().Attributes().PutStr("service.instance.id", fmt.Sprintf("node-%d:9400", n))
		m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
		m.SetName("DCGM_FI_DEV_SM_CLOCK")
		dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
		dp.SetDoubleValue(1410)
		dp.Attributes().PutStr("UUID", fmt.Sprintf("GPU-%d", n))
	}
	return md
}

func TestHTTPGzipMetrics(t *testing.T) {
	ts, _ := startKafka(t, nil, nil)
	md := dcgmMetrics()
	raw, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	resp, body := ts.post(t, ingest.PathMetrics, "application/x-protobuf", gz(t, raw), "Content-Encoding", "gzip")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	recs := kafkaxtest.Consume(t, ts.brokers, schemas.TopicMetrics, 2, 10*time.Second)
	want := map[string]bool{}
	for _, rm := range md.ResourceMetrics().All() {
		want[string(otlpkafka.AppendResourceHash(nil, rm.Resource().Attributes()))] = true
	}
	var u pmetric.ProtoUnmarshaler
	for _, r := range recs {
		if !want[string(r.Key)] {
			t.Errorf("key %x is not a resource hash", r.Key)
		}
		got, err := u.UnmarshalMetrics(r.Value)
		if err != nil || got.DataPointCount() != 1 {
			t.Errorf("record: %v, %d points", err, got.DataPointCount())
		}
	}
}

func TestGRPCExportAllSignals(t *testing.T) {
	ts, _ := startKafka(t, func(c *ingest.Config) { c.Token = "s3cret" }, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	authCtx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")
	gzipped := grpc.UseCompressor(grpcgzip.Name)

	td := vllmTraces()
	if _, err := ptraceotlp.NewGRPCClient(ts.conn).Export(authCtx, ptraceotlp.NewExportRequestFromTraces(td), gzipped); err != nil {
		t.Fatalf("export traces: %v", err)
	}
	if _, err := pmetricotlp.NewGRPCClient(ts.conn).Export(authCtx, pmetricotlp.NewExportRequestFromMetrics(dcgmMetrics())); err != nil {
		t.Fatalf("export metrics: %v", err)
	}
	ld := plog.NewLogs()
	ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Body().SetStr("engine started")
	if _, err := plogotlp.NewGRPCClient(ts.conn).Export(authCtx, plogotlp.NewExportRequestFromLogs(ld)); err != nil {
		t.Fatalf("export logs: %v", err)
	}

	spans := kafkaxtest.Consume(t, ts.brokers, schemas.TopicSpans, 3, 10*time.Second)
	var keys, values [][]byte
	for _, r := range spans {
		keys, values = append(keys, r.Key), append(values, r.Value)
	}
	sameSpans(t, spanIDsByKey(t, keys, values), wantSpanIDs(td))
	kafkaxtest.Consume(t, ts.brokers, schemas.TopicMetrics, 2, 10*time.Second)
	logs := kafkaxtest.Consume(t, ts.brokers, schemas.TopicLogs, 1, 10*time.Second)
	if logs[0].Key != nil {
		t.Errorf("log record key %q, want none", logs[0].Key)
	}

	// Without the token: Unauthenticated, nothing written.
	_, err := ptraceotlp.NewGRPCClient(ts.conn).Export(ctx, ptraceotlp.NewExportRequestFromTraces(td))
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("no token: %v, want Unauthenticated", err)
	}
	badCtx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer nope")
	_, err = ptraceotlp.NewGRPCClient(ts.conn).Export(badCtx, ptraceotlp.NewExportRequestFromTraces(td))
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("wrong token: %v, want Unauthenticated", err)
	}
}

func decodeStatus(t *testing.T, body []byte, json bool) *spb.Status {
	t.Helper()
	st := &spb.Status{}
	var err error
	if json {
		err = protojson.Unmarshal(body, st)
	} else {
		err = proto.Unmarshal(body, st)
	}
	if err != nil {
		t.Fatalf("error body %q is not a google.rpc.Status: %v", body, err)
	}
	return st
}

func TestHTTPRejections(t *testing.T) {
	p := &kafkaxtest.Producer{}
	ts := start(t, p, func(c *ingest.Config) {
		c.Token = "s3cret"
		c.MaxBodyBytes = 64 << 10
		c.MaxWireBytes = 32 << 10
	})
	auth := []string{"Authorization", "Bearer s3cret"}
	good := marshalTraces(t, vllmTraces())
	bomb := gz(t, make([]byte, 32<<20)) // 32 MiB of zeros in ~32 KiB
	if len(bomb) > 32<<10 {
		bomb = gz(t, make([]byte, 16<<20))
	}

	for _, tc := range []struct {
		name       string
		method     string
		path       string
		ctype      string
		body       []byte
		hdr        []string
		wantStatus int
		wantMsg    string
		json       bool
	}{
		{"no token", "POST", ingest.PathTraces, "application/x-protobuf", good, nil, 401, "bearer token", false},
		{"wrong token", "POST", ingest.PathTraces, "application/x-protobuf", good, []string{"Authorization", "Bearer s3cre"}, 401, "bearer token", false},
		{"wrong scheme", "POST", ingest.PathTraces, "application/x-protobuf", good, []string{"Authorization", "Basic s3cret"}, 401, "bearer token", false},
		{"malformed protobuf", "POST", ingest.PathTraces, "application/x-protobuf", []byte{0x0a, 0xff, 0xff, 0x01}, auth, 400, "decode OTLP traces request (protobuf)", false},
		{"malformed json", "POST", ingest.PathMetrics, "application/json", []byte(`{"resourceMetrics":[`), auth, 400, "decode OTLP metrics request (JSON)", true},
		{"wrong content type", "POST", ingest.PathTraces, "text/plain", good, auth, 415, "content type", false},
		{"no content type", "POST", ingest.PathLogs, "", good, auth, 415, "content type", false},
		{"unsupported encoding", "POST", ingest.PathTraces, "application/x-protobuf", good, append([]string{"Content-Encoding", "br"}, auth...), 415, "content encoding", false},
		{"oversize body", "POST", ingest.PathTraces, "application/x-protobuf", make([]byte, 40<<10), auth, 413, "exceeds", false},
		{"gzip bomb", "POST", ingest.PathTraces, "application/x-protobuf", bomb, append([]string{"Content-Encoding", "gzip"}, auth...), 413, "after decompression", false},
		{"corrupt gzip", "POST", ingest.PathTraces, "application/x-protobuf", []byte("not gzip at all"), append([]string{"Content-Encoding", "gzip"}, auth...), 400, "gzip", false},
		{"GET", "GET", ingest.PathTraces, "application/x-protobuf", nil, auth, 405, "POST", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, ts.url+tc.path, bytes.NewReader(tc.body))
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				req.Header.Set(tc.hdr[i], tc.hdr[i+1])
			}
			resp, err := ts.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.wantStatus, body)
			}
			st := decodeStatus(t, body, tc.json)
			if !strings.Contains(st.GetMessage(), tc.wantMsg) {
				t.Errorf("message %q does not mention %q", st.GetMessage(), tc.wantMsg)
			}
			if resp.Header.Get("Retry-After") != "" {
				t.Errorf("Retry-After on a permanent error")
			}
			if tc.wantStatus == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	if w := p.Writes(); len(w) != 0 {
		t.Errorf("rejected requests wrote %d batches to kafka", len(w))
	}
	// And the right token works.
	resp, body := ts.post(t, ingest.PathTraces, "application/x-protobuf", good, auth...)
	if resp.StatusCode != 200 {
		t.Fatalf("good request: %d %s", resp.StatusCode, body)
	}
	// Chunked upload (no Content-Length) over the wire limit: still 413.
	pr, pw := io.Pipe()
	go func() { _, _ = pw.Write(make([]byte, 40<<10)); pw.Close() }()
	req, _ := http.NewRequest("POST", ts.url+ingest.PathTraces, pr)
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("chunked oversize: status %d, want 413", resp.StatusCode)
	}
}

func TestSpanLargerThanRecordLimit(t *testing.T) {
	p := &kafkaxtest.Producer{}
	ts := start(t, p, func(c *ingest.Config) { c.Encoding.MaxMessageBytes = 4096 })
	td := vllmTraces()
	td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes().PutStr("big", strings.Repeat("x", 8000))
	resp, body := ts.post(t, ingest.PathTraces, "application/x-protobuf", marshalTraces(t, td))
	if resp.StatusCode != 413 {
		t.Fatalf("status %d, want 413: %s", resp.StatusCode, body)
	}
	if len(p.Writes()) != 0 {
		t.Error("a request with an unwritable span was partly written")
	}
	_, err := ptraceotlp.NewGRPCClient(ts.conn).Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(td))
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("gRPC: %v, want InvalidArgument", err)
	}
}

func retryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

func TestKafkaUnavailable(t *testing.T) {
	t.Run("retriable producer error", func(t *testing.T) {
		p := &kafkaxtest.Producer{Err: &kafkax.Error{Op: "write", Retriable: true, Err: fmt.Errorf("leader not available")}}
		ts := start(t, p, nil)
		resp, body := ts.post(t, ingest.PathTraces, "application/x-protobuf", marshalTraces(t, vllmTraces()))
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" {
			t.Fatalf("status %d Retry-After %q, want 503 with Retry-After 2 (%s)", resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		if st := decodeStatus(t, body, false); codes.Code(st.Code) != codes.Unavailable {
			t.Errorf("status body code %v", codes.Code(st.Code))
		}
		_, err := ptraceotlp.NewGRPCClient(ts.conn).Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(vllmTraces()))
		if status.Code(err) != codes.Unavailable || retryDelay(err) != 2*time.Second {
			t.Errorf("gRPC: %v (retry delay %s), want Unavailable with RetryInfo 2s", err, retryDelay(err))
		}
		if len(p.Writes()) != 0 {
			t.Error("failed writes recorded")
		}
	})
	t.Run("permanent producer error", func(t *testing.T) {
		p := &kafkaxtest.Producer{Err: &kafkax.Error{Op: "write", Retriable: false, Err: fmt.Errorf("topic authorization failed")}}
		ts := start(t, p, nil)
		resp, body := ts.post(t, ingest.PathTraces, "application/x-protobuf", marshalTraces(t, vllmTraces()))
		if resp.StatusCode != 500 || resp.Header.Get("Retry-After") != "" {
			t.Fatalf("status %d, want 500 without Retry-After (%s)", resp.StatusCode, body)
		}
	})
	t.Run("broker down", func(t *testing.T) {
		c, brokers := kafkaxtest.Cluster(t, 3, schemas.TopicSpans)
		pcfg := kafkax.DefaultConfig()
		pcfg.Brokers = brokers
		pcfg.MaxAttempts, pcfg.BackoffMin, pcfg.BackoffMax = 2, 10*time.Millisecond, 20*time.Millisecond
		p, err := kafkax.NewProducer(pcfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		ts := start(t, p, func(c *ingest.Config) { c.WriteTimeout = 2 * time.Second })
		c.Close()
		resp, body := ts.post(t, ingest.PathTraces, "application/x-protobuf", marshalTraces(t, vllmTraces()))
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("status %d Retry-After %q, want 503 with Retry-After (%s)", resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		_, err = ptraceotlp.NewGRPCClient(ts.conn).Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(vllmTraces()))
		if status.Code(err) != codes.Unavailable {
			t.Errorf("gRPC: %v, want Unavailable", err)
		}
	})
}

func TestAcknowledgeOnlyAfterKafka(t *testing.T) {
	p := &kafkaxtest.Producer{Block: make(chan struct{}), Started: make(chan struct{}, 1)}
	ts := start(t, p, nil)
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", ts.url+ingest.PathTraces, bytes.NewReader(marshalTraces(t, vllmTraces())))
		req.Header.Set("Content-Type", "application/x-protobuf")
		resp, err := ts.client.Do(req)
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-p.Started
	select {
	case code := <-done:
		t.Fatalf("answered %d while kafka had not acknowledged", code)
	case <-time.After(150 * time.Millisecond):
	}
	close(p.Block)
	if code := <-done; code != 200 {
		t.Fatalf("status %d after kafka acknowledged", code)
	}
	if n := len(p.Records(schemas.TopicSpans)); n != 3 {
		t.Errorf("%d records written, want 3", n)
	}
}

func TestOverloadIsRetryable(t *testing.T) {
	p := &kafkaxtest.Producer{Block: make(chan struct{}), Started: make(chan struct{}, 1)}
	ts := start(t, p, func(c *ingest.Config) { c.MaxInFlight = 1 })
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", ts.url+ingest.PathTraces, bytes.NewReader(marshalTraces(t, vllmTraces())))
		req.Header.Set("Content-Type", "application/x-protobuf")
		resp, err := ts.client.Do(req)
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-p.Started
	resp, body := ts.post(t, ingest.PathTraces, "application/x-protobuf", marshalTraces(t, vllmTraces()))
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("second request: %d (Retry-After %q), want 429 with Retry-After: %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	_, err := ptraceotlp.NewGRPCClient(ts.conn).Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(vllmTraces()))
	if status.Code(err) != codes.ResourceExhausted || retryDelay(err) == 0 {
		t.Errorf("gRPC: %v, want ResourceExhausted with RetryInfo", err)
	}
	close(p.Block)
	if code := <-done; code != 200 {
		t.Errorf("first request: %d", code)
	}
}

func TestShutdownDrainsInFlight(t *testing.T) {
	p := &kafkaxtest.Producer{Block: make(chan struct{}), Started: make(chan struct{}, 1)}
	ts := start(t, p, nil)
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", ts.url+ingest.PathTraces, bytes.NewReader(marshalTraces(t, vllmTraces())))
		req.Header.Set("Content-Type", "application/x-protobuf")
		resp, err := ts.client.Do(req)
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-p.Started
	stopped := make(chan error, 1)
	go func() { stopped <- ts.srv.Shutdown(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	case <-time.After(150 * time.Millisecond):
	}
	close(p.Block)
	if code := <-done; code != 200 {
		t.Errorf("in-flight request: %d, want 200", code)
	}
	if err := <-stopped; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if err := ts.srv.Shutdown(context.Background()); err != nil {
		t.Errorf("second shutdown: %v", err)
	}
}

func TestShutdownHonoursDeadline(t *testing.T) {
	p := &kafkaxtest.Producer{Block: make(chan struct{}), Started: make(chan struct{}, 1)}
	defer close(p.Block)
	ts := start(t, p, func(c *ingest.Config) { c.WriteTimeout = time.Minute })
	done := make(chan int, 1)
	go func() {
		_, err := ptraceotlp.NewGRPCClient(ts.conn).Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(vllmTraces()))
		done <- int(status.Code(err))
	}()
	<-p.Started
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	ts.shutdownErrOK = true
	err := ts.srv.Shutdown(ctx)
	if err == nil || time.Since(t0) > 5*time.Second {
		t.Errorf("Shutdown past its deadline: %v after %s", err, time.Since(t0))
	}
	if code := codes.Code(<-done); code == codes.OK {
		t.Error("request cut off by shutdown was acknowledged")
	}
}

func TestStartFailsOnBusyPort(t *testing.T) {
	p := &kafkaxtest.Producer{}
	ts := start(t, p, nil)
	cfg := testConfig()
	cfg.HTTPAddr = ts.srv.HTTPAddr().String()
	srv, err := ingest.New(cfg, p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "listen for otlp/http") {
		t.Fatalf("Start on a busy port: %v", err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestRunStopsWithContext(t *testing.T) {
	p := &kafkaxtest.Producer{}
	cfg := testConfig()
	srv, err := ingest.New(cfg, p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- srv.Run(ctx) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestMetrics(t *testing.T) {
	p := &kafkaxtest.Producer{}
	ts := start(t, p, nil)
	ts.post(t, ingest.PathTraces, "application/x-protobuf", marshalTraces(t, vllmTraces()))
	ts.post(t, ingest.PathTraces, "text/plain", nil)
	mfs, err := ts.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			got[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	for k, want := range map[string]float64{
		"tailcause_ingest_requests_total{signal=traces,transport=http}":                                        2,
		"tailcause_ingest_rejected_requests_total{reason=unsupported_media_type,signal=traces,transport=http}": 1,
		"tailcause_ingest_accepted_items_total{signal=traces,transport=http}":                                  6,
		"tailcause_ingest_kafka_records_total{topic=otlp_spans}":                                               3,
		"tailcause_ingest_kafka_write_duration_seconds{result=ok,topic=otlp_spans}":                            1,
		"tailcause_ingest_inflight_requests{}":                                                                 0,
		"tailcause_ingest_rejected_requests_total{reason=overloaded,signal=logs,transport=grpc}":               0,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
	if got["tailcause_ingest_received_bytes_total{signal=traces,transport=http}"] == 0 {
		t.Error("received bytes not counted")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := ingest.DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := ingest.DefaultConfig()
	bad.GRPCAddr, bad.HTTPAddr = "", ""
	bad.MaxInFlight = 0
	bad.Encoding.MaxMessageBytes = 1
	err := bad.Validate()
	for _, want := range []string{"at least one", "max in flight", "encoding"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
	if _, err := ingest.New(ingest.DefaultConfig(), nil, nil, nil); err == nil {
		t.Error("New accepted a nil producer")
	}
	reg := prometheus.NewRegistry()
	if _, err := ingest.New(ingest.DefaultConfig(), &kafkaxtest.Producer{}, reg, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ingest.New(ingest.DefaultConfig(), &kafkaxtest.Producer{}, reg, nil); err == nil {
		t.Error("two servers registered on one registry")
	}
}
