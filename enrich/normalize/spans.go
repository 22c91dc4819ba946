package normalize

import (
	"math"
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// The trace normalizer reads spans in this form, not pdata's: the fields it
// reads, flat, so that a payload can be read into it straight from the wire
// (traceswire.go) as well as from a pdata tree (fromPdata).

// traceData is one traces message: its resources, scopes and spans in
// message order; a scope names its resource and a span its scope by index.
type traceData struct {
	resources [][]attr // each resource's attributes
	scopes    []scopeData
	spans     []span
}

type scopeData struct {
	res  int
	name string
}

// span is the part of a span the normalizer reads.
type span struct {
	scope       int
	traceID     pcommon.TraceID
	spanID      pcommon.SpanID
	parentID    pcommon.SpanID
	name        string
	start, end  uint64
	statusError bool // status code ERROR
	attrs       attrs
	events      []event
	links       []link
}

type event struct {
	name string
	ts   uint64
}

type link struct {
	traceID pcommon.TraceID
	spanID  pcommon.SpanID
}

type attr struct {
	key string
	val value
}

// attrs is an attribute list in message order, duplicate keys included,
// as pdata keeps it.
type attrs []attr

// Get returns the first value of key k, as pcommon.Map.Get does.
func (as attrs) Get(k string) (value, bool) {
	for i := range as {
		if as[i].key == k {
			return as[i].val, true
		}
	}
	return value{}, false
}

// value is an attribute value with pcommon.Value's accessors. Scalars are
// held here; maps, slices and bytes (from pdata only: the wire path
// declines them) keep their pdata value.
type value struct {
	typ pcommon.ValueType
	str string
	n   uint64 // Int as int64, Double as its bits, Bool as 0 or 1
	pv  pcommon.Value
}

func (v value) Type() pcommon.ValueType { return v.typ }
func (v value) Str() string             { return v.str }
func (v value) Int() int64              { return int64(v.n) }
func (v value) Double() float64         { return math.Float64frombits(v.n) }
func (v value) Bool() bool              { return v.n != 0 }
func (v value) Slice() pcommon.Slice    { return v.pv.Slice() }

// AsString renders v as pcommon.Value.AsString does.
func (v value) AsString() string {
	switch v.typ {
	case pcommon.ValueTypeEmpty:
		return ""
	case pcommon.ValueTypeStr:
		return v.str
	case pcommon.ValueTypeBool:
		return strconv.FormatBool(v.Bool())
	case pcommon.ValueTypeInt:
		return strconv.FormatInt(v.Int(), 10)
	case pcommon.ValueTypeDouble:
		return doubleString(v.Double())
	}
	return v.pv.AsString()
}

// doubleString renders f as pcommon.Value.AsString does (as ES6 converts
// a number to a string), without building a pdata value for it
// (TestDoubleString holds the two together).
func doubleString(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	var scratch [32]byte
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b := strconv.AppendFloat(scratch[:0], f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1] // e-09 → e-9
		b = b[:n-1]
	}
	return string(b)
}

// pdataValue is v as a value.
func pdataValue(v pcommon.Value) value {
	switch t := v.Type(); t {
	case pcommon.ValueTypeEmpty:
		return value{}
	case pcommon.ValueTypeStr:
		return value{typ: t, str: v.Str()}
	case pcommon.ValueTypeBool:
		if v.Bool() {
			return value{typ: t, n: 1}
		}
		return value{typ: t}
	case pcommon.ValueTypeInt:
		return value{typ: t, n: uint64(v.Int())}
	case pcommon.ValueTypeDouble:
		return value{typ: t, n: math.Float64bits(v.Double())}
	default:
		return value{typ: t, pv: v}
	}
}

func pdataAttrs(m pcommon.Map) attrs {
	if m.Len() == 0 {
		return nil
	}
	out := make(attrs, 0, m.Len())
	for k, v := range m.All() {
		out = append(out, attr{key: k, val: pdataValue(v)})
	}
	return out
}

// fromPdata is td in the normalizer's form.
func fromPdata(td ptrace.Traces) traceData {
	d := traceData{spans: make([]span, 0, td.SpanCount())}
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		d.resources = append(d.resources, pdataAttrs(rs.Resource().Attributes()))
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			ss := sss.At(j)
			d.scopes = append(d.scopes, scopeData{res: i, name: ss.Scope().Name()})
			spans := ss.Spans()
			for k := 0; k < spans.Len(); k++ {
				d.spans = append(d.spans, pdataSpan(spans.At(k), len(d.scopes)-1))
			}
		}
	}
	return d
}

func pdataSpan(sp ptrace.Span, scope int) span {
	s := span{
		scope:       scope,
		traceID:     sp.TraceID(),
		spanID:      sp.SpanID(),
		parentID:    sp.ParentSpanID(),
		name:        sp.Name(),
		start:       uint64(sp.StartTimestamp()),
		end:         uint64(sp.EndTimestamp()),
		statusError: sp.Status().Code() == ptrace.StatusCodeError,
		attrs:       pdataAttrs(sp.Attributes()),
	}
	if evs := sp.Events(); evs.Len() > 0 {
		s.events = make([]event, evs.Len())
		for e := range s.events {
			s.events[e] = event{name: evs.At(e).Name(), ts: uint64(evs.At(e).Timestamp())}
		}
	}
	if lks := sp.Links(); lks.Len() > 0 {
		s.links = make([]link, lks.Len())
		for l := range s.links {
			s.links[l] = link{traceID: lks.At(l).TraceID(), spanID: lks.At(l).SpanID()}
		}
	}
	return s
}
