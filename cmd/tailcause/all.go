package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/tailcause/tailcause/enrich"
	"github.com/tailcause/tailcause/ingest"
	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/obs"
	"github.com/tailcause/tailcause/lab/eval"
)

// embeddedKafka starts an in-process kfake broker with the declared topics.
func embeddedKafka() (*kfake.Cluster, error) { return eval.EmbeddedKafka() }

// pipeline is ingest + enrich in one process.
type pipeline struct {
	kafka    *kfake.Cluster // nil with an external broker
	brokers  []string
	ingest   *ingest.Server
	enrich   *enrich.Pipeline
	producer *kafkax.Producer
}

type pipelineOptions struct {
	embedded           bool
	brokers            []string
	grpcAddr, httpAddr string
	token              string
	tls                *tls.Config // the OTLP listeners'; nil: plain TCP
	enrich             enrich.Config
	reg                prometheus.Registerer
	// spans, metrics, logs override the topic names (tests use fresh ones).
	spans, metrics, logs string
}

// startPipeline starts the roles; run() serves until ctx ends.
func startPipeline(ctx context.Context, e *env, st *chstore.Store, o pipelineOptions) (*pipeline, error) {
	p := &pipeline{brokers: o.brokers}
	if o.embedded {
		c, err := embeddedKafka()
		if err != nil {
			return nil, err
		}
		p.kafka, p.brokers = c, c.ListenAddrs()
	}
	pc := kafkax.DefaultConfig()
	pc.Brokers = p.brokers
	if !o.embedded {
		pc.Security = o.enrich.Kafka
	}
	prod, err := kafkax.NewProducer(pc)
	if err != nil {
		p.close()
		return nil, err
	}
	p.producer = prod
	ic := ingest.DefaultConfig()
	ic.GRPCAddr, ic.HTTPAddr, ic.Token, ic.TLS = o.grpcAddr, o.httpAddr, o.token, o.tls
	ec := o.enrich
	ec.Brokers = p.brokers
	if o.spans != "" {
		ic.TracesTopic, ic.MetricsTopic, ic.LogsTopic = o.spans, o.metrics, o.logs
		ec.SpansTopic, ec.MetricsTopic = o.spans, o.metrics
	}
	if p.ingest, err = ingest.New(ic, prod, o.reg, e.log); err != nil {
		p.close()
		return nil, err
	}
	if err := p.ingest.Start(ctx); err != nil {
		p.close()
		return nil, err
	}
	if p.enrich, err = enrich.New(ec, st, e.log); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// run serves until ctx ends, then shuts everything down.
func (p *pipeline) run(ctx context.Context) error {
	var wg sync.WaitGroup
	var enrichErr error
	wg.Add(1)
	go func() { defer wg.Done(); enrichErr = p.enrich.Run(ctx) }()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ingest.DefaultConfig().ShutdownTimeout)
	defer cancel()
	ierr := p.ingest.Shutdown(sctx)
	wg.Wait()
	p.close()
	return errors.Join(enrichErr, ierr)
}

func (p *pipeline) close() {
	if p.producer != nil {
		p.producer.Close()
	}
	if p.kafka != nil {
		p.kafka.Close()
	}
}

func (p *pipeline) httpEndpoint() string {
	return "http://" + hostPort(p.ingest.HTTPAddr())
}

func hostPort(a net.Addr) string {
	s := a.String()
	if strings.HasPrefix(s, "[::]:") {
		return "127.0.0.1:" + strings.TrimPrefix(s, "[::]:")
	}
	if strings.HasPrefix(s, "0.0.0.0:") {
		return "127.0.0.1:" + strings.TrimPrefix(s, "0.0.0.0:")
	}
	return s
}

func cmdAll(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("all", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var sf storeFlags
	sf.register(fs, e)
	sf.registerNoMigrate(fs)
	ec := enrich.DefaultConfig()
	eo := enrichFlags(fs, e, &ec)
	embedded := fs.Bool("embedded-kafka", false, "run an in-process Kafka broker (kfake) instead of connecting to --kafka")
	grpcAddr := fs.String("grpc-addr", ":4317", "OTLP/gRPC listen address")
	httpAddr := fs.String("http-addr", ":4318", "OTLP/HTTP listen address")
	token := fs.String("token", "", "bearer token required by ingest (default env TAILCAUSE_INGEST_TOKEN; prefer the env: flags show in ps)")
	noAuth := fs.Bool("insecure-no-auth", false, "accept OTLP without a bearer token (no token may be set then): for a trusted network only")
	envToken := e.getenv("TAILCAUSE_INGEST_TOKEN") // never a flag default: defaults are printed
	tokenFile := fs.String("token-file", e.getenv("TAILCAUSE_INGEST_TOKEN_FILE"), "file holding the bearer token (env TAILCAUSE_INGEST_TOKEN_FILE)")
	var lt listenTLSFlags
	lt.register(fs, e, "the OTLP listeners (gRPC and HTTP)")
	var of obsFlags
	of.register(fs, e)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	eo.apply(&ec, &sf)
	var err error
	if *token, err = tokenFrom(*token, envToken, "TAILCAUSE_INGEST_TOKEN", *tokenFile); err != nil {
		return err
	}
	if ec.Kafka, err = eo.kafka.security(); err != nil {
		return err
	}
	if *embedded && ec.Kafka.String() != "plaintext" {
		return fmt.Errorf("%w: --embedded-kafka runs a plaintext in-process broker: drop the --kafka-tls and --kafka-sasl flags", errUsage)
	}
	listenTLS, err := lt.config()
	if err != nil {
		return err
	}
	check := ec
	if *embedded {
		check.Brokers = []string{"embedded:0"} // chosen at start
	}
	if err := errors.Join(check.Validate(), checkIngestAuth(*token, *noAuth)); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	st, err := sf.open(ctx, e, schemaMigrate)
	if err != nil {
		return err
	}
	defer st.Close()
	reg := obs.NewRegistry()
	p, err := startPipeline(ctx, e, st, pipelineOptions{
		embedded: *embedded, brokers: ec.Brokers, grpcAddr: *grpcAddr, httpAddr: *httpAddr, token: *token, tls: listenTLS, enrich: ec, reg: reg,
	})
	if err != nil {
		return err
	}
	reg.MustRegister(enrichCollectors(p.enrich)...)
	stopObs, err := of.start(ctx, e, reg, obs.ClickHouseCheck(st), obs.KafkaCheck(p.brokers, ec.Kafka, ec.SpansTopic, ec.MetricsTopic))
	if err != nil {
		p.close()
		return err
	}
	defer stopObs()
	e.log.Info("ingest + enrich running", "otlp_grpc", p.ingest.GRPCAddr(), "otlp_http", p.ingest.HTTPAddr(), "kafka", p.brokers, "kafka_security", ec.Kafka.String(), "embedded_kafka", *embedded, "clickhouse", sf.where())
	return p.run(ctx)
}
