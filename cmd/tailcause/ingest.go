package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/tailcause/tailcause/ingest"
	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/obs"
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
	token := fs.String("token", "", "bearer token clients must send (default env TAILCAUSE_INGEST_TOKEN). Prefer the env: flags show in ps")
	noAuth := fs.Bool("insecure-no-auth", false, "accept OTLP without a bearer token (no token may be set then): for a trusted network only")
	envToken := e.getenv("TAILCAUSE_INGEST_TOKEN") // never a flag default: defaults are printed
	tokenFile := fs.String("token-file", e.getenv("TAILCAUSE_INGEST_TOKEN_FILE"), "file holding the bearer token (env TAILCAUSE_INGEST_TOKEN_FILE)")
	var ks kafkaSecurityFlags
	ks.register(fs, e)
	var lt listenTLSFlags
	lt.register(fs, e, "the OTLP listeners (gRPC and HTTP)")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body", cfg.MaxBodyBytes, "largest request body in bytes, after decompression")
	fs.Int64Var(&cfg.MaxWireBytes, "max-wire-body", cfg.MaxWireBytes, "largest request body in bytes as sent (compressed)")
	fs.IntVar(&cfg.MaxInFlight, "max-inflight", cfg.MaxInFlight, "requests handled at once; more get 429 / RESOURCE_EXHAUSTED")
	fs.DurationVar(&cfg.WriteTimeout, "write-timeout", cfg.WriteTimeout, "longest wait for Kafka's acknowledgement of one request")
	fs.IntVar(&cfg.Encoding.MaxMessageBytes, "max-message-bytes", cfg.Encoding.MaxMessageBytes, "largest record value; bigger payloads are split (producer::max_message_bytes)")
	fs.BoolVar(&cfg.Encoding.SignalHeader, "signal-header", cfg.Encoding.SignalHeader, "add the otelcol.signal header to every record")
	fs.StringVar(&cfg.TracesTopic, "traces-topic", cfg.TracesTopic, "Kafka topic of spans (the kafka exporter's traces::topic)")
	fs.StringVar(&cfg.MetricsTopic, "metrics-topic", cfg.MetricsTopic, "Kafka topic of metric points (metrics::topic)")
	fs.StringVar(&cfg.LogsTopic, "logs-topic", cfg.LogsTopic, "Kafka topic of log records (logs::topic)")
	fs.StringVar(&pcfg.Compression, "compression", pcfg.Compression, "Kafka compression: none, gzip, snappy, lz4, zstd")
	var of obsFlags
	of.register(fs, e)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	var err error
	if cfg.Token, err = tokenFrom(*token, envToken, "TAILCAUSE_INGEST_TOKEN", *tokenFile); err != nil {
		return err
	}
	if pcfg.Security, err = ks.security(); err != nil {
		return err
	}
	if cfg.TLS, err = lt.config(); err != nil {
		return err
	}
	pcfg.Brokers = splitList(*brokers)
	// Every record must fit one produce batch.
	pcfg.BatchBytes = max(pcfg.BatchBytes, int64(cfg.Encoding.MaxMessageBytes)+64<<10)
	if err := errors.Join(cfg.Validate(), pcfg.Validate(), checkIngestAuth(cfg.Token, *noAuth)); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}

	reg := obs.NewRegistry()
	prod, err := kafkax.NewProducer(pcfg)
	if err != nil {
		return err
	}
	defer prod.Close()
	srv, err := ingest.New(cfg, prod, reg, e.log)
	if err != nil {
		return err
	}

	stopObs, err := of.start(ctx, e, reg, obs.KafkaCheck(pcfg.Brokers, pcfg.Security, cfg.TracesTopic, cfg.MetricsTopic, cfg.LogsTopic))
	if err != nil {
		return err
	}
	defer stopObs()
	e.log.Info("ingest starting", "kafka", pcfg.Brokers, "kafka_security", pcfg.Security.String(), "grpc", cfg.GRPCAddr, "http", cfg.HTTPAddr, "tls", cfg.TLS != nil, "metrics", of.addr)
	if err := srv.Run(ctx); err != nil {
		return fmt.Errorf("run ingest: %w", err)
	}
	return nil
}

// checkIngestAuth refuses to serve OTLP without a bearer token unless
// --insecure-no-auth says so (and then no token may be set: one of the two
// is a mistake).
func checkIngestAuth(token string, noAuth bool) error {
	switch {
	case token == "" && !noAuth:
		return errors.New("no bearer token: set TAILCAUSE_INGEST_TOKEN (or --token), or pass --insecure-no-auth to accept unauthenticated OTLP")
	case token != "" && noAuth:
		return errors.New("--insecure-no-auth with a bearer token set: drop one")
	}
	return nil
}
