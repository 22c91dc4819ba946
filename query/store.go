package query

import (
	"context"
	"fmt"
	"strconv"
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
