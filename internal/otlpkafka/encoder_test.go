package otlpkafka

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tailcause/tailcause/internal/kafkax"
)

func traceID(n byte) pcommon.TraceID {
	var t pcommon.TraceID
	t[0], t[15] = 0xab, n
	return t
}

// spanRef says where a span goes: resource r, scope s, trace t.
type spanRef struct {
	r, s int
	t    byte
}

// makeTraces builds spans named "span-<i>" in the given places, with pad
// bytes of attribute payload each.
func makeTraces(refs []spanRef, pad int) ptrace.Traces {
	td := ptrace.NewTraces()
	type key struct{ r, s int }
	scopes := map[key]ptrace.ScopeSpans{}
	res := map[int]ptrace.ResourceSpans{}
	for i, ref := range refs {
		rs, ok := res[ref.r]
		if !ok {
			rs = td.ResourceSpans().AppendEmpty()
			rs.Resource().Attributes().PutStr("service.name", fmt.Sprintf("svc-%d", ref.r))
			rs.SetSchemaUrl("https://opentelemetry.io/schemas/1.26.0")
			res[ref.r] = rs
		}
		ss, ok := scopes[key{ref.r, ref.s}]
		if !ok {
			ss = rs.ScopeSpans().AppendEmpty()
			ss.Scope().SetName(fmt.Sprintf("scope-%d", ref.s))
			ss.Scope().SetVersion("1.0")
			scopes[key{ref.r, ref.s}] = ss
		}
		sp := ss.Spans().AppendEmpty()
		sp.SetName(fmt.Sprintf("span-%d", i))
		if ref.t != 0 {
			sp.SetTraceID(traceID(ref.t))
		}
		sp.SetSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, byte(i)})
		sp.Attributes().PutDouble("gen_ai.latency.e2e", 1.25)
		if pad > 0 {
			sp.Attributes().PutStr("pad", strings.Repeat("x", pad))
		}
	}
	return td
}

func newEncoder(t testing.TB, mod func(*Config)) *Encoder {
	t.Helper()
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	e, err := NewEncoder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func decodeTraces(t testing.TB, v []byte) ptrace.Traces {
	t.Helper()
	var u ptrace.ProtoUnmarshaler
	td, err := u.UnmarshalTraces(v)
	if err != nil {
		t.Fatalf("decode record value: %v", err)
	}
	return td
}

// spanPlaces lists "resource/scope/span" for every span, in order.
func spanPlaces(td ptrace.Traces) []string {
	var out []string
	for _, rs := range td.ResourceSpans().All() {
		svc, _ := rs.Resource().Attributes().Get("service.name")
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				out = append(out, svc.Str()+"/"+ss.Scope().Name()+"/"+sp.Name()+"/"+sp.TraceID().String())
			}
		}
	}
	return out
}

func TestAppendTracesOneRecordPerTrace(t *testing.T) {
	refs := []spanRef{
		{0, 0, 1}, {0, 0, 2}, {0, 1, 1}, {1, 0, 3}, {1, 0, 1}, {1, 1, 2}, {0, 0, 1},
	}
	td := makeTraces(refs, 0)
	e := newEncoder(t, func(c *Config) { c.SignalHeader = true })
	recs, buf, err := e.AppendTraces(nil, nil, td)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("got %d records, want 3 (one per trace)", len(recs))
	}
	wantOrder := []byte{1, 2, 3} // first appearance
	var all []string
	for i, rec := range recs {
		tid := traceID(wantOrder[i])
		if got, want := string(rec.Key), hex.EncodeToString(tid[:]); got != want {
			t.Errorf("record %d key %q, want %q", i, got, want)
		}
		if len(rec.Headers) != 1 || rec.Headers[0].Key != SignalHeader || string(rec.Headers[0].Value) != "traces" {
			t.Errorf("record %d headers %v", i, rec.Headers)
		}
		got := decodeTraces(t, rec.Value)
		for _, p := range spanPlaces(got) {
			if !strings.HasSuffix(p, tid.String()) {
				t.Errorf("record %d holds span %s of another trace", i, p)
			}
		}
		// Resource and scope survive.
		rs := got.ResourceSpans().At(0)
		if rs.SchemaUrl() == "" || rs.ScopeSpans().At(0).Scope().Version() != "1.0" {
			t.Errorf("record %d lost resource schema url or scope version", i)
		}
		all = append(all, spanPlaces(got)...)
	}
	if len(all) != len(refs) {
		t.Fatalf("records hold %d spans, want %d", len(all), len(refs))
	}
	// Trace 1 is spread over two resources and two scopes: one record with
	// both resources, spans in request order.
	t1 := spanPlaces(decodeTraces(t, recs[0].Value))
	want := []string{"svc-0/scope-0/span-0", "svc-0/scope-0/span-6", "svc-0/scope-1/span-2", "svc-1/scope-0/span-4"}
	for i := range want {
		want[i] += "/" + traceID(1).String()
	}
	// Spans of one scope stay together; resources and scopes keep request
	// order.
	if strings.Join(t1, ",") != strings.Join(want, ",") {
		t.Errorf("trace 1 spans:\n got %v\nwant %v", t1, want)
	}
	if len(buf) == 0 {
		t.Error("buffer not used")
	}
}

func TestAppendTracesEmptyTraceID(t *testing.T) {
	td := makeTraces([]spanRef{{0, 0, 0}, {0, 0, 5}, {0, 0, 0}}, 0)
	recs, _, err := newEncoder(t, nil).AppendTraces(nil, nil, td)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("got %d records, want 2", len(recs))
	}
	if recs[0].Key == nil || len(recs[0].Key) != 0 {
		t.Errorf("span without trace id: key %q (nil=%v), want empty non-nil", recs[0].Key, recs[0].Key == nil)
	}
	if n := decodeTraces(t, recs[0].Value).SpanCount(); n != 2 {
		t.Errorf("empty-trace-id record has %d spans, want 2", n)
	}
	if recs[0].Headers != nil {
		t.Errorf("headers %v without SignalHeader", recs[0].Headers)
	}
}

func TestAppendTracesSplitsLargeTrace(t *testing.T) {
	var refs []spanRef
	for i := 0; i < 40; i++ {
		refs = append(refs, spanRef{i % 3, i % 2, 7})
	}
	refs = append(refs, spanRef{0, 0, 8})
	td := makeTraces(refs, 300)
	const limit = 2048
	e := newEncoder(t, func(c *Config) { c.MaxMessageBytes = limit })
	recs, _, err := e.AppendTraces(nil, nil, td)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < 5 {
		t.Fatalf("got %d records, want the trace split into several", len(recs))
	}
	var got []string
	key7 := hex.EncodeToString(func() []byte { x := traceID(7); return x[:] }())
	for i, rec := range recs {
		if len(rec.Value) > limit {
			t.Errorf("record %d is %d bytes, limit %d", i, len(rec.Value), limit)
		}
		if i < len(recs)-1 && string(rec.Key) != key7 {
			t.Errorf("record %d key %s, want %s", i, rec.Key, key7)
		}
		got = append(got, spanPlaces(decodeTraces(t, rec.Value))...)
	}
	want := spanPlaces(regroup(td))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("split lost or reordered spans:\n got %v\nwant %v", got, want)
	}
}

// regroup returns td's spans in the order the encoder emits them: grouped by
// trace in order of first appearance, request order within a trace.
func regroup(td ptrace.Traces) ptrace.Traces {
	out := ptrace.NewTraces()
	var order []pcommon.TraceID
	seen := map[pcommon.TraceID]bool{}
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				if !seen[sp.TraceID()] {
					seen[sp.TraceID()] = true
					order = append(order, sp.TraceID())
				}
			}
		}
	}
	for _, tid := range order {
		for _, rs := range td.ResourceSpans().All() {
			var ors ptrace.ResourceSpans
			for _, ss := range rs.ScopeSpans().All() {
				var oss ptrace.ScopeSpans
				for _, sp := range ss.Spans().All() {
					if sp.TraceID() != tid {
						continue
					}
					if ors == (ptrace.ResourceSpans{}) {
						ors = out.ResourceSpans().AppendEmpty()
						rs.Resource().CopyTo(ors.Resource())
						ors.SetSchemaUrl(rs.SchemaUrl())
					}
					if oss == (ptrace.ScopeSpans{}) {
						oss = ors.ScopeSpans().AppendEmpty()
						ss.Scope().CopyTo(oss.Scope())
					}
					sp.CopyTo(oss.Spans().AppendEmpty())
				}
			}
		}
	}
	return out
}

func TestAppendTracesSpanTooLarge(t *testing.T) {
	td := makeTraces([]spanRef{{0, 0, 1}, {0, 0, 2}}, 5000)
	e := newEncoder(t, func(c *Config) { c.MaxMessageBytes = 4096 })
	prev := []kafkax.Record{{Value: []byte("earlier")}}
	buf := []byte("keep")
	recs, buf2, err := e.AppendTraces(prev, buf, td)
	if !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("err = %v, want ErrMessageTooLarge", err)
	}
	var tle *TooLargeError
	if !errors.As(err, &tle) || tle.Max != 4096 || tle.Size <= 4096 || tle.Signal != Traces {
		t.Errorf("TooLargeError = %+v", tle)
	}
	if len(recs) != 1 || string(buf2) != "keep" {
		t.Errorf("on error dst/buf changed: %d records, buf %q", len(recs), buf2)
	}
}

func TestAppendIsDeterministicAndAppends(t *testing.T) {
	td := makeTraces([]spanRef{{0, 0, 3}, {1, 0, 1}, {0, 1, 3}, {1, 1, 2}}, 10)
	e := newEncoder(t, nil)
	a, bufA, err := e.AppendTraces(nil, nil, td)
	if err != nil {
		t.Fatal(err)
	}
	// A second call appends to the same dst/buf; earlier records stay intact.
	b, bufB, err := e.AppendTraces(a, bufA, td)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 2*len(a) {
		t.Fatalf("got %d records after append, want %d", len(b), 2*len(a))
	}
	for i := range a {
		x, y := b[i], b[len(a)+i]
		if !bytes.Equal(x.Key, y.Key) || !bytes.Equal(x.Value, y.Value) {
			t.Errorf("record %d differs between identical calls", i)
		}
		if cap(x.Value) != len(x.Value) || cap(x.Key) != len(x.Key) {
			t.Errorf("record %d slices are not capacity-limited", i)
		}
	}
	if len(bufB) <= len(bufA) {
		t.Error("second call did not append to buf")
	}
	// A fresh encoder gives the same bytes.
	c, _, err := newEncoder(t, nil).AppendTraces(nil, nil, td)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c {
		if !bytes.Equal(c[i].Value, a[i].Value) {
			t.Errorf("record %d differs between encoders", i)
		}
	}
}

// refHash is an independent, spelled-out version of the Collector's
// MapHash for a flat map of string values.
func refHash(kv ...string) []byte {
	var b []byte
	// keys must be given sorted
	for i := 0; i < len(kv); i += 2 {
		b = append(b, 0xf4)
		b = append(b, kv[i]...)
		b = append(b, 0xf7)
		b = append(b, kv[i+1]...)
	}
	out := binary.LittleEndian.AppendUint64(nil, xxhash.Sum64(b))
	return binary.LittleEndian.AppendUint64(out, xxhash.Sum64(append(b, 0xf3)))
}

func TestResourceHash(t *testing.T) {
	m1 := pcommon.NewMap()
	m1.PutStr("service.name", "vllm")
	m1.PutStr("host.name", "node-3")
	m2 := pcommon.NewMap()
	m2.PutStr("host.name", "node-3")
	m2.PutStr("service.name", "vllm")
	h1 := AppendResourceHash(nil, m1)
	h2 := AppendResourceHash(nil, m2)
	if !bytes.Equal(h1, h2) {
		t.Errorf("hash depends on insertion order: %x vs %x", h1, h2)
	}
	if want := refHash("host.name", "node-3", "service.name", "vllm"); !bytes.Equal(h1, want) {
		t.Errorf("hash %x, want %x (Collector MapHash)", h1, want)
	}
	if got := AppendResourceHash([]byte("p"), pcommon.NewMap()); !bytes.Equal(got, append([]byte("p"), make([]byte, 16)...)) {
		t.Errorf("empty map hash %x, want 16 zero bytes", got)
	}
	// Every value type hashes, nested ones included, and changes the hash.
	m3 := pcommon.NewMap()
	m3.PutInt("i", 3)
	m3.PutDouble("d", 1.5)
	m3.PutBool("b", true)
	m3.PutEmptyBytes("y").FromRaw([]byte{1})
	m3.PutEmptyMap("m").PutStr("k", "v")
	m3.PutEmptySlice("s").AppendEmpty().SetStr("x")
	m3.PutEmpty("e")
	h3 := AppendResourceHash(nil, m3)
	m3.PutInt("i", 4)
	if bytes.Equal(h3, AppendResourceHash(nil, m3)) {
		t.Error("changing an int value did not change the hash")
	}
}

func makeMetrics(nres, nmetrics, pad int) pmetric.Metrics {
	md := pmetric.NewMetrics()
	for r := 0; r < nres; r++ {
		rm := md.ResourceMetrics().AppendEmpty()
		rm.Resource().Attributes().PutStr("service.name", "dcgm")
		rm.Resource().Attributes().PutStr("service.instance.id", fmt.Sprintf("node-%d:9400", r))
		sm := rm.ScopeMetrics().AppendEmpty()
		sm.Scope().SetName("prometheus")
		for i := 0; i < nmetrics; i++ {
			m := sm.Metrics().AppendEmpty()
			m.SetName(fmt.Sprintf("DCGM_FI_DEV_SM_CLOCK_%d", i))
			dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
			dp.SetDoubleValue(1410)
			dp.Attributes().PutStr("UUID", "GPU-0"+strings.Repeat("0", pad))
		}
	}
	return md
}

func TestAppendMetricsOnePerResource(t *testing.T) {
	md := makeMetrics(3, 4, 0)
	md.ResourceMetrics().At(1).ScopeMetrics().AppendEmpty().Scope().SetName("empty") // kept as is
	recs, _, err := newEncoder(t, func(c *Config) { c.SignalHeader = true }).AppendMetrics(nil, nil, md)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("got %d records, want 3", len(recs))
	}
	var u pmetric.ProtoUnmarshaler
	for i, rec := range recs {
		attrs := md.ResourceMetrics().At(i).Resource().Attributes()
		if want := AppendResourceHash(nil, attrs); !bytes.Equal(rec.Key, want) {
			t.Errorf("record %d key %x, want %x", i, rec.Key, want)
		}
		got, err := u.UnmarshalMetrics(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		want := pmetric.NewMetrics()
		md.ResourceMetrics().At(i).CopyTo(want.ResourceMetrics().AppendEmpty())
		var m pmetric.ProtoMarshaler
		gb, _ := m.MarshalMetrics(got)
		wb, _ := m.MarshalMetrics(want)
		if !bytes.Equal(gb, wb) {
			t.Errorf("record %d does not decode to resource %d", i, i)
		}
		if string(rec.Headers[0].Value) != "metrics" {
			t.Errorf("header %q", rec.Headers[0].Value)
		}
	}
}

func TestAppendMetricsSplitsLargeResource(t *testing.T) {
	md := makeMetrics(2, 50, 200)
	const limit = 3000
	recs, _, err := newEncoder(t, func(c *Config) { c.MaxMessageBytes = limit }).AppendMetrics(nil, nil, md)
	if err != nil {
		t.Fatal(err)
	}
	var u pmetric.ProtoUnmarshaler
	points := 0
	keys := map[string]int{}
	for i, rec := range recs {
		if len(rec.Value) > limit {
			t.Errorf("record %d is %d bytes", i, len(rec.Value))
		}
		got, err := u.UnmarshalMetrics(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		points += got.DataPointCount()
		keys[string(rec.Key)]++
	}
	if points != md.DataPointCount() {
		t.Errorf("records hold %d points, want %d", points, md.DataPointCount())
	}
	if len(keys) != 2 || len(recs) < 6 {
		t.Errorf("got %d records over %d keys, want several per resource, 2 keys", len(recs), len(keys))
	}
}

func makeLogs(nres, nrec int) plog.Logs {
	ld := plog.NewLogs()
	for r := 0; r < nres; r++ {
		rl := ld.ResourceLogs().AppendEmpty()
		rl.Resource().Attributes().PutStr("service.name", fmt.Sprintf("svc-%d", r))
		sl := rl.ScopeLogs().AppendEmpty()
		for i := 0; i < nrec; i++ {
			sl.LogRecords().AppendEmpty().Body().SetStr(fmt.Sprintf("log line %d %s", i, strings.Repeat("y", 100)))
		}
	}
	return ld
}

func TestAppendLogs(t *testing.T) {
	ld := makeLogs(3, 5)
	recs, _, err := newEncoder(t, nil).AppendLogs(nil, nil, ld)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Key != nil {
		t.Fatalf("got %d records (key %v), want one unkeyed", len(recs), recs)
	}
	var u plog.ProtoUnmarshaler
	got, err := u.UnmarshalLogs(recs[0].Value)
	if err != nil || got.LogRecordCount() != 15 || got.ResourceLogs().Len() != 3 {
		t.Fatalf("decode: %v, %d records", err, got.LogRecordCount())
	}

	recs, _, err = newEncoder(t, func(c *Config) { c.PartitionLogsByResource = true }).AppendLogs(nil, nil, ld)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("by resource: got %d records, want 3", len(recs))
	}
	for i, rec := range recs {
		if want := AppendResourceHash(nil, ld.ResourceLogs().At(i).Resource().Attributes()); !bytes.Equal(rec.Key, want) {
			t.Errorf("record %d key %x, want %x", i, rec.Key, want)
		}
	}

	// Split when the batch is too big, nothing lost.
	recs, _, err = newEncoder(t, func(c *Config) { c.MaxMessageBytes = 1024 }).AppendLogs(nil, nil, makeLogs(2, 30))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, rec := range recs {
		if len(rec.Value) > 1024 || rec.Key != nil {
			t.Errorf("split record: %d bytes, key %v", len(rec.Value), rec.Key)
		}
		got, err := u.UnmarshalLogs(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		n += got.LogRecordCount()
	}
	if n != 60 || len(recs) < 4 {
		t.Errorf("split logs: %d records in %d messages", n, len(recs))
	}

	// No data, no record.
	recs, _, err = newEncoder(t, nil).AppendLogs(nil, nil, plog.NewLogs())
	if err != nil || len(recs) != 0 {
		t.Errorf("empty logs: %d records, %v", len(recs), err)
	}
}

func TestDeprecatedScopeField(t *testing.T) {
	// A ResourceSpans that carries its scopes only in the pre-1.0 field 1000
	// (instrumentation_library_spans), as old SDKs send it.
	td := makeTraces([]spanRef{{0, 0, 1}, {0, 0, 2}}, 0)
	var m ptrace.ProtoMarshaler
	canon, _ := m.MarshalTraces(td)
	rsBytes, _ := protowire.ConsumeBytes(canon[1:])
	var rs []byte
	for pos := 0; pos < len(rsBytes); {
		num, typ, n := protowire.ConsumeTag(rsBytes[pos:])
		l := protowire.ConsumeFieldValue(num, typ, rsBytes[pos+n:])
		if num == 2 {
			v, _ := protowire.ConsumeBytes(rsBytes[pos+n:])
			rs = protowire.AppendTag(rs, 1000, protowire.BytesType)
			rs = protowire.AppendBytes(rs, v)
		} else {
			rs = append(rs, rsBytes[pos:pos+n+l]...)
		}
		pos += n + l
	}
	req := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), rs)
	er := ptraceotlp.NewExportRequest()
	if err := er.UnmarshalProto(req); err != nil || er.Traces().SpanCount() != 2 {
		t.Fatalf("pdata reads the legacy field: %v, %d spans", err, er.Traces().SpanCount())
	}
	recs, _, err := newEncoder(t, nil).appendTracesProto(nil, nil, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("got %d records, want 2", len(recs))
	}
	for _, rec := range recs {
		if decodeTraces(t, rec.Value).SpanCount() != 1 {
			t.Error("legacy scope spans lost")
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if DefaultConfig().MaxMessageBytes != 1_000_000 {
		t.Error("default max message bytes is not the Collector's 1,000,000")
	}
	if _, err := NewEncoder(Config{MaxMessageBytes: 10}); err == nil {
		t.Error("tiny MaxMessageBytes accepted")
	}
}
