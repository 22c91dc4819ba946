package query

import (
	"net/http"
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
	groups, err := s.requests.p99By(r.Context(), p99Query{keyCols: keyCols, col: col, from: tr.From, to: tr.To, f: f, limit: n + 1})
	if err != nil {
		return err
	}
	out := breakdown{By: by, Signal: col, From: rfc3339(tr.From), To: rfc3339(tr.To), Filters: f.asMap(), Groups: []breakdownGroup{}}
	for _, g := range groups {
		bg := breakdownGroup{Key: make(map[string]string, len(keyCols)), Requests: g.requests, Errors: g.errors,
			P50MS: num(g.p50), P99MS: num(g.p99), MaxMS: num(g.max)}
		for i, c := range keyCols {
			bg.Key[c] = g.key[i]
		}
		out.Groups = append(out.Groups, bg)
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
	groups, err := s.requests.minuteSeries(r.Context(), p99Query{col: col, from: tr.From, to: tr.To, f: f, limit: maxPoints})
	if err != nil {
		return nil, err
	}
	pts := []minutePoint{}
	for _, g := range groups {
		pts = append(pts, minutePoint{Minute: rfc3339(g.minute), Requests: g.requests, Errors: g.errors,
			P50MS: num(g.p50), P99MS: num(g.p99), MaxMS: num(g.max)})
	}
	return pts, nil
}
