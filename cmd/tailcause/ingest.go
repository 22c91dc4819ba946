package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

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
	var kf kafkaFlags
	kf.register(fs, e)
	var inf ingestFlags
	inf.register(fs, e, &cfg, &pcfg)
	var of obsFlags
	of.register(fs, e)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if err := inf.resolve(&cfg); err != nil {
		return err
	}
	var err error
	if pcfg.Security, err = kf.security(); err != nil {
		return err
	}
	pcfg.Brokers = kf.list()
	pcfg = cfg.ProducerConfig(pcfg)
	if err := errors.Join(cfg.Validate(), pcfg.Validate(), checkIngestAuth(cfg.Token, inf.noAuth)); err != nil {
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

	obsSrv, err := of.start(ctx, e, reg, obs.KafkaCheck(pcfg.Brokers, pcfg.Security, cfg.TracesTopic, cfg.MetricsTopic, cfg.LogsTopic))
	if err != nil {
		return err
	}
	defer obsSrv.stop()
	e.log.Info("ingest starting", "kafka", pcfg.Brokers, "kafka_security", pcfg.Security.String(), "grpc", cfg.GRPCAddr, "http", cfg.HTTPAddr, "tls", cfg.TLS != nil, "metrics", of.addr)
	g := newComponents(ctx)
	g.add("run ingest", srv.Run)
	g.add("observability server", obsSrv.run)
	return g.wait()
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
