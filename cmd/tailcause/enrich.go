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

func enrichFlags(fs *flag.FlagSet, e *env, cfg *enrich.Config) *string {
	brokers := fs.String("kafka", orDefault(e.getenv("TAILCAUSE_KAFKA"), strings.Join(cfg.Brokers, ",")), "Kafka bootstrap brokers, comma-separated (env TAILCAUSE_KAFKA)")
	fs.StringVar(&cfg.GroupID, "group", cfg.GroupID, "consumer group of the span topic")
	fs.StringVar(&cfg.SamplesGroupID, "samples-group", cfg.SamplesGroupID, "consumer group of the metric topic")
	fs.StringVar(&cfg.Encoding, "encoding", cfg.Encoding, "record encoding: otlp_proto or otlp_json (as the Collector's kafka exporter)")
	fs.IntVar(&cfg.BatchRows, "batch-rows", cfg.BatchRows, "rows per ClickHouse insert")
	fs.DurationVar(&cfg.BatchWait, "batch-wait", cfg.BatchWait, "longest wait before a partial batch is written")
	fs.DurationVar(&cfg.Join.MaxWait, "max-wait", cfg.Join.MaxWait, "event-time wait for a host's metrics before a request is joined with what is known")
	fs.DurationVar(&cfg.IdleFlush, "idle-flush", cfg.IdleFlush, "emit pending requests after this much wall-clock silence on every input")
	return brokers
}

func cmdEnrich(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("enrich", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var sf storeFlags
	sf.register(fs, e)
	cfg := enrich.DefaultConfig()
	brokers := enrichFlags(fs, e, &cfg)
	var of obsFlags
	of.register(fs, e)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	cfg.Brokers = splitList(*brokers)
	cfg.MetricsAhead = max(cfg.MetricsAhead, cfg.Join.MaxWait+30*time.Second)
	st, err := sf.open(ctx, e, true)
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
	stopObs, err := of.start(ctx, e, reg, obs.ClickHouseCheck(st), obs.KafkaCheck(cfg.Brokers, cfg.SpansTopic, cfg.MetricsTopic))
	if err != nil {
		return err
	}
	defer stopObs()
	e.log.Info("enrich running", "kafka", cfg.Brokers, "clickhouse", sf.addr, "database", sf.database)
	return p.Run(ctx)
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
