package promexpo

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// ContentType is the media type of the text exposition format 0.0.4.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// ErrUnsupported marks a metric that has no Prometheus text form (delta
// temporality, exponential histograms).
var ErrUnsupported = errors.New("no Prometheus text form")

// Options tune the rendering. The zero value is the default.
type Options struct {
	// OmitTimestamps leaves the sample timestamps out, so that a scraper
	// stamps its scrape time (as it does for a live engine).
	OmitTimestamps bool
}

type famType uint8

const (
	famGauge famType = iota
	famCounter
	famHistogram
	famSummary
)

func (t famType) String() string {
	return [...]string{"gauge", "counter", "histogram", "summary"}[t]
}

// family is every metric of one exposed name, in the order met.
type family struct {
	name    string
	typ     famType
	help    string
	metrics []pmetric.Metric
}

// Append renders mds as one exposition and appends it to dst. Metrics of
// the same exposed name, from any of mds and any resource, are written as
// one family; families appear in the order their first metric does. On
// error dst is returned unchanged in length with the error; nothing
// partial is appended.
func Append(dst []byte, o Options, mds ...pmetric.Metrics) ([]byte, error) {
	var fams []*family
	byName := make(map[string]*family)
	for _, md := range mds {
		rms := md.ResourceMetrics()
		for i := 0; i < rms.Len(); i++ {
			sms := rms.At(i).ScopeMetrics()
			for j := 0; j < sms.Len(); j++ {
				ms := sms.At(j).Metrics()
				for k := 0; k < ms.Len(); k++ {
					m := ms.At(k)
					name, typ, err := classify(m)
					if err != nil {
						return dst, err
					}
					f := byName[name]
					if f == nil {
						f = &family{name: name, typ: typ, help: m.Description()}
						byName[name] = f
						fams = append(fams, f)
					} else if f.typ != typ {
						return dst, fmt.Errorf("metric %q: %s conflicts with the %s of the same name", m.Name(), typ, f.typ)
					}
					f.metrics = append(f.metrics, m)
				}
			}
		}
	}
	w := writer{buf: dst, o: o}
	for _, f := range fams {
		w.family(f)
	}
	return w.buf, nil
}

// classify returns the exposed family name and type of m.
func classify(m pmetric.Metric) (string, famType, error) {
	name := sanitizeName(m.Name(), true)
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		return name, famGauge, nil
	case pmetric.MetricTypeSum:
		s := m.Sum()
		if s.AggregationTemporality() != pmetric.AggregationTemporalityCumulative {
			return "", 0, fmt.Errorf("metric %q: %s sum: %w", m.Name(), s.AggregationTemporality(), ErrUnsupported)
		}
		if !s.IsMonotonic() {
			return name, famGauge, nil
		}
		if !strings.HasSuffix(name, "_total") {
			name += "_total"
		}
		return name, famCounter, nil
	case pmetric.MetricTypeHistogram:
		if t := m.Histogram().AggregationTemporality(); t != pmetric.AggregationTemporalityCumulative {
			return "", 0, fmt.Errorf("metric %q: %s histogram: %w", m.Name(), t, ErrUnsupported)
		}
		return name, famHistogram, nil
	case pmetric.MetricTypeSummary:
		return name, famSummary, nil
	default:
		return "", 0, fmt.Errorf("metric %q: %s: %w", m.Name(), m.Type(), ErrUnsupported)
	}
}

type writer struct {
	buf []byte
	o   Options
	// labels is the scratch list of one point's labels.
	labels []label
	seen   map[string]struct{}
}

type label struct{ name, value string }

func (w *writer) family(f *family) {
	if f.help != "" {
		w.buf = append(w.buf, "# HELP "...)
		w.buf = append(w.buf, f.name...)
		w.buf = append(w.buf, ' ')
		w.buf = appendEscaped(w.buf, f.help, false)
		w.buf = append(w.buf, '\n')
	}
	w.buf = append(w.buf, "# TYPE "...)
	w.buf = append(w.buf, f.name...)
	w.buf = append(w.buf, ' ')
	w.buf = append(w.buf, f.typ.String()...)
	w.buf = append(w.buf, '\n')
	for _, m := range f.metrics {
		switch f.typ {
		case famGauge, famCounter:
			w.numbers(f.name, m)
		case famHistogram:
			w.histogram(f.name, m.Histogram().DataPoints())
		case famSummary:
			w.summary(f.name, m.Summary().DataPoints())
		}
	}
}

func (w *writer) numbers(name string, m pmetric.Metric) {
	var dps pmetric.NumberDataPointSlice
	if m.Type() == pmetric.MetricTypeGauge {
		dps = m.Gauge().DataPoints()
	} else {
		dps = m.Sum().DataPoints()
	}
	for i := 0; i < dps.Len(); i++ {
		dp := dps.At(i)
		if dp.Flags().NoRecordedValue() {
			continue
		}
		w.setLabels(dp.Attributes())
		w.sampleStart(name, "", "")
		switch dp.ValueType() {
		case pmetric.NumberDataPointValueTypeInt:
			w.buf = strconv.AppendInt(w.buf, dp.IntValue(), 10)
		default:
			w.buf = appendFloat(w.buf, dp.DoubleValue())
		}
		w.sampleEnd(dp.Timestamp())
	}
}

func (w *writer) histogram(name string, dps pmetric.HistogramDataPointSlice) {
	for i := 0; i < dps.Len(); i++ {
		dp := dps.At(i)
		if dp.Flags().NoRecordedValue() {
			continue
		}
		w.setLabels(dp.Attributes())
		bounds, counts := dp.ExplicitBounds(), dp.BucketCounts()
		var cum uint64
		for b := 0; b < bounds.Len(); b++ {
			if b < counts.Len() {
				cum += counts.At(b)
			}
			w.sampleStart(name+"_bucket", "le", string(appendFloat(nil, bounds.At(b))))
			w.buf = strconv.AppendUint(w.buf, cum, 10)
			w.sampleEnd(dp.Timestamp())
		}
		w.sampleStart(name+"_bucket", "le", "+Inf")
		w.buf = strconv.AppendUint(w.buf, dp.Count(), 10)
		w.sampleEnd(dp.Timestamp())
		if dp.HasSum() {
			w.sampleStart(name+"_sum", "", "")
			w.buf = appendFloat(w.buf, dp.Sum())
			w.sampleEnd(dp.Timestamp())
		}
		w.sampleStart(name+"_count", "", "")
		w.buf = strconv.AppendUint(w.buf, dp.Count(), 10)
		w.sampleEnd(dp.Timestamp())
	}
}

func (w *writer) summary(name string, dps pmetric.SummaryDataPointSlice) {
	for i := 0; i < dps.Len(); i++ {
		dp := dps.At(i)
		if dp.Flags().NoRecordedValue() {
			continue
		}
		w.setLabels(dp.Attributes())
		qs := dp.QuantileValues()
		for q := 0; q < qs.Len(); q++ {
			w.sampleStart(name, "quantile", string(appendFloat(nil, qs.At(q).Quantile())))
			w.buf = appendFloat(w.buf, qs.At(q).Value())
			w.sampleEnd(dp.Timestamp())
		}
		w.sampleStart(name+"_sum", "", "")
		w.buf = appendFloat(w.buf, dp.Sum())
		w.sampleEnd(dp.Timestamp())
		w.sampleStart(name+"_count", "", "")
		w.buf = strconv.AppendUint(w.buf, dp.Count(), 10)
		w.sampleEnd(dp.Timestamp())
	}
}

// setLabels turns point attributes into labels: names sanitised, reserved
// (__*) names and later duplicates after sanitising dropped.
func (w *writer) setLabels(attrs pcommon.Map) {
	w.labels = w.labels[:0]
	if w.seen == nil {
		w.seen = make(map[string]struct{})
	}
	clear(w.seen)
	for k, v := range attrs.All() {
		n := sanitizeName(k, false)
		if strings.HasPrefix(n, "__") {
			continue
		}
		if _, dup := w.seen[n]; dup {
			continue
		}
		w.seen[n] = struct{}{}
		w.labels = append(w.labels, label{n, v.AsString()})
	}
}

// sampleStart writes the series name and labels, plus one extra label (le,
// quantile) when extraName is set, up to the space before the value. The
// point's own label of the extra's name, if any, is left out.
func (w *writer) sampleStart(name, extraName, extraValue string) {
	w.buf = append(w.buf, name...)
	n := 0
	for _, l := range w.labels {
		if l.name == extraName {
			continue
		}
		w.buf = w.appendSep(n)
		w.buf = appendLabel(w.buf, l.name, l.value)
		n++
	}
	if extraName != "" {
		w.buf = w.appendSep(n)
		w.buf = appendLabel(w.buf, extraName, extraValue)
		n++
	}
	if n > 0 {
		w.buf = append(w.buf, '}')
	}
	w.buf = append(w.buf, ' ')
}

func (w *writer) appendSep(n int) []byte {
	if n == 0 {
		return append(w.buf, '{')
	}
	return append(w.buf, ',')
}

func (w *writer) sampleEnd(ts pcommon.Timestamp) {
	if !w.o.OmitTimestamps && ts != 0 {
		w.buf = append(w.buf, ' ')
		w.buf = strconv.AppendInt(w.buf, int64(ts)/1e6, 10)
	}
	w.buf = append(w.buf, '\n')
}

func appendLabel(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, '=', '"')
	b = appendEscaped(b, value, true)
	return append(b, '"')
}

// appendEscaped escapes backslash and newline, and the double quote in
// label values, as the text format requires.
func appendEscaped(b []byte, s string, quote bool) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, '\\', '\\')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '"' && quote:
			b = append(b, '\\', '"')
		default:
			b = append(b, c)
		}
	}
	return b
}

func appendFloat(b []byte, v float64) []byte {
	switch {
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// sanitizeName maps s onto [a-zA-Z_][a-zA-Z0-9_]* (plus ':' for metric
// names), replacing every other byte with '_'.
func sanitizeName(s string, metric bool) string {
	ok := func(i int, c byte) bool {
		return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' ||
			(metric && c == ':') || (i > 0 && c >= '0' && c <= '9')
	}
	valid := s != ""
	for i := 0; i < len(s) && valid; i++ {
		valid = ok(i, s[i])
	}
	if valid {
		return s
	}
	if s == "" {
		return "_"
	}
	b := make([]byte, 0, len(s)+1)
	if c := s[0]; c >= '0' && c <= '9' {
		b = append(b, '_')
	}
	for i := 0; i < len(s); i++ {
		if ok(len(b), s[i]) {
			b = append(b, s[i])
		} else {
			b = append(b, '_')
		}
	}
	return string(b)
}
