package normalize

import (
	"encoding/binary"
	"math"
	"slices"

	"go.opentelemetry.io/collector/pdata/pmetric"
)

// Metric records are normalized from their wire form where they can be:
// building the pdata tree of every record was most of the metric path's
// CPU and garbage (profile of BenchmarkEndToEndMetrics: the pdata unmarshal
// ~30% of the enricher, done by both metric consumers), and normalization
// reads a few fields of it.
//
// MetricsProto takes the shape the scrapers send — gauges and sums of
// number points, string attributes — and declines (ok false) anything else:
// an unknown or deprecated field, a repeated singular field, a histogram,
// a summary, exemplars, metadata, entity references, a non-string attribute
// value, or any wire error. A declined payload goes through pdata
// (DecodeMetrics, then Metrics), which decides whether it is malformed, so
// the fast path never accepts what pdata would refuse, and whatever it
// accepts normalizes exactly as Metrics does (FuzzMetricsProto holds it to
// both).

// Protobuf wire types.
const (
	wtVarint = 0
	wtI64    = 1
	wtLen    = 2
)

// wireMsg reads one message's fields. Any error ends the fast path, so it
// only says whether reading worked.
type wireMsg struct {
	b   []byte
	pos int
}

func (w *wireMsg) more() bool { return w.pos < len(w.b) }

func (w *wireMsg) varint() (uint64, bool) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if w.pos >= len(w.b) {
			return 0, false
		}
		c := w.b[w.pos]
		w.pos++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, true
		}
	}
	return 0, false
}

// tag reads a field's number and wire type (pdata's rule: the number is
// the tag's upper bits as an int32, and must be positive).
func (w *wireMsg) tag() (int32, uint8, bool) {
	t, ok := w.varint()
	if !ok {
		return 0, 0, false
	}
	num := int32(t >> 3)
	return num, uint8(t & 7), num > 0
}

func (w *wireMsg) bytes() ([]byte, bool) {
	n, ok := w.varint()
	if !ok || n > uint64(len(w.b)-w.pos) {
		return nil, false
	}
	v := w.b[w.pos : w.pos+int(n)]
	w.pos += int(n)
	return v, true
}

func (w *wireMsg) fixed64() (uint64, bool) {
	if len(w.b)-w.pos < 8 {
		return 0, false
	}
	v := binary.LittleEndian.Uint64(w.b[w.pos:])
	w.pos += 8
	return v, true
}

// interner turns the names and label values of one payload into strings,
// one copy per distinct value: a scrape repeats its few hosts, pods, models
// and metric names on every point. It is cleared for each payload, so
// that it holds no more than one payload's strings.
type interner struct {
	m map[string]string
}

const maxInterned = 1024

func (in *interner) str(b []byte) string {
	if s, ok := in.m[string(b)]; ok {
		return s
	}
	s := string(b)
	if in.m == nil {
		in.m = make(map[string]string, 64)
	}
	if len(in.m) < maxInterned {
		in.m[s] = s
	}
	return s
}

// wireKV is one string-valued attribute, as bytes of the payload.
type wireKV struct {
	key, value []byte
}

// readKV reads a KeyValue whose value is a string (ok false otherwise).
func readKV(b []byte) (wireKV, bool) {
	var kv wireKV
	var haveKey, haveValue bool
	w := wireMsg{b: b}
	for w.more() {
		num, wt, ok := w.tag()
		if !ok || wt != wtLen {
			return kv, false
		}
		v, ok := w.bytes()
		if !ok {
			return kv, false
		}
		switch {
		case num == 1 && !haveKey:
			kv.key, haveKey = v, true
		case num == 2 && !haveValue:
			// AnyValue: exactly one string_value.
			a := wireMsg{b: v}
			n, t, ok := a.tag()
			if !ok || n != 1 || t != wtLen {
				return kv, false
			}
			if kv.value, ok = a.bytes(); !ok || a.more() {
				return kv, false
			}
			haveValue = true
		default:
			return kv, false
		}
	}
	return kv, haveValue
}

// checkScope checks an InstrumentationScope (name 1, version 2, attributes
// 3, dropped_attributes_count 4), which normalization does not read.
func checkScope(b []byte) bool {
	w := wireMsg{b: b}
	var seen uint8
	for w.more() {
		num, wt, ok := w.tag()
		if !ok || num > 4 || seen&(1<<num) != 0 && num != 3 {
			return false
		}
		seen |= 1 << num
		switch {
		case num == 4 && wt == wtVarint:
			if _, ok := w.varint(); !ok {
				return false
			}
		case num <= 3 && wt == wtLen:
			v, ok := w.bytes()
			if !ok {
				return false
			}
			if num == 3 {
				if _, ok := readKV(v); !ok {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}

// MetricsDecoder normalizes metric records, reusing its scratch space
// from one record to the next. The zero value is ready; it is not safe for
// concurrent use.
type MetricsDecoder struct {
	// ReuseSamples: the Samples of a Batch from the wire path reuse one
	// array, valid until the next Record (for a caller done with them by
	// then).
	ReuseSamples bool
	wm           wireMetrics
}

// maxPresized bounds the capacity a new Samples array starts with (~700
// kB of samples; see wireMetrics.presize).
const maxPresized = 4096

// wireMetrics is the fast path's state.
type wireMetrics struct {
	n      metricNormalizer
	in     interner
	scopes [][]byte // per resource
	attrs  []wireKV // per point, on a labels miss
	// A point's attributes: each one's KeyValue bytes, and the run of the
	// point's bytes they fill when they are consecutive (split: they are
	// not). point leaves them here for labels.
	attrVals [][]byte
	attrRun  []byte
	split    bool
	// Where the attributes read so far lie in the point's bytes (addAttr).
	attrFrom, attrTo int
	// labels' results for the current resource, by the bytes of a
	// point's attributes: a scrape repeats each GPU's (or engine's) label
	// set on every metric, byte for byte (dcgm-exporter: ~10 labels a
	// point, reading them was ~40% of a DCGM payload's decode).
	memo map[string]pointLabels
	// samples, when not nil, is the array to decode into.
	samples []Sample
	// presize is the previous record's sample count: a new Samples array
	// starts at that capacity (the records of one fleet are alike) rather
	// than growing metric by metric.
	presize int
	// A histogram point's bounds and bucket counts (histPoint), reused.
	hist histPoint
}

// Record normalizes one Kafka record value holding an
// ExportMetricsServiceRequest: from the wire when the payload has the
// shape MetricsProto takes, else through pdata (DecodeMetrics, Metrics).
// Errors are DecodeMetrics's. The Batch does not alias b, nor d unless
// ReuseSamples is set.
func (d *MetricsDecoder) Record(b []byte, enc Encoding) (Batch, error) {
	if enc == "" || enc == EncodingProto {
		if d.ReuseSamples {
			d.wm.samples = d.wm.samples[:0]
		} else {
			d.wm.samples = nil
		}
		out, ok := d.wm.decode(b)
		if d.ReuseSamples {
			d.wm.samples = out.Samples
		}
		if ok {
			d.wm.presize = min(len(out.Samples), maxPresized)
			return out, nil
		}
	}
	md, err := DecodeMetrics(b, enc)
	if err != nil {
		return Batch{}, err
	}
	return Metrics(md), nil
}

// MetricsProto normalizes an otlp_proto ExportMetricsServiceRequest as
// Metrics(DecodeMetrics(b, EncodingProto)) would, straight from the wire,
// or reports ok false when b holds anything outside the shape it takes
// (see above): then the caller must use pdata. The Batch does not alias b.
func MetricsProto(b []byte) (out Batch, ok bool) {
	var wm wireMetrics
	return wm.decode(b)
}

func (wm *wireMetrics) decode(b []byte) (Batch, bool) {
	wm.n = metricNormalizer{}
	clear(wm.in.m)
	// Grown by each metric's point count (metric), not guessed from the
	// payload's size: a DCGM point with its labels takes 60 to 400 bytes.
	if wm.samples != nil {
		wm.n.out.Samples = wm.samples[:0]
	} else {
		wm.n.out.Samples = make([]Sample, 0)
	}
	w := wireMsg{b: b}
	for w.more() {
		num, wt, ok := w.tag()
		if !ok || num != 1 || wt != wtLen {
			return Batch{}, false
		}
		rm, ok := w.bytes()
		if !ok || !wm.resourceMetrics(rm) {
			return Batch{}, false
		}
	}
	return wm.n.out, true
}

// resourceMetrics reads a ResourceMetrics: resource 1, scope_metrics 2,
// schema_url 3.
func (wm *wireMetrics) resourceMetrics(b []byte) bool {
	resource, scopes, ok := container(b, wm.scopes[:0])
	wm.scopes = scopes
	if !ok {
		return false
	}
	res, ok := wm.resource(resource)
	if !ok {
		return false
	}
	clear(wm.memo) // its placements fall back to this resource's
	for _, sm := range wm.scopes {
		if !wm.scopeMetrics(sm, &res) {
			return false
		}
	}
	return true
}

// container reads a message of the shape ResourceMetrics, ResourceSpans
// and ScopeSpans share: a singular message field 1 (the resource or
// scope), a repeated field 2 (what it holds) and schema_url 3. It returns
// field 1 and items with field 2's values appended.
func container(b []byte, items [][]byte) (first []byte, _ [][]byte, ok bool) {
	var haveFirst, haveSchema bool
	w := wireMsg{b: b}
	for w.more() {
		num, wt, ok := w.tag()
		if !ok || wt != wtLen {
			return nil, items, false
		}
		v, ok := w.bytes()
		if !ok {
			return nil, items, false
		}
		switch {
		case num == 1 && !haveFirst:
			first, haveFirst = v, true
		case num == 2:
			items = append(items, v)
		case num == 3 && !haveSchema:
			haveSchema = true
		default:
			return nil, items, false
		}
	}
	return first, items, true
}

// resource reads a Resource (attributes 1, dropped_attributes_count 2) as
// newMetricRes does.
func (wm *wireMetrics) resource(b []byte) (metricRes, bool) {
	var pb placementBuilder
	var addr string
	var haveDropped bool
	w := wireMsg{b: b}
	for w.more() {
		num, wt, ok := w.tag()
		if !ok {
			return metricRes{}, false
		}
		switch {
		case num == 1 && wt == wtLen:
			v, ok := w.bytes()
			if !ok {
				return metricRes{}, false
			}
			kv, ok := readKV(v)
			if !ok {
				return metricRes{}, false
			}
			if dst := pb.field(string(kv.key)); dst != nil {
				if *dst == "" {
					*dst = wm.in.str(kv.value)
				}
			} else if string(kv.key) == attrServerAddress {
				addr = wm.in.str(kv.value)
			}
		case num == 2 && wt == wtVarint && !haveDropped:
			if _, ok := w.varint(); !ok {
				return metricRes{}, false
			}
			haveDropped = true
		default:
			return metricRes{}, false
		}
	}
	return pb.metricRes(addr), true
}

// scopeMetrics reads a ScopeMetrics: scope 1, metrics 2, schema_url 3.
func (wm *wireMetrics) scopeMetrics(b []byte, res *metricRes) bool {
	var haveScope, haveSchema bool
	w := wireMsg{b: b}
	// The scope may follow the metrics: check the whole message first.
	for w.more() {
		num, wt, ok := w.tag()
		if !ok || wt != wtLen {
			return false
		}
		v, ok := w.bytes()
		if !ok {
			return false
		}
		switch {
		case num == 1 && !haveScope:
			if !checkScope(v) {
				return false
			}
			haveScope = true
		case num == 2:
		case num == 3 && !haveSchema:
			haveSchema = true
		default:
			return false
		}
	}
	w.pos = 0
	for w.more() {
		num, _, _ := w.tag()
		v, _ := w.bytes()
		if num == 2 && !wm.metric(v, res) {
			return false
		}
	}
	return true
}

// metric reads a Metric (name 1, description 2, unit 3, gauge 5, sum 7)
// and normalizes it as metricNormalizer.metric does.
func (wm *wireMetrics) metric(b []byte, res *metricRes) bool {
	var name, data []byte
	var seen uint16
	shape := metricShape{typ: pmetric.MetricTypeEmpty}
	w := wireMsg{b: b}
	for w.more() {
		num, wt, ok := w.tag()
		if !ok || wt != wtLen {
			return false
		}
		v, ok := w.bytes()
		if !ok {
			return false
		}
		switch num {
		case 1, 2, 3, 5, 7, 9:
		default:
			return false
		}
		if seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		switch num {
		case 1:
			name = v
		case 5:
			data, shape.typ = v, pmetric.MetricTypeGauge
		case 7:
			data, shape.typ = v, pmetric.MetricTypeSum
		case 9:
			data, shape.typ = v, pmetric.MetricTypeHistogram
		}
	}
	if n := seen & (1<<5 | 1<<7 | 1<<9); n&(n-1) != 0 {
		return false // two data fields (pdata keeps the last): not a scraper's shape
	}
	// Gauge: data_points 1. Sum: data_points 1, aggregation_temporality 2,
	// is_monotonic 3. Histogram: data_points 1, aggregation_temporality 2.
	// pdata keeps the last of each scalar.
	w = wireMsg{b: data}
	for w.more() {
		num, wt, ok := w.tag()
		if !ok {
			return false
		}
		switch {
		case num == 1 && wt == wtLen:
			if _, ok := w.bytes(); !ok {
				return false
			}
			shape.points++
		case (shape.typ == pmetric.MetricTypeSum && (num == 2 || num == 3) || shape.typ == pmetric.MetricTypeHistogram && num == 2) && wt == wtVarint:
			v, ok := w.varint()
			if !ok {
				return false
			}
			if num == 2 {
				shape.deltaSum = pmetric.AggregationTemporality(int32(v)) == pmetric.AggregationTemporalityDelta
			}
		default:
			return false
		}
	}
	// Every point is read, whatever the metric, so that a malformed one
	// sends the payload to pdata even when normalization would skip it.
	shape.name = wm.in.str(name)
	spec, useStart, use := wm.n.start(shape)
	if use {
		if cap(wm.n.out.Samples) == 0 && shape.points > 0 && wm.presize > shape.points {
			wm.n.out.Samples = make([]Sample, 0, wm.presize)
		} else {
			wm.n.out.Samples = slices.Grow(wm.n.out.Samples, shape.points)
		}
	}
	firstSample := len(wm.n.out.Samples)
	p := 0
	w.pos = 0
	for w.more() {
		num, _, _ := w.tag()
		if num != 1 {
			w.varint()
			continue
		}
		v, _ := w.bytes()
		if shape.typ == pmetric.MetricTypeHistogram {
			if !wm.histPoint(v) {
				return false
			}
			if !use {
				// Ignored, counted by start; its attributes must still
				// be what pdata reads alike.
				for _, a := range wm.attrVals {
					if _, ok := readKV(a); !ok {
						return false
					}
				}
				continue
			}
			l, ok := wm.labels(res)
			if !ok {
				return false
			}
			if sum, sq, ok := wm.n.histSamples(shape.name, p, &wm.hist); ok {
				sum.Model, sum.Placement = l.model, l.eng
				sq.Model, sq.Placement = l.model, l.eng
				wm.n.out.Samples = append(wm.n.out.Samples, sum, sq)
			}
			p++
			continue
		}
		dp, ok := wm.point(v)
		if !ok {
			return false
		}
		l, ok := wm.labels(res)
		if !ok {
			return false
		}
		if use {
			wm.addSample(spec, useStart, shape.name, p, dp, &l)
		}
		p++
	}
	if use {
		wm.n.finish(spec, firstSample)
	}
	return true
}

// point reads a NumberDataPoint: start_time_unix_nano 2, time_unix_nano 3,
// as_double 4, as_int 6, attributes 7, flags 8. Its attributes are left in
// wm.attrVals and wm.attrRun, unread, for labels.
func (wm *wireMetrics) point(b []byte) (numberPoint, bool) {
	var dp numberPoint
	wm.startAttrs()
	w := wireMsg{b: b}
	for w.more() {
		at := w.pos
		num, wt, ok := w.tag()
		if !ok {
			return dp, false
		}
		switch {
		case num == 7 && wt == wtLen:
			v, ok := w.bytes()
			if !ok {
				return dp, false
			}
			wm.addAttr(v, at, w.pos)
		case (num == 2 || num == 3 || num == 4 || num == 6) && wt == wtI64:
			v, ok := w.fixed64()
			if !ok {
				return dp, false
			}
			switch num {
			case 2:
				dp.start = v
			case 3:
				dp.time = v
			case 4:
				dp.valueType, dp.dblValue, dp.intValue = pmetric.NumberDataPointValueTypeDouble, math.Float64frombits(v), 0
			case 6:
				dp.valueType, dp.intValue, dp.dblValue = pmetric.NumberDataPointValueTypeInt, int64(v), 0
			}
		case num == 8 && wt == wtVarint:
			v, ok := w.varint()
			if !ok {
				return dp, false
			}
			dp.flags = pmetric.DataPointFlags(uint32(v))
		default:
			return dp, false
		}
	}
	wm.endAttrs(b)
	return dp, true
}

// startAttrs begins a point's attributes: point and histPoint leave them
// in attrVals, and in attrRun the run of the point's bytes they fill when
// they are consecutive (split: they are not), for labels.
func (wm *wireMetrics) startAttrs() {
	wm.attrVals, wm.split = wm.attrVals[:0], false
	wm.attrFrom, wm.attrTo = -1, -1
}

// addAttr adds the attribute KeyValue v, read from the point's bytes
// [at, end).
func (wm *wireMetrics) addAttr(v []byte, at, end int) {
	wm.attrVals = append(wm.attrVals, v)
	switch {
	case wm.attrFrom < 0:
		wm.attrFrom = at
	case wm.attrTo != at:
		wm.split = true
	}
	wm.attrTo = end
}

// endAttrs ends the attributes of point b.
func (wm *wireMetrics) endAttrs(b []byte) {
	wm.attrRun = nil
	if wm.attrFrom >= 0 {
		wm.attrRun = b[wm.attrFrom:wm.attrTo]
	}
}

// pointLabels is what a point's attributes give its sample, for either
// family: the labels are read once for both.
type pointLabels struct {
	model string    // engine points: model_name
	eng   Placement // engine points
	gpu   Placement // GPU points
}

// maxMemoLabels bounds labels' memo: a resource with more distinct label
// sets reads the rest each time.
const maxMemoLabels = 512

// labels reads the attributes point left (each a string KeyValue, else ok
// false: the payload goes to pdata) into what they give a sample of either
// family under res, or takes what an earlier point of the resource with
// the same attribute bytes gave.
func (wm *wireMetrics) labels(res *metricRes) (pointLabels, bool) {
	if !wm.split {
		if l, ok := wm.memo[string(wm.attrRun)]; ok {
			return l, true
		}
	}
	wm.attrs = wm.attrs[:0]
	for _, v := range wm.attrVals {
		kv, ok := readKV(v)
		if !ok {
			return pointLabels{}, false
		}
		wm.attrs = append(wm.attrs, kv)
	}
	var gl gpuLabels
	var el engineLabels
	for _, kv := range wm.attrs {
		if dst := gl.field(string(kv.key)); dst != nil {
			*dst = wm.in.str(kv.value)
		}
		if dst := el.field(string(kv.key)); dst != nil {
			*dst = wm.in.str(kv.value)
		}
	}
	var l pointLabels
	l.gpu = gl.placement(res)
	l.model, l.eng = el.placement(res)
	if !wm.split {
		if wm.memo == nil {
			wm.memo = make(map[string]pointLabels, 64)
		}
		if len(wm.memo) < maxMemoLabels {
			wm.memo[string(wm.attrRun)] = l
		}
	}
	return l, true
}

// histPoint reads a HistogramDataPoint (start_time_unix_nano 2,
// time_unix_nano 3, count 4, sum 5, bucket_counts 6, explicit_bounds 7,
// attributes 9, flags 10, min 11, max 12; 6 and 7 packed or not) into
// wm.hist, and its attributes into wm.attrVals and wm.attrRun as point
// does; any other field, or a wire error, is ok false (the payload goes to
// pdata). Histograms normalization only counts are read the same way.
func (wm *wireMetrics) histPoint(b []byte) bool {
	hp := &wm.hist
	*hp = histPoint{bounds: hp.bounds[:0], counts: hp.counts[:0]}
	wm.startAttrs()
	w := wireMsg{b: b}
	for w.more() {
		at := w.pos
		num, wt, ok := w.tag()
		if !ok {
			return false
		}
		switch {
		case (num == 2 || num == 3 || num == 4 || num == 5 || num == 6 || num == 7 || num == 11 || num == 12) && wt == wtI64:
			v, ok := w.fixed64()
			if !ok {
				return false
			}
			switch num {
			case 2:
				hp.start = v
			case 3:
				hp.time = v
			case 6:
				hp.counts = append(hp.counts, v)
			case 7:
				hp.bounds = append(hp.bounds, math.Float64frombits(v))
			}
		case (num == 6 || num == 7) && wt == wtLen:
			v, ok := w.bytes()
			if !ok || len(v)%8 != 0 {
				return false
			}
			for i := 0; i < len(v); i += 8 {
				x := binary.LittleEndian.Uint64(v[i:])
				if num == 6 {
					hp.counts = append(hp.counts, x)
				} else {
					hp.bounds = append(hp.bounds, math.Float64frombits(x))
				}
			}
		case num == 9 && wt == wtLen:
			v, ok := w.bytes()
			if !ok {
				return false
			}
			wm.addAttr(v, at, w.pos)
		case num == 10 && wt == wtVarint:
			v, ok := w.varint()
			if !ok {
				return false
			}
			hp.flags = pmetric.DataPointFlags(uint32(v))
		default:
			return false
		}
	}
	wm.endAttrs(b)
	return true
}

// addSample normalizes one point, whose attributes gave l.
func (wm *wireMetrics) addSample(spec metricSpec, useStart bool, name string, p int, dp numberPoint, l *pointLabels) {
	s, ok := wm.n.sample(spec, useStart, name, p, dp)
	if !ok {
		return
	}
	if spec.family == FamilyGPU {
		s.Placement = l.gpu
	} else {
		s.Model, s.Placement = l.model, l.eng
	}
	wm.n.out.Samples = append(wm.n.out.Samples, s)
}

// MetricsRecord is MetricsDecoder.Record with a decoder of its own.
func MetricsRecord(b []byte, enc Encoding) (Batch, error) {
	var d MetricsDecoder
	return d.Record(b, enc)
}
