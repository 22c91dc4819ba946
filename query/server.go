package query

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/schemas"
)

// Rows is a result set being read: the part of clickhouse-go's
// driver.Rows the server uses.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// DB is what the server needs of ClickHouse: SQL with bound arguments, and
// a ping for readiness. ClickHouse is the real one. The incident routes
// read through incidentStore (store.go, over DB), which has an in-memory
// twin; the request routes (P99 breakdowns, drill-down, exemplars, the
// report) still send their SQL here.
type DB interface {
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	Ping(ctx context.Context) error
}

// ClickHouse is the DB over an open store, which stays owned by the
// caller.
func ClickHouse(st *chstore.Store) DB { return chDB{st} }

type chDB struct{ st *chstore.Store }

func (c chDB) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	rows, err := c.st.Conn().Query(ctx, query, args...)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return rows, nil
}

func (c chDB) Ping(ctx context.Context) error { return c.st.Ping(ctx) }

// Options carries what main injects: nil fields take defaults.
type Options struct {
	Logger *slog.Logger     // default: discard
	Now    func() time.Time // default: time.Now
	// Registerer receives the server's metrics (requests by route and
	// status, latency); nil registers nothing.
	Registerer prometheus.Registerer
	// Gatherer, when set, is served at /metrics (bearer-protected).
	Gatherer prometheus.Gatherer
}

// Server is the HTTP API and report pages. Create it with New; it is safe
// for concurrent use.
type Server struct {
	db        DB
	incidents incidentStore // over db
	requests  requestStore  // over db
	lookups   lookupStore   // over db
	reports   reportStore   // over db
	cfg       Config
	log       *slog.Logger
	now       func() time.Time
	linkKey   []byte // HMAC key of signed report links; nil without a token
	openapi   []byte
	routes    []Route
	mux       *http.ServeMux
	metrics   *serverMetrics
}

// Access says who may call a route.
type Access string

const (
	AccessOpen   Access = "open"   // no credentials (health probes)
	AccessBearer Access = "bearer" // Authorization: Bearer <token>
	// AccessBearerOrLink also accepts a signed, expiring link (exp, sig
	// query parameters): report pages are opened from chat messages in a
	// browser, which cannot send a bearer token.
	AccessBearerOrLink Access = "bearer-or-link"
)

// Route is one registered endpoint. Pattern uses net/http's syntax, which is
// also the OpenAPI path template syntax ({name} segments).
type Route struct {
	Method  string
	Pattern string
	Access  Access
	handle  func(w http.ResponseWriter, r *http.Request) error
}

// New builds a server over db.
func New(db DB, cfg Config, opts Options) (*Server, error) {
	if db == nil {
		return nil, errors.New("new query server: nil database")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{db: db, incidents: sqlIncidents{db}, requests: sqlRequests{db}, lookups: sqlRequests{db}, reports: sqlRequests{db}, cfg: cfg, log: opts.Logger, now: opts.Now, openapi: schemas.OpenAPI()}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if cfg.Token != "" {
		m := hmac.New(sha256.New, []byte(cfg.Token))
		m.Write([]byte("tailcause report link v1"))
		s.linkKey = m.Sum(nil)
	}
	m, err := newServerMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.routes = []Route{
		{"GET", "/healthz", AccessOpen, s.healthz},
		{"GET", "/readyz", AccessOpen, s.readyz},
		{"GET", "/openapi.json", AccessBearer, s.openAPI},
		{"GET", "/v1/incidents", AccessBearer, s.listIncidents},
		{"GET", "/v1/incidents/{id}", AccessBearer, s.getIncident},
		{"GET", "/v1/incidents/{id}/exemplars", AccessBearer, s.exemplars},
		{"GET", "/v1/p99/scopes", AccessBearer, s.p99Scopes},
		{"GET", "/v1/p99/entities", AccessBearer, s.p99Entities},
		{"GET", "/v1/p99/timeseries", AccessBearer, s.p99Timeseries},
		{"GET", "/v1/requests/{uid}", AccessBearer, s.drillDown},
		{"GET", "/incidents/{id}/report", AccessBearerOrLink, s.report},
		{"GET", "/incidents/{id}/plots/{plot}", AccessBearerOrLink, s.plot},
	}
	if opts.Gatherer != nil {
		h := promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)})
		s.routes = append(s.routes, Route{"GET", "/metrics", AccessBearer, func(w http.ResponseWriter, r *http.Request) error {
			h.ServeHTTP(w, r)
			return nil
		}})
	}
	s.mux = http.NewServeMux()
	for _, rt := range s.routes {
		s.mux.Handle(rt.Method+" "+rt.Pattern, s.wrap(rt))
	}
	return s, nil
}

// Routes lists the registered endpoints (the OpenAPI test checks them
// against the document).
func (s *Server) Routes() []Route { return append([]Route(nil), s.routes...) }

// Handler is the server's http.Handler: the routes, and a problem response
// for everything else.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := s.mux.Handler(r); pattern == "" {
			probe := r.Clone(r.Context())
			probe.Method = http.MethodGet
			if _, p := s.mux.Handler(probe); p != "" {
				w.Header().Set("Allow", "GET, HEAD")
				writeProblem(w, r, probMethod.new("%s is not allowed on %s", r.Method, r.URL.Path))
				return
			}
			writeProblem(w, r, probNotFound.new("no route for %s", r.URL.Path))
			return
		}
		s.mux.ServeHTTP(w, r)
	})
}

// HTTPServer wraps Handler in an http.Server with bounded headers and
// timeouts; WriteTimeout leaves room for QueryTimeout.
func (s *Server) HTTPServer(addr string) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      s.cfg.QueryTimeout + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// statusWriter records the status for metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (s *Server) wrap(rt Route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("query handler panicked", "route", rt.Pattern, "panic", fmt.Sprint(v))
				if sw.status == 0 {
					writeProblem(sw, r, probInternal.new("the server could not answer this request; see its log"))
				}
			}
			s.metrics.observe(rt.Pattern, sw.status, time.Since(start))
		}()
		if err := s.authorize(r, rt.Access); err != nil {
			writeProblem(sw, r, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.QueryTimeout)
		defer cancel()
		if err := rt.handle(sw, r.WithContext(ctx)); err != nil {
			err = s.classify(ctx, err)
			var p *Problem
			if !errors.As(err, &p) || p.Status >= 500 {
				s.log.Error("query request failed", "route", rt.Pattern, "err", err)
			}
			if sw.status == 0 {
				writeProblem(sw, r, err)
			}
		}
	})
}

// classify turns store failures into problems the client can act on.
func (s *Server) classify(ctx context.Context, err error) error {
	var p *Problem
	if errors.As(err, &p) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() == context.DeadlineExceeded {
		return errors.Join(probTimeout.new("the query ran longer than %v; narrow the time range or filters", s.cfg.QueryTimeout), err)
	}
	return err
}

// authorize checks the route's access rule. Token comparison is constant
// time over SHA-256 digests, so neither content nor length leaks.
func (s *Server) authorize(r *http.Request, a Access) error {
	if a == AccessOpen || s.cfg.Token == "" {
		return nil
	}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") && tokenEqual(strings.TrimSpace(tok), s.cfg.Token) {
			return nil
		}
		return probUnauthorized.new("the bearer token is not valid")
	}
	if a == AccessBearerOrLink && r.URL.Query().Has("sig") {
		if err := s.checkLink(r.PathValue("id"), r.URL.Query().Get("exp"), r.URL.Query().Get("sig")); err != nil {
			return err
		}
		return nil
	}
	return probUnauthorized.new("this route needs an Authorization: Bearer <token> header")
}

func tokenEqual(got, want string) bool {
	a := sha256.Sum256([]byte(got))
	b := sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz is ready when ClickHouse answers a ping within 2 seconds.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.db.Ping(ctx); err != nil {
		s.log.Warn("readiness: clickhouse unreachable", "err", err)
		return probUnavailable.new("ClickHouse is not reachable")
	}
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(s.openapi)))
	_, err := w.Write(s.openapi)
	return err
}

// writeJSON writes v with status; an encoding failure before anything was
// written becomes an internal error.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, err = w.Write(append(b, '\n'))
	return err
}

type serverMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newServerMetrics(reg prometheus.Registerer) (*serverMetrics, error) {
	m := &serverMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tailcause", Subsystem: "query", Name: "http_requests_total",
			Help: "API requests by route pattern and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tailcause", Subsystem: "query", Name: "http_request_seconds",
			Help: "API request latency by route pattern.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}, []string{"route"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.latency} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register query metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *serverMetrics) observe(route string, status int, d time.Duration) {
	if status == 0 {
		status = http.StatusOK
	}
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(route).Observe(d.Seconds())
}
