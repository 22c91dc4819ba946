package query

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Quantiles come from quantilesExact: for n values it returns the element at
// index floor(level·n) of the sorted values (the last one for level 1). It is
// exact and deterministic, and the ranges are bounded by Config.MaxRange.

// groupings of the breakdown routes: dimension → the requests columns that
// identify a group (an engine or GPU is only unique within its host).
var (
	scopeDims  = map[string][]string{"model": {"model"}, "service": {"service"}}
	entityDims = map[string][]string{"host": {"host"}, "gpu": {"host", "gpu"}, "engine": {"host", "engine"}}
)

type breakdownGroup struct {
	Key      map[string]string `json:"key"`
	Requests uint64            `json:"requests"`
	Errors   uint64            `json:"errors"`
	P50MS    num               `json:"p50_ms"`
	P99MS    num               `json:"p99_ms"`
	MaxMS    num               `json:"max_ms"`
}

type breakdown struct {
	By        string            `json:"by"`
	Signal    string            `json:"signal"`
	From      string            `json:"from"`
	To        string            `json:"to"`
	Filters   map[string]string `json:"filters"`
	Groups    []breakdownGroup  `json:"groups"`
	Truncated bool              `json:"truncated"`
}

func (s *Server) p99Scopes(w http.ResponseWriter, r *http.Request) error {
	return s.p99By(w, r, scopeDims, "model, service")
}

func (s *Server) p99Entities(w http.ResponseWriter, r *http.Request) error {
	return s.p99By(w, r, entityDims, "host, gpu, engine")
}

// p99By: GET /v1/p99/scopes and /v1/p99/entities: one row per group of the
// dimension `by` over [from, to), slowest (highest P99) first.
func (s *Server) p99By(w http.ResponseWriter, r *http.Request, dims map[string][]string, allowed string) error {
	q := r.URL.Query()
	if err := known(q, append([]string{"by", "from", "to", "signal", "limit"}, filterColumns...)...); err != nil {
		return err
	}
	by := q.Get("by")
	keyCols, ok := dims[by]
	if !ok {
		return probBadParam.new("by %q: want one of %s", by, allowed)
	}
	tr, err := requiredRange(q, s.cfg.MaxRange)
	if err != nil {
		return err
	}
	col, err := signal(q)
	if err != nil {
		return err
	}
	f, err := readFilters(q)
	if err != nil {
		return err
	}
	n, err := limit(q, s.cfg.DefaultLimit, s.cfg.MaxLimit)
	if err != nil {
		return err
	}
	keys := strings.Join(keyCols, ", ")
	sql := `SELECT ` + keys + `, count() AS requests, sum(error) AS errors,
       quantilesExact(0.5, 0.99)(` + col + `) AS qs, max(` + col + `) AS max_ms
FROM requests FINAL
WHERE start_time >= toDateTime(?) AND start_time < toDateTime(?) AND isFinite(` + col + `)` + f.sql() + `
GROUP BY ` + keys + `
ORDER BY qs[2] DESC, ` + keys + `
LIMIT ` + strconv.Itoa(n+1)
	args := append([]any{tr.From.Unix(), tr.To.Unix()}, f.vals...)
	rows, err := s.db.Query(r.Context(), sql, args...)
	if err != nil {
		return fmt.Errorf("query p99 by %s: %w", by, err)
	}
	defer rows.Close()
	out := breakdown{By: by, Signal: col, From: rfc3339(tr.From), To: rfc3339(tr.To), Filters: f.asMap(), Groups: []breakdownGroup{}}
	for rows.Next() {
		kv := make([]string, len(keyCols))
		var (
			g   breakdownGroup
			qs  []float64
			mx  float64
			dst []any
		)
		for i := range kv {
			dst = append(dst, &kv[i])
		}
		dst = append(dst, &g.Requests, &g.Errors, &qs, &mx)
		if err := rows.Scan(dst...); err != nil {
			return fmt.Errorf("scan p99 by %s: %w", by, err)
		}
		g.Key = make(map[string]string, len(keyCols))
		for i, c := range keyCols {
			g.Key[c] = kv[i]
		}
		if len(qs) == 2 {
			g.P50MS, g.P99MS = num(qs[0]), num(qs[1])
		}
		g.MaxMS = num(mx)
		out.Groups = append(out.Groups, g)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read p99 by %s: %w", by, err)
	}
	if len(out.Groups) > n {
		out.Groups, out.Truncated = out.Groups[:n], true
	}
	return writeJSON(w, http.StatusOK, out)
}

type minutePoint struct {
	Minute   string `json:"minute"`
	Requests uint64 `json:"requests"`
	Errors   uint64 `json:"errors"`
	P50MS    num    `json:"p50_ms"`
	P99MS    num    `json:"p99_ms"`
	MaxMS    num    `json:"max_ms"`
}

type timeseries struct {
	Signal  string            `json:"signal"`
	From    string            `json:"from"`
	To      string            `json:"to"`
	Filters map[string]string `json:"filters"`
	Points  []minutePoint     `json:"points"`
}

// p99Timeseries: GET /v1/p99/timeseries: per-minute buckets
// (toStartOfMinute of the request start) over [from, to); minutes without
// requests are absent. At most MaxRange/1m points.
func (s *Server) p99Timeseries(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if err := known(q, append([]string{"from", "to", "signal"}, filterColumns...)...); err != nil {
		return err
	}
	tr, err := requiredRange(q, s.cfg.MaxRange)
	if err != nil {
		return err
	}
	col, err := signal(q)
	if err != nil {
		return err
	}
	f, err := readFilters(q)
	if err != nil {
		return err
	}
	pts, err := s.minuteSeries(r, tr, col, f)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, timeseries{Signal: col, From: rfc3339(tr.From), To: rfc3339(tr.To), Filters: f.asMap(), Points: pts})
}

func (s *Server) minuteSeries(r *http.Request, tr timeRange, col string, f filter) ([]minutePoint, error) {
	maxPoints := int(s.cfg.MaxRange/time.Minute) + 2
	sql := `SELECT toStartOfMinute(start_time) AS minute, count() AS requests, sum(error) AS errors,
       quantilesExact(0.5, 0.99)(` + col + `) AS qs, max(` + col + `) AS max_ms
FROM requests FINAL
WHERE start_time >= toDateTime(?) AND start_time < toDateTime(?) AND isFinite(` + col + `)` + f.sql() + `
GROUP BY minute
ORDER BY minute
LIMIT ` + strconv.Itoa(maxPoints)
	rows, err := s.db.Query(r.Context(), sql, append([]any{tr.From.Unix(), tr.To.Unix()}, f.vals...)...)
	if err != nil {
		return nil, fmt.Errorf("query p99 per minute: %w", err)
	}
	defer rows.Close()
	pts := []minutePoint{}
	for rows.Next() {
		var (
			p  minutePoint
			m  time.Time
			qs []float64
			mx float64
		)
		if err := rows.Scan(&m, &p.Requests, &p.Errors, &qs, &mx); err != nil {
			return nil, fmt.Errorf("scan p99 per minute: %w", err)
		}
		p.Minute = rfc3339(m)
		if len(qs) == 2 {
			p.P50MS, p.P99MS = num(qs[0]), num(qs[1])
		}
		p.MaxMS = num(mx)
		pts = append(pts, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read p99 per minute: %w", err)
	}
	return pts, nil
}
