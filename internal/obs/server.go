package obs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultAddr is the default listen address of the observability server
// (9464 is the port OpenTelemetry's Prometheus exporters use by default).
const DefaultAddr = ":9464"

// Config configures the observability server.
type Config struct {
	// Addr is the listen address (host:port; port 0 picks one).
	Addr string
	// CheckTimeout bounds one readiness evaluation (all checks run
	// concurrently under it).
	CheckTimeout time.Duration
	// CheckInterval is how long a readiness result is reused by later
	// probes; 0 evaluates on every probe.
	CheckInterval time.Duration
	// ReadHeaderTimeout bounds a client's request headers.
	ReadHeaderTimeout time.Duration
}

// DefaultConfig returns the defaults: DefaultAddr, 2 s check timeout, 1 s
// result reuse.
func DefaultConfig() Config {
	return Config{
		Addr:              DefaultAddr,
		CheckTimeout:      2 * time.Second,
		CheckInterval:     time.Second,
		ReadHeaderTimeout: 5 * time.Second,
	}
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("obs: addr %q: %w", c.Addr, err))
	}
	if c.CheckTimeout <= 0 {
		errs = append(errs, fmt.Errorf("obs: check timeout %s must be positive", c.CheckTimeout))
	}
	if c.CheckInterval < 0 {
		errs = append(errs, fmt.Errorf("obs: check interval %s must not be negative", c.CheckInterval))
	}
	if c.ReadHeaderTimeout <= 0 {
		errs = append(errs, fmt.Errorf("obs: read header timeout %s must be positive", c.ReadHeaderTimeout))
	}
	return errors.Join(errs...)
}

// Check is one readiness check: Run returns nil when the dependency is
// usable. Run must honour ctx's deadline.
type Check struct {
	Name string
	Run  func(ctx context.Context) error
}

// NewRegistry returns a registry with the Go runtime and process
// collectors, the usual base of a role's registry.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Server serves /metrics, /healthz and /readyz.
type Server struct {
	cfg    Config
	log    *slog.Logger
	checks []Check
	mux    *http.ServeMux
	now    func() time.Time

	mu       sync.Mutex // serialises readiness evaluations
	last     Readiness
	draining bool

	lifeMu   sync.Mutex
	srv      *http.Server
	ln       net.Listener
	done     chan struct{}
	shutdown bool
	serveErr error // why Serve returned, when it failed (guarded by lifeMu)
}

// Readiness is the outcome of one readiness evaluation.
type Readiness struct {
	At time.Time // when it was evaluated
	OK bool      // every check passed
	// Lines is what /readyz serves: one per check, "[+]name ok" or
	// "[-]name failed" (plus ": no answer within the check timeout" when
	// it timed out), sorted. A check's error is not served: it holds
	// addresses, DSNs and server messages, which are for the log.
	Lines []string
	// Errors are the failed checks' errors, "name: err", sorted: logged
	// when readiness is lost, never served.
	Errors []string
}

// New builds a server over gatherer (nil: an empty registry) and checks. A
// nil log discards.
func New(cfg Config, gatherer prometheus.Gatherer, checks []Check, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(checks))
	for _, c := range checks {
		if c.Name == "" || c.Run == nil {
			return nil, fmt.Errorf("obs: check %q needs a name and a Run func", c.Name)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("obs: check %q given twice", c.Name)
		}
		seen[c.Name] = true
	}
	if gatherer == nil {
		gatherer = prometheus.NewRegistry()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, checks: append([]Check(nil), checks...), mux: http.NewServeMux(), now: time.Now}
	s.mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	s.mux.HandleFunc("/healthz", s.healthz)
	s.mux.HandleFunc("/readyz", s.readyz)
	return s, nil
}

// Handler returns the server's routes, for tests or to mount elsewhere.
func (s *Server) Handler() http.Handler { return s.mux }

// Start listens on Config.Addr and serves in the background until
// Shutdown. ctx only bounds the start.
func (s *Server) Start(ctx context.Context) error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.srv != nil || s.shutdown {
		return errors.New("obs: server already started")
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("obs: listen on %s: %w", s.cfg.Addr, err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s.mux, ReadHeaderTimeout: s.cfg.ReadHeaderTimeout, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("obs server stopped", "addr", ln.Addr(), "err", err)
			s.lifeMu.Lock()
			s.serveErr = err
			s.lifeMu.Unlock()
		}
	}()
	return nil
}

// Wait blocks until ctx ends (nil) or the server stops serving without a
// Shutdown (its listener failed: that error). A role's run group waits on
// it, so a role whose /metrics and /readyz died stops instead of running
// unobserved.
func (s *Server) Wait(ctx context.Context) error {
	s.lifeMu.Lock()
	done := s.done
	s.lifeMu.Unlock()
	if done == nil {
		return errors.New("obs: wait on a server not started")
	}
	select {
	case <-ctx.Done():
		return nil
	case <-done:
	}
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	switch {
	case s.serveErr != nil:
		return fmt.Errorf("obs: serve on %s: %w", s.ln.Addr(), s.serveErr)
	case s.shutdown:
		return nil
	}
	return fmt.Errorf("obs: server on %s stopped serving", s.ln.Addr())
}

// Addr returns the listening address (nil before Start).
func (s *Server) Addr() net.Addr {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Shutdown turns /readyz to 503 and stops the server, waiting for open
// requests until ctx ends. It is idempotent and safe without Start.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	s.lifeMu.Lock()
	srv, done := s.srv, s.done
	s.shutdown = true
	s.lifeMu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
	}
	<-done
	if err != nil {
		return fmt.Errorf("obs: shutdown: %w", err)
	}
	return nil
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte("ok\n"))
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	res := s.Ready(r.Context())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if !res.OK {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	var b strings.Builder
	for _, l := range res.Lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if res.OK {
		b.WriteString("ready\n")
	} else {
		b.WriteString("not ready\n")
	}
	_, _ = w.Write([]byte(b.String()))
}

// Ready evaluates the checks (or reuses a result younger than
// CheckInterval) and reports whether all pass, with one line per check.
func (s *Server) Ready(ctx context.Context) Readiness {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return Readiness{At: s.now(), Lines: []string{"[-]shutdown: draining"}}
	}
	now := s.now()
	if !s.last.At.IsZero() && now.Sub(s.last.At) < s.cfg.CheckInterval {
		return s.last
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CheckTimeout)
	defer cancel()
	errs := make([]error, len(s.checks))
	var wg sync.WaitGroup
	for i, c := range s.checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = runCheck(ctx, c)
		}()
	}
	wg.Wait()
	res := Readiness{At: s.now(), OK: true}
	for i, c := range s.checks {
		switch {
		case errs[i] == nil:
			res.Lines = append(res.Lines, "[+]"+c.Name+" ok")
		case errors.Is(errs[i], errNoAnswer):
			res.OK = false
			res.Lines = append(res.Lines, "[-]"+c.Name+" failed: "+errNoAnswer.Error())
			res.Errors = append(res.Errors, c.Name+": "+errs[i].Error())
		default:
			res.OK = false
			res.Lines = append(res.Lines, "[-]"+c.Name+" failed")
			res.Errors = append(res.Errors, c.Name+": "+errs[i].Error())
		}
	}
	sort.Strings(res.Lines)
	sort.Strings(res.Errors)
	// Log transitions only: probes come every few seconds.
	switch first := s.last.At.IsZero(); {
	case !res.OK && (first || s.last.OK):
		s.log.Warn("not ready", "failed", res.Errors)
	case res.OK && !first && !s.last.OK:
		s.log.Info("ready again")
	}
	s.last = res
	return res
}

// errNoAnswer is a check that did not return within the check timeout.
var errNoAnswer = errors.New("no answer within the check timeout")

// runCheck runs c, returning when ctx ends even if c does not honour it.
func runCheck(ctx context.Context, c Check) error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("panic: %v", p)
			}
		}()
		done <- c.Run(ctx)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errNoAnswer, ctx.Err())
	}
}
