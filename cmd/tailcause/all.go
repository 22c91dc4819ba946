package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"

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
	// ingest and producer are the receiver's and its producer's
	// configurations (as the ingest flags set them); nil: the defaults.
	// The fields above override their addresses, token, TLS and brokers.
	ingest   *ingest.Config
	producer *kafkax.Config
	reg      prometheus.Registerer
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
	ic := ingest.DefaultConfig()
	if o.ingest != nil {
		ic = *o.ingest
	}
	ic.GRPCAddr, ic.HTTPAddr, ic.Token, ic.TLS = o.grpcAddr, o.httpAddr, o.token, o.tls
	ec := o.enrich
	ec.Brokers = p.brokers
	if o.spans != "" {
		ic.TracesTopic, ic.MetricsTopic, ic.LogsTopic = o.spans, o.metrics, o.logs
	}
	// The enricher reads what ingest writes.
	ec.SpansTopic, ec.MetricsTopic = ic.TracesTopic, ic.MetricsTopic
	pc := kafkax.DefaultConfig()
	if o.producer != nil {
		pc = *o.producer
	}
	pc.Brokers = p.brokers
	pc.Security = kafkax.Security{}
	if !o.embedded {
		pc.Security = o.enrich.Kafka
	}
	prod, err := kafkax.NewProducer(ic.ProducerConfig(pc))
	if err != nil {
		p.close()
		return nil, err
	}
	p.producer = prod
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

// run serves until ctx ends or a component fails (the enricher, a
// receiver, or one of more: the observability server), then shuts
// everything down and returns the first failure.
func (p *pipeline) run(ctx context.Context, more ...component) error {
	g := newComponents(ctx)
	g.add("enrich", p.enrich.Run)
	g.add("ingest", p.ingest.Serve)
	for _, c := range more {
		g.add(c.name, c.run)
	}
	err := g.wait()
	p.close()
	return err
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
	// The flags of ingest and enrich, from the same registrars.
	var kf kafkaFlags
	kf.register(fs, e)
	ec := enrich.DefaultConfig()
	eo := enrichFlags(fs, &ec, &kf)
	ic, pc := ingest.DefaultConfig(), kafkax.DefaultConfig()
	var inf ingestFlags
	inf.register(fs, e, &ic, &pc)
	embedded := fs.Bool("embedded-kafka", false, "run an in-process Kafka broker (kfake) instead of connecting to --kafka")
	var of obsFlags
	of.register(fs, e)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if err := eo.apply(&ec, &sf); err != nil {
		return err
	}
	if err := inf.resolve(&ic); err != nil {
		return err
	}
	if *embedded && ec.Kafka.String() != "plaintext" {
		return fmt.Errorf("%w: --embedded-kafka runs a plaintext in-process broker: drop the --kafka-tls and --kafka-sasl flags", errUsage)
	}
	ec.SpansTopic, ec.MetricsTopic = ic.TracesTopic, ic.MetricsTopic
	check, pcheck := ec, pc
	if *embedded {
		check.Brokers = []string{"embedded:0"} // chosen at start
	}
	pcheck.Brokers = check.Brokers
	if err := errors.Join(check.Validate(), ic.Validate(), ic.ProducerConfig(pcheck).Validate(), checkIngestAuth(ic.Token, inf.noAuth)); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	st, err := sf.open(ctx, e, schemaMigrate)
	if err != nil {
		return err
	}
	defer st.Close()
	reg := obs.NewRegistry()
	p, err := startPipeline(ctx, e, st, pipelineOptions{
		embedded: *embedded, brokers: ec.Brokers, grpcAddr: ic.GRPCAddr, httpAddr: ic.HTTPAddr, token: ic.Token, tls: ic.TLS, enrich: ec,
		ingest: &ic, producer: &pc, reg: reg,
	})
	if err != nil {
		return err
	}
	reg.MustRegister(enrichCollectors(p.enrich)...)
	obsSrv, err := of.start(ctx, e, reg, obs.ClickHouseCheck(st), obs.KafkaCheck(p.brokers, ec.Kafka, ec.SpansTopic, ec.MetricsTopic))
	if err != nil {
		p.close()
		return err
	}
	defer obsSrv.stop()
	e.log.Info("ingest + enrich running", "otlp_grpc", p.ingest.GRPCAddr(), "otlp_http", p.ingest.HTTPAddr(), "kafka", p.brokers, "kafka_security", ec.Kafka.String(), "embedded_kafka", *embedded, "clickhouse", sf.where())
	return p.run(ctx, component{"observability server", obsSrv.run})
}
