package causal

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// DiscoverScopes lists the distinct values of a scope column (e.g. model)
// among the requests of [since, until): one scope per value, for the
// scheduled mode when no scope is configured. It returns at most limit
// scopes (0: every value), the busiest (most requests, then by value: a
// flood of fake model names must not make a round unbounded), sorted by
// value; more reports that values were left out.
func DiscoverScopes(ctx context.Context, db Querier, table, column string, since, until time.Time, limit int) (scopes []map[string]string, more bool, err error) {
	ok := false
	for _, c := range scopeColumns {
		ok = ok || c == column
	}
	if !ok || !identifier(table) || limit < 0 {
		return nil, false, fmt.Errorf("discover scopes: column %q (want one of %s), table %q, limit %d", column, strings.Join(scopeColumns, ", "), table, limit)
	}
	iv := Interval{Start: since, End: until}
	q := fmt.Sprintf("SELECT toString(%s) AS v FROM %s WHERE %s AND %s GROUP BY v ORDER BY count() DESC, v", column, table, prune(iv), inInterval(iv))
	if limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", limit+1)
	}
	var vals []string
	err = QueryRows(ctx, db, "scopes", q, func(r Rows) error {
		var v string
		if err := r.Scan(&v); err != nil {
			return err
		}
		vals = append(vals, v)
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	if limit > 0 && len(vals) > limit {
		vals, more = vals[:limit], true
	}
	slices.Sort(vals)
	for _, v := range vals {
		scopes = append(scopes, map[string]string{column: v})
	}
	return scopes, more, nil
}

// ScopeLoad counts the requests of slo's scope with a finite outcome that
// started in iv (FINAL: duplicates collapsed) and returns the end up to
// which every engine of the scope has been written (the Unix epoch when
// there are none): the newest request end of the engine furthest behind,
// among the engines within IdleBehind of the scope's newest (one further
// behind is idle, not late). It is what the scheduled mode
// (causal/incident) sizes and ends its window by. The enricher writes a
// request once its own engine's and GPUs' next samples have arrived, so
// one engine's rows can run ahead of another's by a scrape interval: a
// window that ended at the newest row of any engine judged its last
// seconds on the engines that happened to be written, and paged a model
// in the live benchmark (seed 2) on a stretch that, complete, was healthy.
// One query.
func (a *Analyzer) ScopeLoad(ctx context.Context, slo SLO, iv Interval) (requests int, complete time.Time, err error) {
	sig := slo.Signal
	if sig == "" {
		sig = "e2e_latency"
	}
	y := "e2e_ms"
	if out, ok := a.dag.Outcome(sig); ok {
		y = out.Covariate()
	}
	where := scopeWhere(slo.Scope) + " AND isFinite(" + y + ") AND " + prune(iv) + " AND " + inInterval(iv)
	q := fmt.Sprintf("SELECT toFloat64(sum(tc_n)), toFloat64(arrayMin(arrayFilter(x -> x + %d >= max(tc_last), groupArray(tc_last)))) "+
		"FROM (SELECT count() AS tc_n, max(end_ns) AS tc_last FROM %s FINAL WHERE %s GROUP BY host, pod, engine)",
		IdleBehind.Nanoseconds(), a.cfg.Table, where)
	v, err := queryFloats(ctx, a.db, "window", q, 2)
	if err != nil {
		return 0, time.Time{}, err
	}
	return int(v[0]), time.Unix(0, int64(v[1])), nil
}

// IdleBehind is how far an engine's newest row may trail its scope's
// newest before ScopeLoad takes the engine for idle rather than late: the
// join's spread between engines is a scrape interval or two (engines every
// 5–15 s, the GPUs' wait 10 s).
const IdleBehind = 30 * time.Second

// Logger is the analyzer's logger (Config.Logger, or one that discards).
func (a *Analyzer) Logger() *slog.Logger { return a.log }
