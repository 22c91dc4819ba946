package query

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// timeRange is a half-open [From, To) in whole seconds (the DateTime
// columns' resolution).
type timeRange struct{ From, To time.Time }

func parseTime(name, v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, probBadParam.new("%s %q: want an RFC 3339 timestamp such as 2025-01-02T15:04:05Z", name, v)
	}
	return t.UTC(), nil
}

// requiredRange reads from/to, both required, with to-from <= max.
func requiredRange(q url.Values, max time.Duration) (timeRange, error) {
	if q.Get("from") == "" || q.Get("to") == "" {
		return timeRange{}, probRange.new("from and to are required (RFC 3339); the longest range is %v", max)
	}
	return rangeOf(q, time.Time{}, time.Time{}, max)
}

// optionalRange reads from/to, defaulting the missing bound(s) to the span
// def ending at now.
func optionalRange(q url.Values, now time.Time, def, max time.Duration) (timeRange, error) {
	to := now.UTC().Truncate(time.Second).Add(time.Second)
	if q.Get("to") != "" {
		t, err := parseTime("to", q.Get("to"))
		if err != nil {
			return timeRange{}, err
		}
		to = t
	}
	return rangeOf(q, to.Add(-def), to, max)
}

func rangeOf(q url.Values, from, to time.Time, max time.Duration) (timeRange, error) {
	var err error
	if v := q.Get("from"); v != "" {
		if from, err = parseTime("from", v); err != nil {
			return timeRange{}, err
		}
	}
	if v := q.Get("to"); v != "" {
		if to, err = parseTime("to", v); err != nil {
			return timeRange{}, err
		}
	}
	if !from.Before(to) {
		return timeRange{}, probRange.new("from %s is not before to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	if to.Sub(from) > max {
		return timeRange{}, probRange.new("range %v is longer than the limit %v", to.Sub(from), max)
	}
	if from.Year() < 1971 || to.Year() > 2105 {
		return timeRange{}, probRange.new("from and to must lie within 1971..2105 (ClickHouse DateTime)")
	}
	// Whole seconds: round outwards so no row of the range is lost.
	from = from.Truncate(time.Second)
	if t := to.Truncate(time.Second); !t.Equal(to) {
		to = t.Add(time.Second)
	}
	return timeRange{From: from, To: to}, nil
}

// limit reads ?limit= within [1, max], default def.
func limit(q url.Values, def, max int) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, probBadParam.new("limit %q: want an integer from 1 to %d", v, max)
	}
	return n, nil
}

// maxIDLen bounds identifiers taken from the URL.
const maxIDLen = 256

// checkID accepts printable identifiers without spaces or control characters.
func checkID(name, v string) error {
	if v == "" || len(v) > maxIDLen {
		return probBadParam.new("%s: want 1 to %d characters", name, maxIDLen)
	}
	for _, r := range v {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return probBadParam.new("%s %q: only printable characters without spaces", name, v)
		}
	}
	return nil
}

// filterColumns are the request dimensions a query may filter on, by
// parameter name (the same as the requests column).
var filterColumns = []string{"model", "service", "host", "gpu", "engine", "pod"}

// filter is a conjunction of column = value conditions.
type filter struct {
	cols []string
	vals []any
}

func readFilters(q url.Values) (filter, error) {
	var f filter
	for _, c := range filterColumns {
		vs, ok := q[c]
		if !ok {
			continue
		}
		if len(vs) != 1 {
			return filter{}, probBadParam.new("%s: give it once", c)
		}
		if len(vs[0]) > maxIDLen || strings.ContainsFunc(vs[0], unicode.IsControl) {
			return filter{}, probBadParam.new("%s: at most %d printable characters", c, maxIDLen)
		}
		f.cols = append(f.cols, c)
		f.vals = append(f.vals, vs[0])
	}
	return f, nil
}

// sql renders the conditions with ? placeholders (bound by the driver).
func (f filter) sql() string {
	var b strings.Builder
	for _, c := range f.cols {
		b.WriteString(" AND " + c + " = ?")
	}
	return b.String()
}

func (f filter) asMap() map[string]string {
	m := map[string]string{}
	for i, c := range f.cols {
		m[c] = f.vals[i].(string)
	}
	return m
}

// latencySignals maps the signal parameter to its requests column.
var latencySignals = map[string]string{
	"e2e_ms": "e2e_ms", "ttft_ms": "ttft_ms", "tpot_ms": "tpot_ms",
	"queue_ms": "queue_ms", "prefill_ms": "prefill_ms", "decode_ms": "decode_ms",
}

func signal(q url.Values) (string, error) {
	v := q.Get("signal")
	if v == "" {
		return "e2e_ms", nil
	}
	col, ok := latencySignals[v]
	if !ok {
		return "", probBadParam.new("signal %q: want one of e2e_ms, ttft_ms, tpot_ms, queue_ms, prefill_ms, decode_ms", v)
	}
	return col, nil
}

// known rejects parameters the route does not define, so a typo
// (?modle=) is an error instead of a silently unfiltered answer.
func known(q url.Values, names ...string) error {
	for k := range q {
		ok := false
		for _, n := range names {
			if k == n {
				ok = true
				break
			}
		}
		if !ok {
			return probBadParam.new("unknown parameter %q", k)
		}
	}
	return nil
}

// cursor is the position after the last incident of a page.
type cursor struct {
	OpenedAt int64  `json:"t"`
	ID       string `json:"id"`
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(v string) (cursor, error) {
	var c cursor
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(b) > 1024 || json.Unmarshal(b, &c) != nil || c.ID == "" || c.OpenedAt < 0 {
		return cursor{}, probBadParam.new("cursor: not a cursor this server returned")
	}
	return c, nil
}

// num is a float64 that encodes NaN and ±Inf (unknown values) as null.
type num float64

func (n num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// nsTime converts Unix nanoseconds to time.
func nsTime(ns uint64) time.Time { return time.Unix(0, int64(ns)).UTC() }
