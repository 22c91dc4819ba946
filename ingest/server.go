package ingest

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/otlpkafka"
)

// Producer writes records to a Kafka topic and returns once Kafka has
// acknowledged all of them (acks=all), or with an error. A *kafkax.Error
// says whether the failure is retriable; any other error is treated as
// retriable, so that an unknown failure makes clients retry rather than
// drop data. WriteRecords may be called concurrently. It must not keep recs
// or their bytes after it returns, except after a ctx error (see
// kafkax.Producer.WriteRecords).
type Producer interface {
	WriteRecords(ctx context.Context, topic string, recs []kafkax.Record) error
}

// Server is the ingest role: OTLP receivers in front of a Producer.
type Server struct {
	cfg      Config
	producer Producer
	log      *slog.Logger
	m        *metrics
	topics   [numSignals]string

	tokenHash  *[sha256.Size]byte // nil: no auth
	sem        chan struct{}      // in-flight slots
	decoding   atomic.Int64       // bytes of the decode budget reserved
	encoders   sync.Pool          // *otlpkafka.Encoder
	buffers    sync.Pool          // *batchBuf
	bodies     sync.Pool          // *bytes.Buffer, HTTP request bodies
	gzips      sync.Pool          // *gzip.Reader
	httpRoutes http.Handler
	okBodies   [numSignals][2][]byte // success responses, by signal and encoding

	mu        sync.Mutex
	started   bool
	grpcSrv   *grpc.Server
	httpSrv   *http.Server
	grpcLis   net.Listener
	httpLis   net.Listener
	serveErr  chan error
	serving   sync.WaitGroup
	draining  atomic.Bool
	stopOnce  sync.Once
	stopErr   error
	stoppedCh chan struct{}
}

// New returns a Server for a validated configuration. reg receives the
// server's metrics (nil: a private registry); log may be nil.
func New(cfg Config, p Producer, reg prometheus.Registerer, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("configure ingest: %w", err)
	}
	if p == nil {
		return nil, errors.New("configure ingest: a producer is required")
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{
		cfg:       cfg,
		producer:  p,
		log:       log,
		topics:    [numSignals]string{cfg.TracesTopic, cfg.MetricsTopic, cfg.LogsTopic},
		sem:       make(chan struct{}, cfg.MaxInFlight),
		serveErr:  make(chan error, 2),
		stoppedCh: make(chan struct{}),
	}
	if cfg.Token != "" {
		h := sha256.Sum256([]byte(cfg.Token))
		s.tokenHash = &h
	}
	m, err := newMetrics(reg, s.topics)
	if err != nil {
		return nil, err
	}
	s.m = m
	if _, err := otlpkafka.NewEncoder(cfg.Encoding); err != nil {
		return nil, fmt.Errorf("configure ingest: %w", err)
	}
	s.encoders.New = func() any {
		e, _ := otlpkafka.NewEncoder(cfg.Encoding) // validated above
		return e
	}
	if s.okBodies, err = newOKBodies(); err != nil {
		return nil, err
	}
	s.httpRoutes = s.newHTTPHandler()
	return s, nil
}

// Handler returns the OTLP/HTTP handler (what HTTPAddr serves), for tests
// and for embedding in another server.
func (s *Server) Handler() http.Handler { return s.httpRoutes }

// Start listens on the configured addresses and serves in the background.
// It returns once both listeners are open, or with the error that kept one
// from opening (then nothing is left running). Start may be called once.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("start ingest: already started")
	}
	var lc net.ListenConfig
	if s.cfg.GRPCAddr != "" {
		l, err := lc.Listen(ctx, "tcp", s.cfg.GRPCAddr)
		if err != nil {
			return fmt.Errorf("start ingest: listen for otlp/grpc on %s: %w", s.cfg.GRPCAddr, err)
		}
		s.grpcLis = l
	}
	if s.cfg.HTTPAddr != "" {
		l, err := lc.Listen(ctx, "tcp", s.cfg.HTTPAddr)
		if err != nil {
			if s.grpcLis != nil {
				_ = s.grpcLis.Close()
			}
			return fmt.Errorf("start ingest: listen for otlp/http on %s: %w", s.cfg.HTTPAddr, err)
		}
		s.httpLis = l
	}
	s.started = true
	if s.grpcLis != nil {
		s.grpcSrv = s.newGRPCServer()
		s.serving.Add(1)
		go func() {
			defer s.serving.Done()
			if err := s.grpcSrv.Serve(s.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				s.serveErr <- fmt.Errorf("serve otlp/grpc: %w", err)
			}
		}()
	}
	if s.httpLis != nil {
		s.httpSrv = &http.Server{
			Handler:           s.httpRoutes,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       s.cfg.ReadTimeout,
			WriteTimeout:      s.cfg.ReadTimeout + s.cfg.WriteTimeout + 5*time.Second,
			IdleTimeout:       s.cfg.IdleTimeout,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		}
		serve := s.httpSrv.Serve
		if s.cfg.TLS != nil {
			s.httpSrv.TLSConfig = s.cfg.TLS.Clone() // ServeTLS adds h2 to its NextProtos
			serve = func(l net.Listener) error { return s.httpSrv.ServeTLS(l, "", "") }
		}
		s.serving.Add(1)
		go func() {
			defer s.serving.Done()
			if err := serve(s.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.serveErr <- fmt.Errorf("serve otlp/http: %w", err)
			}
		}()
	}
	s.log.Info("ingest listening", "grpc", addrString(s.grpcLis), "http", addrString(s.httpLis), "auth", s.tokenHash != nil, "tls", s.cfg.TLS != nil)
	return nil
}

// GRPCAddr is the address the gRPC receiver listens on (nil before Start
// or when disabled).
func (s *Server) GRPCAddr() net.Addr { return lisAddr(s.grpcLis) }

// HTTPAddr is the address the HTTP receiver listens on.
func (s *Server) HTTPAddr() net.Addr { return lisAddr(s.httpLis) }

func lisAddr(l net.Listener) net.Addr {
	if l == nil {
		return nil
	}
	return l.Addr()
}

func addrString(l net.Listener) string {
	if l == nil {
		return "off"
	}
	return l.Addr().String()
}

// Shutdown stops accepting requests and waits for the ones in flight to
// finish (their Kafka writes included) until ctx ends; then it cuts the
// remaining connections, which cancels those requests (they are not
// acknowledged). It is idempotent: later calls return the first result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.stopErr = s.shutdown(ctx)
		close(s.stoppedCh)
	})
	<-s.stoppedCh
	return s.stopErr
}

func (s *Server) shutdown(ctx context.Context) error {
	s.mu.Lock()
	started := s.started
	s.started = true // a Start after Shutdown fails
	s.mu.Unlock()
	s.draining.Store(true)
	if !started {
		return nil
	}
	var errs []error
	var wg sync.WaitGroup
	if s.grpcSrv != nil {
		wg.Go(func() {
			done := make(chan struct{})
			go func() { s.grpcSrv.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				s.grpcSrv.Stop()
				<-done
			}
		})
	}
	if s.httpSrv != nil {
		wg.Go(func() {
			if err := s.httpSrv.Shutdown(ctx); err != nil {
				_ = s.httpSrv.Close()
			}
		})
	}
	wg.Wait()
	s.serving.Wait()
	// Handlers cut off by Close or Stop notice through their contexts; wait
	// for them so nothing writes to Kafka after Shutdown returns. Taking
	// every in-flight slot is that wait.
	for range cap(s.sem) {
		s.sem <- struct{}{}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, fmt.Errorf("shut down ingest: drain cut short: %w", err))
	}
	close(s.serveErr)
	for err := range s.serveErr {
		errs = append(errs, err)
	}
	s.log.Info("ingest stopped")
	return errors.Join(errs...)
}

// Run starts the server, serves until ctx ends or a receiver fails, then
// shuts down within Config.ShutdownTimeout.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	return s.Serve(ctx)
}

// Serve is Run after Start, for a caller that started the server itself
// (to learn its addresses first): it waits until ctx ends or a receiver
// fails, then shuts down within Config.ShutdownTimeout, and returns the
// receiver's failure and the shutdown's.
func (s *Server) Serve(ctx context.Context) error {
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-s.serveErr:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	return errors.Join(serveErr, s.Shutdown(sctx))
}

// authorized checks a bearer token in constant time (over hashes, so the
// token's length does not leak either).
func (s *Server) authorized(header string) bool {
	if s.tokenHash == nil {
		return true
	}
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	h := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(h[:], s.tokenHash[:]) == 1
}

// admit takes an in-flight slot and decodeBytes of the decode budget, or
// reports overload. release must be called once, when the request is done.
func (s *Server) admit(decodeBytes int64) (release func(), rej *rejection) {
	if s.draining.Load() {
		return nil, reject(reasonShuttingDown, "server is shutting down", nil)
	}
	select {
	case s.sem <- struct{}{}:
	default:
		return nil, reject(reasonOverloaded, fmt.Sprintf("too many requests in flight (limit %d)", cap(s.sem)), nil)
	}
	unbudget, rej := s.budget(decodeBytes)
	if rej != nil {
		<-s.sem
		return nil, rej
	}
	s.m.inflight.Inc()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.m.inflight.Dec()
			unbudget()
			<-s.sem
		})
	}, nil
}

// budget reserves n bytes of the decode budget (Config.MaxDecodeBytes), or
// reports overload. release gives them back.
func (s *Server) budget(n int64) (release func(), rej *rejection) {
	if s.decoding.Add(n) > s.cfg.MaxDecodeBytes {
		s.decoding.Add(-n)
		return nil, reject(reasonOverloaded, fmt.Sprintf("too many request bytes being decoded (limit %d)", s.cfg.MaxDecodeBytes), nil)
	}
	var once sync.Once
	return func() { once.Do(func() { s.decoding.Add(-n) }) }, nil
}
