package query

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
)

// memIncidents is the in-memory incidentStore: the incidents table as
// appended rows, an incident being its newest version (the highest
// version; of equal ones the last inserted, as ReplacingMergeTree(version)
// keeps). It passes the conformance suite (store_test.go) that sqlIncidents
// passes on ClickHouse.
type memIncidents struct {
	mu   sync.Mutex
	rows []memIncident
}

type memIncident struct {
	rec     incidentRecord
	payload []byte
}

// insert adds rows in incidentCols order.
func (m *memIncidents) insert(rows [][]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	col := map[string]int{}
	for i, c := range incidentCols.Columns {
		col[c] = i
	}
	for _, r := range rows {
		get := func(name string) any { return r[col[name]] }
		sec := func(name string) time.Time { return get(name).(time.Time).Truncate(time.Second).UTC() } // DateTime
		f64 := func(name string) float64 {
			switch v := get(name).(type) {
			case float64:
				return v
			case int:
				return float64(v)
			}
			panic("memIncidents: " + name + " is not a number")
		}
		m.rows = append(m.rows, memIncident{rec: incidentRecord{
			id: get("incident_id").(string), version: get("version").(uint64), status: get("status").(string),
			scopeKeys: slices.Clone(get("scope_keys").([]string)), scopeValues: slices.Clone(get("scope_values").([]string)),
			signal: get("signal").(string), quantile: f64("quantile"), thresholdMS: f64("threshold_ms"),
			windowStart: sec("window_start"), windowEnd: sec("window_end"),
			opened: sec("opened_at"), updated: sec("updated_at"), resolved: sec("resolved_at"),
			observedP99MS: f64("observed_p99_ms"), baselineP99MS: f64("baseline_p99_ms"),
			requests: get("requests").(uint64), tailRequests: get("tail_requests").(uint64),
			topCause: get("top_cause").(string), topEntity: get("top_entity").(string),
		}, payload: []byte(get("payload").(string))})
	}
}

// newest is the newest version of every incident.
func (m *memIncidents) newest() map[string]memIncident {
	out := map[string]memIncident{}
	for _, r := range m.rows {
		if have, ok := out[r.rec.id]; !ok || r.rec.version >= have.rec.version {
			out[r.rec.id] = r
		}
	}
	return out
}

func scopeValue(r incidentRecord, key string) string {
	if i := slices.Index(r.scopeKeys, key); i >= 0 && i < len(r.scopeValues) {
		return r.scopeValues[i]
	}
	return ""
}

func (m *memIncidents) listIncidents(_ context.Context, f incidentFilter) ([]incidentRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	from, to := f.from.Unix(), f.to.Unix()
	var out []incidentRecord
	for _, r := range m.newest() {
		x := r.rec
		switch {
		case x.windowEnd.Unix() < from || x.windowStart.Unix() >= to,
			f.status != "" && x.status != f.status,
			f.cause != "" && x.topCause != f.cause,
			f.model != "" && scopeValue(x, "model") != f.model,
			f.service != "" && scopeValue(x, "service") != f.service,
			f.after != nil && !(x.opened.Unix() < f.after.OpenedAt || x.opened.Unix() == f.after.OpenedAt && x.id < f.after.ID):
			continue
		}
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, b incidentRecord) int {
		return cmp.Or(b.opened.Compare(a.opened), cmp.Compare(b.id, a.id))
	})
	return out[:min(len(out), f.limit)], nil
}

func (m *memIncidents) incident(_ context.Context, id string) (uint64, []byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.newest()[id]
	if !ok {
		return 0, nil, false, nil
	}
	return r.rec.version, bytes.Clone(r.payload), true, nil
}

// memRequests is the in-memory requestStore, lookupStore and reportStore: the requests table as rows
// keyed by its sorting key (model, service, start_time, uid), the last
// written winning (FINAL). It passes the conformance suite (store_test.go)
// that sqlRequests passes on ClickHouse.
type memRequests struct {
	mu        sync.Mutex
	rows      map[string]map[string]any // sorting key → column → value
	stallRows map[string]map[string]any // token_stalls, likewise
	gpuPods   [][3]string               // gpu_samples: host, gpu, pod
}

// insert adds rows in requestCols order.
func (m *memRequests) insert(rows [][]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rows == nil {
		m.rows = map[string]map[string]any{}
	}
	for _, r := range rows {
		row := make(map[string]any, len(r))
		for i, c := range requestCols.Columns {
			row[c] = r[i]
		}
		row["start_time"] = row["start_time"].(time.Time).Truncate(time.Second).UTC() // DateTime
		key := fmt.Sprint(row["model"], "\x00", row["service"], "\x00", row["start_time"].(time.Time).Unix(), "\x00", row["uid"])
		m.rows[key] = row
	}
}

// groups answers p99By and minuteSeries: by keyCols, or by minute.
func (m *memRequests) groups(q p99Query, byMinute bool) []p99Group {
	m.mu.Lock()
	defer m.mu.Unlock()
	type acc struct {
		g      p99Group
		values []float64
	}
	by := map[string]*acc{}
	for _, r := range m.rows {
		st := r["start_time"].(time.Time)
		v := r[q.col].(float64)
		if st.Unix() < q.from.Unix() || st.Unix() >= q.to.Unix() || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		match := true
		for i, c := range q.f.cols {
			match = match && r[c] == q.f.vals[i]
		}
		if !match {
			continue
		}
		var g p99Group
		if byMinute {
			g.minute = st.Truncate(time.Minute)
		} else {
			for _, c := range q.keyCols {
				g.key = append(g.key, r[c].(string))
			}
		}
		k := fmt.Sprint(g.minute.Unix(), g.key)
		a := by[k]
		if a == nil {
			a = &acc{g: g}
			by[k] = a
		}
		a.g.requests++
		a.g.errors += uint64(r["error"].(uint8))
		a.values = append(a.values, v)
	}
	var out []p99Group
	for _, a := range by {
		a.g.p50, a.g.p99, a.g.max = quantileExact(a.values, 0.5), quantileExact(a.values, 0.99), slices.Max(a.values) // fixture_test.go's
		out = append(out, a.g)
	}
	slices.SortFunc(out, func(a, b p99Group) int {
		if byMinute {
			return a.minute.Compare(b.minute)
		}
		return cmp.Or(cmp.Compare(b.p99, a.p99), slices.Compare(a.key, b.key))
	})
	return out[:min(len(out), q.limit)]
}

func (m *memRequests) p99By(_ context.Context, q p99Query) ([]p99Group, error) {
	return m.groups(q, false), nil
}

func (m *memRequests) minuteSeries(_ context.Context, q p99Query) ([]p99Group, error) {
	return m.groups(q, true), nil
}

// insertStalls adds token_stalls rows in stallCols order (FINAL: by the
// sorting key model, start_time, request_uid, token_index).
func (m *memRequests) insertStalls(rows [][]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stallRows == nil {
		m.stallRows = map[string]map[string]any{}
	}
	for _, r := range rows {
		row := make(map[string]any, len(r))
		for i, c := range stallCols.Columns {
			row[c] = r[i]
		}
		row["start_time"] = row["start_time"].(time.Time).Truncate(time.Second).UTC()
		key := fmt.Sprint(row["model"], "\x00", row["start_time"].(time.Time).Unix(), "\x00", row["request_uid"], "\x00", row["token_index"])
		m.stallRows[key] = row
	}
}

// assign copies row's cols into dest (pointers of the same types, as the
// driver scans them).
func assign(row map[string]any, cols []string, dest []any) {
	for i, c := range cols {
		v := reflect.ValueOf(row[c])
		if s, ok := row[c].([]string); ok {
			v = reflect.ValueOf(slices.Clone(s))
		}
		reflect.ValueOf(dest[i]).Elem().Set(v)
	}
}

func inSeconds(t, from, to time.Time) bool { return t.Unix() >= from.Unix() && t.Unix() < to.Unix() }

func (m *memRequests) request(_ context.Context, uid string, from, to time.Time) (requestFacts, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var f requestFacts
	for _, r := range m.rows {
		if r["uid"] == uid && inSeconds(r["start_time"].(time.Time), from, to) {
			assign(r, requestFactCols(), f.dest())
			return f, true, nil
		}
	}
	return f, false, nil
}

func (m *memRequests) stalls(_ context.Context, model, uid string, from, to time.Time, limit int) ([]stallFacts, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []stallFacts
	for _, r := range m.stallRows {
		if r["model"] == model && r["request_uid"] == uid && inSeconds(r["start_time"].(time.Time), from, to) {
			var f stallFacts
			assign(r, stallFactCols, f.dest())
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b stallFacts) int { return cmp.Compare(a.tokenIndex, b.tokenIndex) })
	return out[:min(len(out), limit)], nil
}

func (m *memRequests) exemplarRequests(_ context.Context, traceIDs []string, from, to time.Time, limit int) ([]exemplarFacts, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []exemplarFacts
	for _, r := range m.rows {
		if slices.Contains(traceIDs, r["trace_id"].(string)) && inSeconds(r["start_time"].(time.Time), from, to) {
			var f exemplarFacts
			assign(r, exemplarFactCols, f.dest())
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b exemplarFacts) int { return cmp.Compare(a.startNs, b.startNs) })
	return out[:min(len(out), limit)], nil
}

// insertGPUSamples adds gpu_samples rows in gpuSampleCols order.
func (m *memRequests) insertGPUSamples(rows [][]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rows {
		m.gpuPods = append(m.gpuPods, [3]string{r[0].(string), r[1].(string), r[2].(string)})
	}
}

// gpuSampleCols are the gpu_samples columns the tests write.
var gpuSampleCols = chstore.Table{Name: "gpu_samples", Columns: []string{"host", "gpu", "pod", "metric", "time_ns", "time", "value"}}

// memSignal evaluates a causeSignal's SQL expression on a row, as
// ClickHouse would: a column, or one of the compound expressions signalFor
// writes.
func memSignal(expr string, r map[string]any) float64 {
	f := func(c string) float64 {
		switch v := r[c].(type) {
		case float64:
			return v
		case int64:
			return float64(v)
		case uint32:
			return float64(v)
		}
		panic("memSignal: column " + c + " is not a number")
	}
	switch expr {
	case "running_at_arrival + waiting_at_arrival":
		return f("running_at_arrival") + f("waiting_at_arrival")
	case "toFloat64(prompt_tokens)":
		return f("prompt_tokens")
	case "toFloat64(completion_tokens)":
		return f("completion_tokens")
	case "toFloat64(xid_last != 0)":
		if f("xid_last") != 0 {
			return 1
		}
		return 0
	case "toFloat64(1)":
		return 1
	}
	return f(expr)
}

// onEntity is entityConds in Go.
func (m *memRequests) onEntity(r map[string]any, e map[string]string) bool {
	match := true
	for _, c := range filterColumns {
		if v, ok := e[c]; ok && v != "" && r[c] != v {
			match = false
		}
	}
	if match || e["gpu"] == "" || e["pod"] != "" || e["engine"] != "" || r["gpu"] != "" || r["host"] != e["host"] {
		return match
	}
	return slices.Contains(m.gpuPods, [3]string{e["host"], e["gpu"], r["pod"].(string)})
}

func inScope(r map[string]any, scope map[string]string) bool {
	for _, c := range filterColumns {
		if v, ok := scope[c]; ok && v != "" && r[c] != v {
			return false
		}
	}
	return true
}

func (m *memRequests) distributions(_ context.Context, col string, scope map[string]string, base, win interval, levels []float64) (cdf, cdf, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var bv, wv []float64
	for _, r := range m.rows {
		v := r[col].(float64)
		if math.IsNaN(v) || math.IsInf(v, 0) || !inScope(r, scope) {
			continue
		}
		st := r["start_time"].(time.Time)
		if inSeconds(st, base.Start, base.End) {
			bv = append(bv, v)
		}
		if inSeconds(st, win.Start, win.End) {
			wv = append(wv, v)
		}
	}
	mk := func(vs []float64) cdf {
		c := cdf{levels: levels, n: uint64(len(vs))}
		for _, l := range levels {
			if len(vs) > 0 {
				c.values = append(c.values, quantileExact(vs, l))
			}
		}
		return c
	}
	return mk(bv), mk(wv), nil
}

func (m *memRequests) series(_ context.Context, col string, scope map[string]string, from, to time.Time, sig causeSignal, entity map[string]string, limit int) ([]seriesPoint, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	type acc struct {
		vals, sigs []float64
		count      float64
	}
	by := map[int64]*acc{}
	for _, r := range m.rows {
		v := r[col].(float64)
		st := r["start_time"].(time.Time)
		if math.IsNaN(v) || math.IsInf(v, 0) || !inScope(r, scope) || !inSeconds(st, from, to) {
			continue
		}
		k := st.Truncate(time.Minute).Unix()
		a := by[k]
		if a == nil {
			a = &acc{}
			by[k] = a
		}
		a.vals = append(a.vals, v)
		if entity != nil && !m.onEntity(r, entity) {
			continue
		}
		if s := memSignal(sig.expr, r); !math.IsNaN(s) && !math.IsInf(s, 0) {
			a.sigs = append(a.sigs, s)
			a.count++
		}
	}
	var out []seriesPoint
	for k, a := range by {
		p := seriesPoint{minute: time.Unix(k, 0).UTC(), p99: quantileExact(a.vals, 0.99), signal: math.NaN()}
		switch {
		case sig.label == "requests":
			p.signal = a.count
		case len(a.sigs) > 0:
			var sum float64
			for _, s := range a.sigs {
				sum += s
			}
			p.signal = sum / float64(len(a.sigs))
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b seriesPoint) int { return a.minute.Compare(b.minute) })
	return out[:min(len(out), limit)], nil
}
