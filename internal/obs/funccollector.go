package obs

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
)

// Kind says how a Value is exposed.
type Kind uint8

const (
	// Counter: monotonic; exposed with a "_total" suffix.
	Counter Kind = iota
	// Gauge: goes up and down.
	Gauge
)

// Value is one sample a snapshot function returns.
type Value struct {
	Name  string // snake_case, without the collector's prefix and _total
	Kind  Kind
	Value float64
	Help  string // optional
}

// FuncCollector is a prometheus.Collector whose samples come from a
// snapshot function called at every scrape, so a role exposes counters it
// already keeps (atomic fields, a stats snapshot) without rewriting them.
//
// The names the snapshot returns must be the same at every call: they are
// described once, at registration, so the registry rejects a clash with
// another collector there and then.
type FuncCollector struct {
	prefix   string
	snapshot func() []Value

	mu    sync.Mutex
	descs map[string]*prometheus.Desc
}

// NewFuncCollector exposes snapshot's values as prefix_name (counters
// prefix_name_total). prefix is a metric-name prefix such as
// "tailcause_enrich".
func NewFuncCollector(prefix string, snapshot func() []Value) *FuncCollector {
	return &FuncCollector{prefix: prefix, snapshot: snapshot, descs: make(map[string]*prometheus.Desc)}
}

func (c *FuncCollector) fqName(v Value) string {
	n := v.Name
	if c.prefix != "" {
		n = c.prefix + "_" + n
	}
	if v.Kind == Counter && !strings.HasSuffix(n, "_total") {
		n += "_total"
	}
	return n
}

func (c *FuncCollector) desc(v Value) *prometheus.Desc {
	name := c.fqName(v)
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.descs[name]
	if d == nil {
		help := v.Help
		if help == "" {
			help = v.Name
		}
		d = prometheus.NewDesc(name, help, nil, nil)
		c.descs[name] = d
	}
	return d
}

// Describe implements prometheus.Collector.
func (c *FuncCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range c.snapshot() {
		ch <- c.desc(v)
	}
}

// Collect implements prometheus.Collector.
func (c *FuncCollector) Collect(ch chan<- prometheus.Metric) {
	for _, v := range c.snapshot() {
		t := prometheus.CounterValue
		if v.Kind == Gauge {
			t = prometheus.GaugeValue
		}
		ch <- prometheus.MustNewConstMetric(c.desc(v), t, v.Value)
	}
}

// Field describes how StructValues exposes one struct field: its HELP
// text (a sentence for a person reading /metrics, not the field's Go name)
// and whether it is a gauge (otherwise a counter).
type Field struct {
	Help  string
	Gauge bool
}

// StructValues reads the exported numeric fields of the struct that v is
// or points to — ints, uints, floats, and the sync/atomic Int32, Int64,
// Uint32, Uint64 types (read with Load) — as Values named after the fields
// in snake_case (SpanRecords → span_records, GPUSeries → gpu_series),
// described by fields (keyed by the Go field name). A field that fields
// does not name is a counter with no HELP text (the collector then uses
// its name, which a test of the role should refuse). Other fields are
// skipped. It panics if v is not a struct or a pointer to one (a
// programmer's error). Pass a pointer for atomic fields: they must not be
// copied.
func StructValues(v any, fields map[string]Field) []Value {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		panic(fmt.Sprintf("obs.StructValues: %T is not a struct", v))
	}
	rt := rv.Type()
	out := make([]Value, 0, rt.NumField())
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		if !f.IsExported() {
			continue
		}
		x, ok := number(rv.Field(i))
		if !ok {
			continue
		}
		d := fields[f.Name]
		k := Counter
		if d.Gauge {
			k = Gauge
		}
		out = append(out, Value{Name: SnakeCase(f.Name), Kind: k, Value: x, Help: d.Help})
	}
	return out
}

func number(f reflect.Value) (float64, bool) {
	switch f.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(f.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return float64(f.Uint()), true
	case reflect.Float32, reflect.Float64:
		return f.Float(), true
	case reflect.Struct:
		// sync/atomic's types: a Load method on the pointer.
		if !f.CanAddr() {
			return 0, false
		}
		load := f.Addr().MethodByName("Load")
		if !load.IsValid() || load.Type().NumIn() != 0 || load.Type().NumOut() != 1 {
			return 0, false
		}
		switch r := load.Call(nil)[0]; r.Kind() {
		case reflect.Int32, reflect.Int64:
			return float64(r.Int()), true
		case reflect.Uint32, reflect.Uint64:
			return float64(r.Uint()), true
		}
	}
	return 0, false
}

// SnakeCase turns a Go identifier into snake_case, keeping initialisms
// together: SpanRecords → span_records, GPUSeries → gpu_series,
// InsertRetries → insert_retries.
func SnakeCase(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) {
			prevLower := i > 0 && (unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1]))
			nextLower := i > 0 && i+1 < len(r) && unicode.IsLower(r[i+1]) && unicode.IsUpper(r[i-1])
			if prevLower || nextLower {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(c))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}
