package query

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// incidentStore is what the incident routes need of the incidents table
// (written by the causal stage, one row per version; an incident is its
// newest version). sqlIncidents is the real one, over DB; the package's
// tests have an in-memory one (memstore_test.go), and one conformance
// suite (store_test.go) runs on both.
type incidentStore interface {
	// listIncidents returns up to f.limit incidents (their newest
	// version) whose window overlaps [f.from, f.to) (whole seconds:
	// window_end >= from and window_start < to), matching every
	// non-empty filter of f (status, top cause, the scope's model and
	// service) and after f.after, newest first: opened_at, then incident
	// id, both descending.
	listIncidents(ctx context.Context, f incidentFilter) ([]incidentRecord, error)
	// incident returns the newest version of the incident and its stored
	// v1 payload; ok is false when there is none.
	incident(ctx context.Context, id string) (version uint64, payload []byte, ok bool, err error)
}

// incidentFilter selects a page of listIncidents.
type incidentFilter struct {
	from, to                      time.Time
	status, cause, model, service string
	after                         *cursor // the page starts after it (opened_at, id)
	limit                         int
}

// incidentRecord is the summary columns of an incident's newest version.
type incidentRecord struct {
	id                           string
	version                      uint64
	status                       string
	scopeKeys, scopeValues       []string
	signal                       string
	quantile, thresholdMS        float64
	windowStart, windowEnd       time.Time
	opened, updated, resolved    time.Time
	observedP99MS, baselineP99MS float64
	requests, tailRequests       uint64
	topCause, topEntity          string
}

// sqlIncidents reads the incidents table over DB.
type sqlIncidents struct{ db DB }

func (s sqlIncidents) listIncidents(ctx context.Context, f incidentFilter) ([]incidentRecord, error) {
	where := "window_end >= toDateTime(?) AND window_start < toDateTime(?)"
	args := []any{f.from.Unix(), f.to.Unix()}
	for _, p := range []struct{ value, cond string }{
		{f.status, "status = ?"},
		{f.cause, "top_cause = ?"},
		{f.model, "scope_values[indexOf(scope_keys, 'model')] = ?"},
		{f.service, "scope_values[indexOf(scope_keys, 'service')] = ?"},
	} {
		if p.value != "" {
			where += " AND " + p.cond
			args = append(args, p.value)
		}
	}
	if c := f.after; c != nil {
		where += " AND (opened_at < toDateTime(?) OR (opened_at = toDateTime(?) AND incident_id < ?))"
		args = append(args, c.OpenedAt, c.OpenedAt, c.ID)
	}
	// FINAL: the newest version of each incident (ReplacingMergeTree(version)).
	sql := `SELECT incident_id, version, status, scope_keys, scope_values, signal, quantile, threshold_ms,
       window_start, window_end, opened_at, updated_at, resolved_at,
       observed_p99_ms, baseline_p99_ms, requests, tail_requests, top_cause, top_entity
FROM incidents FINAL
WHERE ` + where + `
ORDER BY opened_at DESC, incident_id DESC
LIMIT ` + strconv.Itoa(f.limit)
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("query incidents: %w", err)
	}
	defer rows.Close()
	var out []incidentRecord
	for rows.Next() {
		var r incidentRecord
		if err := rows.Scan(&r.id, &r.version, &r.status, &r.scopeKeys, &r.scopeValues, &r.signal, &r.quantile, &r.thresholdMS,
			&r.windowStart, &r.windowEnd, &r.opened, &r.updated, &r.resolved, &r.observedP99MS, &r.baselineP99MS,
			&r.requests, &r.tailRequests, &r.topCause, &r.topEntity); err != nil {
			return nil, fmt.Errorf("scan incident row: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read incidents: %w", err)
	}
	return out, nil
}

func (s sqlIncidents) incident(ctx context.Context, id string) (uint64, []byte, bool, error) {
	rows, err := s.db.Query(ctx, "SELECT version, payload FROM incidents FINAL WHERE incident_id = ? LIMIT 1", id)
	if err != nil {
		return 0, nil, false, fmt.Errorf("query incident %s: %w", id, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return 0, nil, false, fmt.Errorf("read incident %s: %w", id, err)
		}
		return 0, nil, false, nil
	}
	var (
		version uint64
		payload string
	)
	if err := rows.Scan(&version, &payload); err != nil {
		return 0, nil, false, fmt.Errorf("scan incident %s: %w", id, err)
	}
	return version, []byte(payload), true, nil
}

// requestStore is what the P99 routes need of the requests table (FINAL:
// one row per request, duplicates of the at-least-once enrich path
// collapsed). sqlRequests is the real one, over DB; memRequests
// (memstore_test.go) passes the same conformance suite (store_test.go).
type requestStore interface {
	// p99By groups the requests that started in [q.from, q.to) (whole
	// seconds), match q.f and have a finite q.col, by q.keyCols: per group
	// the count, the errors, quantilesExact(0.5, 0.99) of q.col (the
	// element at index floor(level·n) of the sorted values) and its max;
	// highest P99 first, then the key columns ascending; at most q.limit
	// groups.
	p99By(ctx context.Context, q p99Query) ([]p99Group, error)
	// minuteSeries is the same per minute of start_time (the group's
	// minute; no key), oldest first, at most q.limit minutes.
	minuteSeries(ctx context.Context, q p99Query) ([]p99Group, error)
}

// p99Query is one question of requestStore.
type p99Query struct {
	keyCols  []string // p99By: the grouping columns (from scopeDims or entityDims)
	col      string   // the latency column (latencySignals)
	from, to time.Time
	f        filter
	limit    int
}

// p99Group is one group (or minute) of a requestStore answer.
type p99Group struct {
	key              []string  // p99By: the values of keyCols
	minute           time.Time // minuteSeries
	requests, errors uint64
	p50, p99, max    float64
}

// sqlRequests reads the requests table over DB.
type sqlRequests struct{ db DB }

func (s sqlRequests) p99By(ctx context.Context, q p99Query) ([]p99Group, error) {
	keys := strings.Join(q.keyCols, ", ")
	sql := `SELECT ` + keys + `, count() AS requests, sum(error) AS errors,
       quantilesExact(0.5, 0.99)(` + q.col + `) AS qs, max(` + q.col + `) AS max_ms
FROM requests FINAL
WHERE start_time >= toDateTime(?) AND start_time < toDateTime(?) AND isFinite(` + q.col + `)` + q.f.sql() + `
GROUP BY ` + keys + `
ORDER BY qs[2] DESC, ` + keys + `
LIMIT ` + strconv.Itoa(q.limit)
	rows, err := s.db.Query(ctx, sql, append([]any{q.from.Unix(), q.to.Unix()}, q.f.vals...)...)
	if err != nil {
		return nil, fmt.Errorf("query p99 by %s: %w", keys, err)
	}
	defer rows.Close()
	var out []p99Group
	for rows.Next() {
		g := p99Group{key: make([]string, len(q.keyCols))}
		var (
			qs  []float64
			dst []any
		)
		for i := range g.key {
			dst = append(dst, &g.key[i])
		}
		dst = append(dst, &g.requests, &g.errors, &qs, &g.max)
		if err := rows.Scan(dst...); err != nil {
			return nil, fmt.Errorf("scan p99 by %s: %w", keys, err)
		}
		g.p50, g.p99 = quantilePair(qs)
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read p99 by %s: %w", keys, err)
	}
	return out, nil
}

func (s sqlRequests) minuteSeries(ctx context.Context, q p99Query) ([]p99Group, error) {
	sql := `SELECT toStartOfMinute(start_time) AS minute, count() AS requests, sum(error) AS errors,
       quantilesExact(0.5, 0.99)(` + q.col + `) AS qs, max(` + q.col + `) AS max_ms
FROM requests FINAL
WHERE start_time >= toDateTime(?) AND start_time < toDateTime(?) AND isFinite(` + q.col + `)` + q.f.sql() + `
GROUP BY minute
ORDER BY minute
LIMIT ` + strconv.Itoa(q.limit)
	rows, err := s.db.Query(ctx, sql, append([]any{q.from.Unix(), q.to.Unix()}, q.f.vals...)...)
	if err != nil {
		return nil, fmt.Errorf("query p99 per minute: %w", err)
	}
	defer rows.Close()
	var out []p99Group
	for rows.Next() {
		var (
			g  p99Group
			qs []float64
		)
		if err := rows.Scan(&g.minute, &g.requests, &g.errors, &qs, &g.max); err != nil {
			return nil, fmt.Errorf("scan p99 per minute: %w", err)
		}
		g.p50, g.p99 = quantilePair(qs)
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read p99 per minute: %w", err)
	}
	return out, nil
}

// quantilePair reads quantilesExact(0.5, 0.99); anything else reads as
// zeros (the routes' answer since their first version; a group is never
// empty).
func quantilePair(qs []float64) (p50, p99 float64) {
	if len(qs) != 2 {
		return 0, 0
	}
	return qs[0], qs[1]
}

// The lookups of drill-down and exemplars. Each reads a fixed list of
// columns into a facts struct whose dest lists the fields in that order:
// the SQL store scans into it, the in-memory one assigns the same columns,
// and the handlers build the API's documents from it.

// requestFactCols lists the columns of requestFacts, in dest order.
func requestFactCols() []string {
	cols := []string{"uid", "trace_id", "span_id", "request_id", "source", "service", "model", "host", "pod", "engine", "gpu",
		"start_ns", "end_ns", "error", "finish_reason",
		"e2e_ms", "ttft_ms", "queue_ms", "prefill_ms", "decode_ms", "inference_ms", "tpot_ms", "kv_transfer_ms",
		"prompt_tokens", "completion_tokens", "cached_tokens", "max_tokens",
		"timeline_source", "itl_p50_ms", "itl_p99_ms", "itl_max_ms", "stall_count", "stall_ms", "retracts",
		"engine_match", "gpu_match", "throttle_reasons", "throttle_age_ms", "xid_last", "xid_age_ms",
		"attr_keys", "attr_values"}
	for _, f := range featureColumns {
		cols = append(cols, f.name, f.age)
	}
	return cols
}

// requestFacts is one request row as drill-down reads it.
type requestFacts struct {
	uid, traceID, spanID, requestID, source, service, model, host, pod, engine, gpu string
	startNs, endNs                                                                  uint64
	errFlag                                                                         uint8
	finishReason                                                                    string
	lat                                                                             [8]float64
	prompt, completion, cached, maxTokens                                           int64
	timelineSource                                                                  string
	itl50, itl99, itlMax                                                            float64
	stallCount                                                                      uint32
	stallMS                                                                         float64
	retracts                                                                        uint32
	engineMatch, gpuMatch                                                           string
	throttle                                                                        uint32
	throttleAge                                                                     float64
	xid                                                                             uint32
	xidAge                                                                          float64
	attrKeys, attrValues                                                            []string
	features                                                                        []float64 // value, age per featureColumns
}

func (f *requestFacts) dest() []any {
	d := []any{&f.uid, &f.traceID, &f.spanID, &f.requestID, &f.source, &f.service, &f.model, &f.host, &f.pod, &f.engine, &f.gpu,
		&f.startNs, &f.endNs, &f.errFlag, &f.finishReason,
		&f.lat[0], &f.lat[1], &f.lat[2], &f.lat[3], &f.lat[4], &f.lat[5], &f.lat[6], &f.lat[7],
		&f.prompt, &f.completion, &f.cached, &f.maxTokens,
		&f.timelineSource, &f.itl50, &f.itl99, &f.itlMax, &f.stallCount, &f.stallMS, &f.retracts,
		&f.engineMatch, &f.gpuMatch, &f.throttle, &f.throttleAge, &f.xid, &f.xidAge,
		&f.attrKeys, &f.attrValues}
	f.features = make([]float64, 2*len(featureColumns))
	for i := range f.features {
		d = append(d, &f.features[i])
	}
	return d
}

// stallFactCols lists the columns of stallFacts, in dest order.
var stallFactCols = []string{"token_index", "start_ns", "end_ns", "duration_ms", "preemptions", "retracts", "kv_usage_max",
	"throttle_reasons", "sm_clock_min_mhz", "xid_last", "engine_prompt_tps", "events"}

// stallFacts is one token stall as drill-down reads it.
type stallFacts struct {
	tokenIndex              uint32
	startNs, endNs          uint64
	durationMS, preemptions float64
	retracts                uint32
	kvUsageMax              float64
	throttleReasons         uint32
	smClockMinMHz           float64
	xidLast                 uint32
	enginePromptTPS         float64
	events                  []string
}

func (f *stallFacts) dest() []any {
	return []any{&f.tokenIndex, &f.startNs, &f.endNs, &f.durationMS, &f.preemptions, &f.retracts, &f.kvUsageMax,
		&f.throttleReasons, &f.smClockMinMHz, &f.xidLast, &f.enginePromptTPS, &f.events}
}

// exemplarFactCols lists the columns of exemplarFacts, in dest order.
var exemplarFactCols = []string{"trace_id", "uid", "span_id", "model", "service", "host", "engine", "gpu", "start_ns", "e2e_ms", "ttft_ms", "error"}

// exemplarFacts is one request of an exemplar trace.
type exemplarFacts struct {
	traceID, uid, spanID, model, service, host, engine, gpu string
	startNs                                                 uint64
	e2e, ttft                                               float64
	errFlag                                                 uint8
}

func (f *exemplarFacts) dest() []any {
	return []any{&f.traceID, &f.uid, &f.spanID, &f.model, &f.service, &f.host, &f.engine, &f.gpu, &f.startNs, &f.e2e, &f.ttft, &f.errFlag}
}

// lookupStore is what drill-down and the exemplars need of the requests
// and token_stalls tables (FINAL). sqlRequests is the real one;
// memRequests passes the same conformance suite.
type lookupStore interface {
	// request returns the request uid that started in [from, to) (whole
	// seconds); ok is false when there is none.
	request(ctx context.Context, uid string, from, to time.Time) (f requestFacts, ok bool, err error)
	// stalls returns up to limit token stalls of the request uid of model
	// that started in [from, to), by token index.
	stalls(ctx context.Context, model, uid string, from, to time.Time, limit int) ([]stallFacts, error)
	// exemplarRequests returns up to limit requests of the traces that
	// started in [from, to), by start_ns.
	exemplarRequests(ctx context.Context, traceIDs []string, from, to time.Time, limit int) ([]exemplarFacts, error)
}

func (s sqlRequests) request(ctx context.Context, uid string, from, to time.Time) (requestFacts, bool, error) {
	var f requestFacts
	rows, err := s.db.Query(ctx, "SELECT "+strings.Join(requestFactCols(), ", ")+`
FROM requests FINAL
WHERE start_time >= toDateTime(?) AND start_time < toDateTime(?) AND uid = ?
LIMIT 1`, from.Unix(), to.Unix(), uid)
	if err != nil {
		return f, false, fmt.Errorf("query request %s: %w", uid, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return f, false, fmt.Errorf("read request %s: %w", uid, err)
		}
		return f, false, nil
	}
	if err := rows.Scan(f.dest()...); err != nil {
		return f, false, fmt.Errorf("scan request %s: %w", uid, err)
	}
	return f, true, nil
}

func (s sqlRequests) stalls(ctx context.Context, model, uid string, from, to time.Time, limit int) ([]stallFacts, error) {
	rows, err := s.db.Query(ctx, "SELECT "+strings.Join(stallFactCols, ", ")+`
FROM token_stalls FINAL
WHERE model = ? AND start_time >= toDateTime(?) AND start_time < toDateTime(?) AND request_uid = ?
ORDER BY token_index
LIMIT ?`, model, from.Unix(), to.Unix(), uid, limit)
	if err != nil {
		return nil, fmt.Errorf("query token stalls of request %s: %w", uid, err)
	}
	defer rows.Close()
	var out []stallFacts
	for rows.Next() {
		var f stallFacts
		if err := rows.Scan(f.dest()...); err != nil {
			return nil, fmt.Errorf("scan token stall: %w", err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read token stalls: %w", err)
	}
	return out, nil
}

func (s sqlRequests) exemplarRequests(ctx context.Context, traceIDs []string, from, to time.Time, limit int) ([]exemplarFacts, error) {
	rows, err := s.db.Query(ctx, "SELECT "+strings.Join(exemplarFactCols, ", ")+`
FROM requests FINAL
WHERE start_time >= toDateTime(?) AND start_time < toDateTime(?) AND has(?, trace_id)
ORDER BY start_ns
LIMIT ?`, from.Unix(), to.Unix(), traceIDs, limit)
	if err != nil {
		return nil, fmt.Errorf("query exemplar requests: %w", err)
	}
	defer rows.Close()
	var out []exemplarFacts
	for rows.Next() {
		var f exemplarFacts
		if err := rows.Scan(f.dest()...); err != nil {
			return nil, fmt.Errorf("scan exemplar request: %w", err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read exemplar requests: %w", err)
	}
	return out, nil
}

// reportStore is what the report page needs of the requests table (FINAL)
// and of gpu_samples. sqlRequests is the real one; memRequests passes the
// same conformance suite.
type reportStore interface {
	// distributions returns, over the requests of scope (filterColumns =
	// value) with a finite col, the count and the quantilesExact at levels
	// of col of those started in base and of those started in win (whole
	// seconds; an empty interval selects none). A cdf without requests has
	// no values.
	distributions(ctx context.Context, col string, scope map[string]string, base, win interval, levels []float64) (b, w cdf, err error)
	// series returns, per minute of start_time, over the requests of scope
	// started in [from, to) with a finite col, oldest first and at most
	// limit minutes: quantileExact(0.99) of col, and sig over those of
	// them on entity (nil: all of them) — the mean of its finite values
	// (NaN without any), or their count for the "requests" signal. A GPU
	// entity named without pod or engine also selects the requests of the
	// tensor-parallel engines on its host (gpu = ”) whose pod its GPU
	// samples carry.
	series(ctx context.Context, col string, scope map[string]string, from, to time.Time, sig causeSignal, entity map[string]string, limit int) ([]seriesPoint, error)
}

func (s sqlRequests) distributions(ctx context.Context, col string, scope map[string]string, base, win interval, levels []float64) (cdf, cdf, error) {
	b, w := cdf{levels: levels}, cdf{levels: levels}
	scopeSQL, scopeArgs := conds(scope)
	lv := make([]string, len(levels))
	for i, l := range levels {
		lv[i] = strconv.FormatFloat(l, 'f', -1, 64)
	}
	ls := strings.Join(lv, ", ")
	in := "(start_time >= toDateTime(?) AND start_time < toDateTime(?))"
	bArgs := []any{base.Start.Unix(), base.End.Unix()}
	wArgs := []any{win.Start.Unix(), win.End.Unix()}
	sql := `SELECT countIf(` + in + `), quantilesExactIf(` + ls + `)(` + col + `, ` + in + `),
       countIf(` + in + `), quantilesExactIf(` + ls + `)(` + col + `, ` + in + `)
FROM requests FINAL
WHERE (` + in + " OR " + in + `) AND isFinite(` + col + `) AND ` + scopeSQL
	var args []any
	for _, a := range [][]any{bArgs, bArgs, wArgs, wArgs, bArgs, wArgs, scopeArgs} { // in placeholder order
		args = append(args, a...)
	}
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return b, w, fmt.Errorf("query latency distributions: %w", err)
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(&b.n, &b.values, &w.n, &w.values); err != nil {
			return b, w, fmt.Errorf("scan latency distributions: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return b, w, fmt.Errorf("read latency distributions: %w", err)
	}
	// Without rows quantilesExactIf returns zeros, not NaN.
	if b.n == 0 {
		b.values = nil
	}
	if w.n == 0 {
		w.values = nil
	}
	return b, w, nil
}

func (s sqlRequests) series(ctx context.Context, col string, scope map[string]string, from, to time.Time, sig causeSignal, entity map[string]string, limit int) ([]seriesPoint, error) {
	scopeSQL, scopeArgs := conds(scope)
	entitySQL, entityArgs := "1", []any(nil)
	if entity != nil {
		entitySQL, entityArgs = entityConds(entity)
	}
	sigCond := "isFinite(" + sig.expr + ") AND " + entitySQL
	sql := `SELECT toStartOfMinute(start_time) AS minute, quantileExact(0.99)(` + col + `) AS p99,
       ` + sigAggregate(sig, sigCond) + ` AS sig
FROM requests FINAL
WHERE start_time >= toDateTime(?) AND start_time < toDateTime(?) AND isFinite(` + col + `) AND ` + scopeSQL + `
GROUP BY minute
ORDER BY minute
LIMIT ` + strconv.Itoa(limit)
	args := append(append(append([]any{}, entityArgs...), from.Unix(), to.Unix()), scopeArgs...)
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("query p99 series: %w", err)
	}
	defer rows.Close()
	var out []seriesPoint
	for rows.Next() {
		var pt seriesPoint
		if err := rows.Scan(&pt.minute, &pt.p99, &pt.signal); err != nil {
			return nil, fmt.Errorf("scan p99 series: %w", err)
		}
		out = append(out, pt)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read p99 series: %w", err)
	}
	return out, nil
}
