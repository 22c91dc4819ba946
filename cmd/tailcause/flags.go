package main

// Flag registrars shared by the commands that combine roles: `all`
// registers exactly the flags of `ingest` and `enrich` through the same
// functions, so a flag, its default and its help cannot differ between
// them.

import (
	"flag"

	"github.com/tailcause/tailcause/ingest"
	"github.com/tailcause/tailcause/internal/kafkax"
)

// kafkaFlags are --kafka and the connection-security flags of every
// command that reaches the brokers (ingest, enrich, all, topics), with one
// default: kafkax.DefaultBroker.
type kafkaFlags struct {
	brokers string
	sec     kafkaSecurityFlags
}

func (k *kafkaFlags) register(fs *flag.FlagSet, e *env) {
	fs.StringVar(&k.brokers, "kafka", orDefault(e.getenv("TAILCAUSE_KAFKA"), kafkax.DefaultBroker), "Kafka bootstrap brokers, comma-separated (env TAILCAUSE_KAFKA)")
	k.sec.register(fs, e)
}

// list is --kafka split into brokers.
func (k *kafkaFlags) list() []string { return splitList(k.brokers) }

// security is what every Kafka client of the command dials with.
func (k *kafkaFlags) security() (kafkax.Security, error) { return k.sec.security() }

// ingestFlags are the OTLP receiver's flags (listeners, auth, bounds,
// topics) and its producer's compression.
type ingestFlags struct {
	token, tokenFile, envToken string
	noAuth                     bool
	tls                        listenTLSFlags
}

func (o *ingestFlags) register(fs *flag.FlagSet, e *env, cfg *ingest.Config, pcfg *kafkax.Config) {
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "OTLP/gRPC listen address (empty: off)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "OTLP/HTTP listen address (empty: off)")
	fs.StringVar(&o.token, "token", "", "bearer token clients must send (default env TAILCAUSE_INGEST_TOKEN). Prefer the env: flags show in ps")
	fs.BoolVar(&o.noAuth, "insecure-no-auth", false, "accept OTLP without a bearer token (no token may be set then): for a trusted network only")
	o.envToken = e.getenv("TAILCAUSE_INGEST_TOKEN") // never a flag default: defaults are printed
	fs.StringVar(&o.tokenFile, "token-file", e.getenv("TAILCAUSE_INGEST_TOKEN_FILE"), "file holding the bearer token (env TAILCAUSE_INGEST_TOKEN_FILE)")
	o.tls.register(fs, e, "the OTLP listeners (gRPC and HTTP)")
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
}

// resolve reads the token (flag, environment or file) and the listeners'
// TLS into cfg, and checks that OTLP is authenticated or explicitly not.
func (o *ingestFlags) resolve(cfg *ingest.Config) error {
	var err error
	if cfg.Token, err = tokenFrom(o.token, o.envToken, "TAILCAUSE_INGEST_TOKEN", o.tokenFile); err != nil {
		return err
	}
	if cfg.TLS, err = o.tls.config(); err != nil {
		return err
	}
	return nil
}
