package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/tailcause/tailcause/enrich"
	"github.com/tailcause/tailcause/internal/obs"
)

// enrichOpts are the enricher's flags that main resolves after parsing.
type enrichOpts struct {
	kafka  *kafkaFlags
	maxAge eventAgeFlag
}

// apply sets what the flags give beside the config's own fields: the
// brokers, and the replay horizon (--max-event-age, by default the
// store's --ttl: older rows ClickHouse would delete at once, so they are
// dead-lettered instead). What the config derives from its own fields
// (enrich.Config.MetricsAhead) is enrich.New's business.
func (o *enrichOpts) apply(cfg *enrich.Config, sf *storeFlags) error {
	cfg.Brokers = o.kafka.list()
	cfg.MaxEventAge = time.Duration(sf.ttl)
	if o.maxAge.set {
		cfg.MaxEventAge = o.maxAge.d
	}
	var err error
	cfg.Kafka, err = o.kafka.security()
	return err
}

// eventAgeFlag is --max-event-age: like --ttl (30d, 36h, 0 = none), and
// unset means "the --ttl".
type eventAgeFlag struct {
	d   time.Duration
	set bool
}

func (f *eventAgeFlag) String() string {
	if !f.set {
		return "the --ttl"
	}
	t := ttlFlag(f.d)
	return t.String()
}

func (f *eventAgeFlag) Set(v string) error {
	var t ttlFlag
	if err := t.Set(v); err != nil {
		return fmt.Errorf("max event age %q: want days (30d), a duration (36h) or 0 (no lower bound)", v)
	}
	f.d, f.set = time.Duration(t), true
	return nil
}

// enrichFlags registers the enricher's flags; kf is the command's --kafka
// and security flags (registered once, by the caller, also in all).
func enrichFlags(fs *flag.FlagSet, cfg *enrich.Config, kf *kafkaFlags) *enrichOpts {
	o := &enrichOpts{kafka: kf}
	fs.StringVar(&cfg.GroupID, "group", cfg.GroupID, "consumer group of the span topic")
	fs.StringVar(&cfg.SamplesGroupID, "samples-group", cfg.SamplesGroupID, "consumer group of the metric topic")
	fs.StringVar(&cfg.Encoding, "encoding", cfg.Encoding, "record encoding: otlp_proto or otlp_json (as the Collector's kafka exporter)")
	fs.IntVar(&cfg.BatchRows, "batch-rows", cfg.BatchRows, "rows per ClickHouse insert")
	fs.DurationVar(&cfg.BatchWait, "batch-wait", cfg.BatchWait, "longest wait before a partial batch is written")
	fs.DurationVar(&cfg.Join.MaxWait, "max-wait", cfg.Join.MaxWait, "event-time wait for a host's metrics before a request is joined with what is known")
	fs.DurationVar(&cfg.Join.GPUWait, "gpu-wait", cfg.Join.GPUWait, "once the metric input is caught up, event-time wait past a request's end after which it no longer waits for its GPUs' next scrape (their gauges up to its end are in; GPUs with violation counters are still waited for); 0 = wait for the scrape")
	fs.DurationVar(&cfg.IdleFlush, "idle-flush", cfg.IdleFlush, "emit pending requests after this much wall-clock silence on every input")
	fs.IntVar(&cfg.Join.MaxHosts, "join-max-hosts", cfg.Join.MaxHosts, "hosts the join tracks at most; samples of further hosts are dropped and counted (tailcause_join_dropped_samples_total)")
	fs.IntVar(&cfg.Join.MaxEntities, "join-max-entities", cfg.Join.MaxEntities, "engines and GPUs the join tracks at most, over all hosts; samples of further ones are dropped and counted")
	fs.Var(&o.maxAge, "max-event-age", "replay horizon: spans and samples older than this (event time, against the wall clock) are rejected and dead-lettered; "+
		"30d, 36h, ... or 0 for none; default the --ttl (rows older than the table's TTL would be deleted at once). Replaying older topics: raise it with the --ttl, or 0")
	fs.DurationVar(&cfg.MaxEventSkew, "max-event-skew", cfg.MaxEventSkew, "spans and samples dated more than this ahead of the wall clock are rejected and dead-lettered (clock skew tolerated)")
	return o
}

func cmdEnrich(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("enrich", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var sf storeFlags
	sf.register(fs, e)
	sf.registerNoMigrate(fs)
	cfg := enrich.DefaultConfig()
	var kf kafkaFlags
	kf.register(fs, e)
	eo := enrichFlags(fs, &cfg, &kf)
	var of obsFlags
	of.register(fs, e)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if err := eo.apply(&cfg, &sf); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	st, err := sf.open(ctx, e, schemaMigrate)
	if err != nil {
		return err
	}
	defer st.Close()
	p, err := enrich.New(cfg, st, e.log)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	reg := obs.NewRegistry()
	reg.MustRegister(enrichCollectors(p)...)
	obsSrv, err := of.start(ctx, e, reg, obs.ClickHouseCheck(st), obs.KafkaCheck(cfg.Brokers, cfg.Kafka, cfg.SpansTopic, cfg.MetricsTopic))
	if err != nil {
		return err
	}
	defer obsSrv.stop()
	e.log.Info("enrich running", "kafka", cfg.Brokers, "kafka_security", cfg.Kafka.String(), "clickhouse", sf.where(), "database", sf.database)
	g := newComponents(ctx)
	g.add("enrich", p.Run)
	g.add("observability server", obsSrv.run)
	return g.wait()
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
