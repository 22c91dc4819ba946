package normalize

import (
	"unsafe"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// Span records are read from their wire form where they can be, as metric
// records are (metricswire.go): pdata's unmarshal of every span record was
// the largest part of the span path's CPU and garbage (profile of
// BenchmarkEndToEnd: 18% of the enricher, and most of what its collector
// scanned), and the normalizer reads a part of each span.
//
// The wire path reads the fields of spans.go straight into a traceData and
// declines (ok false) anything outside the shape it knows: an unknown or
// deprecated field, a wrong wire type, a singular field given twice, a
// trace or span id of another length than pdata takes, an attribute value
// that is not a string, bool, int or double (arrays, maps and bytes: GenAI
// finish reasons as string[] go through pdata), resource entity
// references, or any wire error. A declined payload goes through pdata
// (DecodeTraces, then Traces), which decides whether it is malformed, so
// the fast path never accepts what pdata would refuse, and whatever it
// accepts normalizes exactly as Traces does: the same normalizer runs on
// both (TestTracesProtoMatchesPdata, FuzzTracesProto).
//
// A record's strings (names, attribute keys and values) are substrings of
// one copy of its payload: the Batch holds that copy alive while any of its
// strings is, no longer than the join holds the record's requests.

// TracesDecoder normalizes span records, reusing its scratch space from
// one record to the next. The zero value is ready; it is not safe for
// concurrent use.
type TracesDecoder struct {
	wt wireTraces
	n  traceNormalizer
}

// Record normalizes one Kafka record value holding an
// ExportTraceServiceRequest: from the wire when the payload has the shape
// TracesProto takes, else through pdata (DecodeTraces, Traces). Errors are
// DecodeTraces's. The Batch does not alias b or d.
func (d *TracesDecoder) Record(b []byte, enc Encoding) (Batch, error) {
	if enc == "" || enc == EncodingProto {
		if td, ok := d.wt.decode(b); ok {
			return d.n.normalize(td), nil
		}
	}
	td, err := DecodeTraces(b, enc)
	if err != nil {
		return Batch{}, err
	}
	return Traces(td), nil
}

// TracesProto normalizes an otlp_proto ExportTraceServiceRequest as
// Traces(DecodeTraces(b, EncodingProto)) would, straight from the wire, or
// reports ok false when b holds anything outside the shape it takes (see
// above): then the caller must use pdata. The Batch does not alias b.
func TracesProto(b []byte) (Batch, bool) {
	var d TracesDecoder
	td, ok := d.wt.decode(b)
	if !ok {
		return Batch{}, false
	}
	return d.n.normalize(td), true
}

// wireTraces is the fast path's state: the traceData it fills and the
// arrays its spans' attributes, events and links are cut from.
type wireTraces struct {
	d        traceData
	attrs    []attr
	events   []event
	links    []link
	scopes   [][]byte // of one ResourceSpans
	spanBufs [][]byte // of one ScopeSpans
}

// str is v, a part of the payload's copy, as a string sharing its bytes.
// The copy is never written, so the string is immutable as Go requires.
func str(v []byte) string {
	if len(v) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(v), len(v))
}

func (wt *wireTraces) decode(b []byte) (*traceData, bool) {
	wt.d.resources, wt.d.scopes, wt.d.spans = wt.d.resources[:0], wt.d.scopes[:0], wt.d.spans[:0]
	wt.attrs, wt.events, wt.links = wt.attrs[:0], wt.events[:0], wt.links[:0]
	var bs []byte
	if len(b) > 0 {
		s := string(b) // the one copy: every string of the Batch is a part of it
		bs = unsafe.Slice(unsafe.StringData(s), len(s))
	}
	w := wireMsg{b: bs}
	for w.more() {
		num, wt8, ok := w.tag()
		if !ok || num != 1 || wt8 != wtLen {
			return nil, false
		}
		rs, ok := w.bytes()
		if !ok || !wt.resourceSpans(rs) {
			return nil, false
		}
	}
	return &wt.d, true
}

// resourceSpans reads a ResourceSpans: resource 1, scope_spans 2,
// schema_url 3.
func (wt *wireTraces) resourceSpans(b []byte) bool {
	resource, scopes, ok := container(b, wt.scopes[:0])
	wt.scopes = scopes
	if !ok {
		return false
	}
	res, ok := wt.resource(resource)
	if !ok {
		return false
	}
	wt.d.resources = append(wt.d.resources, res)
	for _, ss := range wt.scopes {
		if !wt.scopeSpans(ss, len(wt.d.resources)-1) {
			return false
		}
	}
	return true
}

// resource reads a Resource: attributes 1, dropped_attributes_count 2
// (entity_refs 3 is declined).
func (wt *wireTraces) resource(b []byte) (attrs, bool) {
	lo := len(wt.attrs)
	var haveDropped bool
	w := wireMsg{b: b}
	for w.more() {
		num, t, ok := w.tag()
		if !ok {
			return nil, false
		}
		switch {
		case num == 1 && t == wtLen:
			if !wt.attr(&w) {
				return nil, false
			}
		case num == 2 && t == wtVarint && !haveDropped:
			if _, ok := w.varint(); !ok {
				return nil, false
			}
			haveDropped = true
		default:
			return nil, false
		}
	}
	return wt.cut(lo), true
}

// cut is the attributes appended since lo.
func (wt *wireTraces) cut(lo int) attrs {
	if len(wt.attrs) == lo {
		return nil
	}
	return wt.attrs[lo:len(wt.attrs):len(wt.attrs)]
}

// attr reads the KeyValue at w's position (a length-delimited field) into
// wt.attrs.
func (wt *wireTraces) attr(w *wireMsg) bool {
	v, ok := w.bytes()
	if !ok {
		return false
	}
	a, ok := readAttr(v)
	if !ok {
		return false
	}
	wt.attrs = append(wt.attrs, a)
	return true
}

// skipAttr checks the KeyValue at w's position, which normalization does
// not read (scope, event and link attributes).
func skipAttr(w *wireMsg) bool {
	v, ok := w.bytes()
	if !ok {
		return false
	}
	_, ok = readAttr(v)
	return ok
}

// readAttr reads a KeyValue (key 1, value 2) whose value is a scalar or
// empty.
func readAttr(b []byte) (attr, bool) {
	var a attr
	var haveKey, haveValue bool
	w := wireMsg{b: b}
	for w.more() {
		num, t, ok := w.tag()
		if !ok || t != wtLen {
			return a, false
		}
		v, ok := w.bytes()
		if !ok {
			return a, false
		}
		switch {
		case num == 1 && !haveKey:
			a.key, haveKey = str(v), true
		case num == 2 && !haveValue:
			if a.val, ok = anyValue(v); !ok {
				return a, false
			}
			haveValue = true
		default:
			return a, false
		}
	}
	return a, true
}

// anyValue reads an AnyValue holding at most one of string_value 1,
// bool_value 2, int_value 3, double_value 4 (none: the empty value).
func anyValue(b []byte) (value, bool) {
	w := wireMsg{b: b}
	if !w.more() {
		return value{}, true
	}
	num, t, ok := w.tag()
	if !ok {
		return value{}, false
	}
	var v value
	switch {
	case num == 1 && t == wtLen:
		s, ok := w.bytes()
		if !ok {
			return value{}, false
		}
		v = value{typ: pcommon.ValueTypeStr, str: str(s)}
	case num == 2 && t == wtVarint:
		n, ok := w.varint()
		if !ok {
			return value{}, false
		}
		v = value{typ: pcommon.ValueTypeBool}
		if n != 0 {
			v.n = 1
		}
	case num == 3 && t == wtVarint:
		n, ok := w.varint()
		if !ok {
			return value{}, false
		}
		v = value{typ: pcommon.ValueTypeInt, n: n}
	case num == 4 && t == wtI64:
		n, ok := w.fixed64()
		if !ok {
			return value{}, false
		}
		v = value{typ: pcommon.ValueTypeDouble, n: n}
	default:
		return value{}, false
	}
	return v, !w.more()
}

// scopeSpans reads a ScopeSpans (scope 1, spans 2, schema_url 3) of
// resource res.
func (wt *wireTraces) scopeSpans(b []byte, res int) bool {
	scope, spans, ok := container(b, wt.spanBufs[:0])
	wt.spanBufs = spans
	if !ok {
		return false
	}
	name, ok := scopeName(scope)
	if !ok {
		return false
	}
	wt.d.scopes = append(wt.d.scopes, scopeData{res: res, name: name})
	for _, sp := range wt.spanBufs {
		if !wt.span(sp, len(wt.d.scopes)-1) {
			return false
		}
	}
	return true
}

// scopeName reads an InstrumentationScope (name 1, version 2, attributes
// 3, dropped_attributes_count 4) for its name.
func scopeName(b []byte) (string, bool) {
	var name string
	var seen uint8
	w := wireMsg{b: b}
	for w.more() {
		num, t, ok := w.tag()
		if !ok || num > 4 || num != 3 && seen&(1<<num) != 0 {
			return "", false
		}
		seen |= 1 << num
		switch {
		case num == 1 && t == wtLen:
			v, ok := w.bytes()
			if !ok {
				return "", false
			}
			name = str(v)
		case num == 2 && t == wtLen:
			if _, ok := w.bytes(); !ok {
				return "", false
			}
		case num == 3 && t == wtLen:
			if !skipAttr(&w) {
				return "", false
			}
		case num == 4 && t == wtVarint:
			if _, ok := w.varint(); !ok {
				return "", false
			}
		default:
			return "", false
		}
	}
	return name, true
}

// Wire type of fixed32 fields (flags).
const wtI32 = 5

func (w *wireMsg) fixed32() bool {
	if len(w.b)-w.pos < 4 {
		return false
	}
	w.pos += 4
	return true
}

// readID reads a trace or span id: empty (all zero) or exactly len(dst)
// bytes, as pdata takes them.
func readID(w *wireMsg, dst []byte) bool {
	v, ok := w.bytes()
	if !ok || len(v) != 0 && len(v) != len(dst) {
		return false
	}
	copy(dst, v)
	return true
}

// span reads a Span of scope sc: trace_id 1, span_id 2, trace_state 3,
// parent_span_id 4, name 5, kind 6, start 7, end 8, attributes 9,
// dropped_attributes_count 10, events 11, dropped_events_count 12, links
// 13, dropped_links_count 14, status 15, flags 16.
func (wt *wireTraces) span(b []byte, sc int) bool {
	sp := span{scope: sc}
	attrLo, evLo, lkLo := len(wt.attrs), len(wt.events), len(wt.links)
	var seen uint32
	w := wireMsg{b: b}
	for w.more() {
		num, t, ok := w.tag()
		if !ok || num > 16 {
			return false
		}
		if num != 9 && num != 11 && num != 13 {
			if seen&(1<<num) != 0 {
				return false
			}
			seen |= 1 << num
		}
		switch {
		case t == wtLen && num == 1:
			ok = readID(&w, sp.traceID[:])
		case t == wtLen && num == 2:
			ok = readID(&w, sp.spanID[:])
		case t == wtLen && num == 3:
			_, ok = w.bytes()
		case t == wtLen && num == 4:
			ok = readID(&w, sp.parentID[:])
		case t == wtLen && num == 5:
			var v []byte
			v, ok = w.bytes()
			sp.name = str(v)
		case t == wtVarint && (num == 6 || num == 10 || num == 12 || num == 14):
			_, ok = w.varint()
		case t == wtI64 && num == 7:
			sp.start, ok = w.fixed64()
		case t == wtI64 && num == 8:
			sp.end, ok = w.fixed64()
		case t == wtLen && num == 9:
			ok = wt.attr(&w)
		case t == wtLen && num == 11:
			ok = wt.event(&w)
		case t == wtLen && num == 13:
			ok = wt.link(&w)
		case t == wtLen && num == 15:
			var v []byte
			if v, ok = w.bytes(); ok {
				sp.statusError, ok = statusError(v)
			}
		case t == wtI32 && num == 16:
			ok = w.fixed32()
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
	sp.attrs = wt.cut(attrLo)
	if n := len(wt.events); n > evLo {
		sp.events = wt.events[evLo:n:n]
	}
	if n := len(wt.links); n > lkLo {
		sp.links = wt.links[lkLo:n:n]
	}
	wt.d.spans = append(wt.d.spans, sp)
	return true
}

// statusError reads a Status (message 2, code 3) and reports whether its
// code is ERROR (2; the enum is an int32, as pdata reads it).
func statusError(b []byte) (isErr, ok bool) {
	var code int32
	var seen uint8
	w := wireMsg{b: b}
	for w.more() {
		num, t, ok := w.tag()
		if !ok || num < 2 || num > 3 || seen&(1<<num) != 0 {
			return false, false
		}
		seen |= 1 << num
		switch {
		case num == 2 && t == wtLen:
			if _, ok := w.bytes(); !ok {
				return false, false
			}
		case num == 3 && t == wtVarint:
			n, ok := w.varint()
			if !ok {
				return false, false
			}
			code = int32(n)
		default:
			return false, false
		}
	}
	return code == 2, true
}

// event reads the Span.Event at w's position (time_unix_nano 1, name 2,
// attributes 3, dropped_attributes_count 4) into wt.events.
func (wt *wireTraces) event(w *wireMsg) bool {
	b, ok := w.bytes()
	if !ok {
		return false
	}
	var ev event
	var seen uint8
	e := wireMsg{b: b}
	for e.more() {
		num, t, ok := e.tag()
		if !ok || num > 4 || num != 3 && seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		switch {
		case num == 1 && t == wtI64:
			ev.ts, ok = e.fixed64()
		case num == 2 && t == wtLen:
			var v []byte
			v, ok = e.bytes()
			ev.name = str(v)
		case num == 3 && t == wtLen:
			ok = skipAttr(&e)
		case num == 4 && t == wtVarint:
			_, ok = e.varint()
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
	wt.events = append(wt.events, ev)
	return true
}

// link reads the Span.Link at w's position (trace_id 1, span_id 2,
// trace_state 3, attributes 4, dropped_attributes_count 5, flags 6) into
// wt.links.
func (wt *wireTraces) link(w *wireMsg) bool {
	b, ok := w.bytes()
	if !ok {
		return false
	}
	var lk link
	var seen uint8
	l := wireMsg{b: b}
	for l.more() {
		num, t, ok := l.tag()
		if !ok || num > 6 || num != 4 && seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		switch {
		case num == 1 && t == wtLen:
			ok = readID(&l, lk.traceID[:])
		case num == 2 && t == wtLen:
			ok = readID(&l, lk.spanID[:])
		case num == 3 && t == wtLen:
			_, ok = l.bytes()
		case num == 4 && t == wtLen:
			ok = skipAttr(&l)
		case num == 5 && t == wtVarint:
			_, ok = l.varint()
		case num == 6 && t == wtI32:
			ok = l.fixed32()
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
	wt.links = append(wt.links, lk)
	return true
}
