package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tailcause/tailcause/ingest"
	"github.com/tailcause/tailcause/internal/kafkax"
)

// cmdIngest runs the OTLP receiver that writes to Kafka.
func cmdIngest(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	cfg := ingest.DefaultConfig()
	pcfg := kafkax.DefaultConfig()
	brokers := fs.String("kafka", orDefault(e.getenv("TAILCAUSE_KAFKA"), strings.Join(pcfg.Brokers, ",")), "Kafka bootstrap brokers, comma-separated (env TAILCAUSE_KAFKA)")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "OTLP/gRPC listen address (empty: off)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "OTLP/HTTP listen address (empty: off)")
	token := fs.String("token", "", "bearer token clients must send (default env TAILCAUSE_INGEST_TOKEN; empty: no auth). Prefer the env: flags show in ps")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body", cfg.MaxBodyBytes, "largest request body in bytes, after decompression")
	fs.Int64Var(&cfg.MaxWireBytes, "max-wire-body", cfg.MaxWireBytes, "largest request body in bytes as sent (compressed)")
	fs.IntVar(&cfg.MaxInFlight, "max-inflight", cfg.MaxInFlight, "requests handled at once; more get 429 / RESOURCE_EXHAUSTED")
	fs.DurationVar(&cfg.WriteTimeout, "write-timeout", cfg.WriteTimeout, "longest wait for Kafka's acknowledgement of one request")
	fs.IntVar(&cfg.Encoding.MaxMessageBytes, "max-message-bytes", cfg.Encoding.MaxMessageBytes, "largest record value; bigger payloads are split (producer::max_message_bytes)")
	fs.BoolVar(&cfg.Encoding.SignalHeader, "signal-header", cfg.Encoding.SignalHeader, "add the otelcol.signal header to every record")
	fs.StringVar(&pcfg.Compression, "compression", pcfg.Compression, "Kafka compression: none, gzip, snappy, lz4, zstd")
	metricsAddr := fs.String("metrics-addr", ":9464", "Prometheus /metrics listen address (empty: off)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	cfg.Token = orDefault(*token, e.getenv("TAILCAUSE_INGEST_TOKEN"))
	pcfg.Brokers = splitList(*brokers)
	// Every record must fit one produce batch.
	pcfg.BatchBytes = max(pcfg.BatchBytes, int64(cfg.Encoding.MaxMessageBytes)+64<<10)
	if err := errors.Join(cfg.Validate(), pcfg.Validate()); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	prod, err := kafkax.NewProducer(pcfg)
	if err != nil {
		return err
	}
	defer prod.Close()
	srv, err := ingest.New(cfg, prod, reg, e.log)
	if err != nil {
		return err
	}

	stopMetrics, err := serveMetrics(ctx, e, *metricsAddr, reg)
	if err != nil {
		return err
	}
	defer stopMetrics()
	e.log.Info("ingest starting", "kafka", pcfg.Brokers, "grpc", cfg.GRPCAddr, "http", cfg.HTTPAddr, "metrics", *metricsAddr)
	if err := srv.Run(ctx); err != nil {
		return fmt.Errorf("run ingest: %w", err)
	}
	return nil
}

// serveMetrics serves reg on addr until the returned stop is called.
func serveMetrics(ctx context.Context, e *env, addr string, reg *prometheus.Registry) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error("serve metrics", "err", err)
		}
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		<-done
	}, nil
}
