package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tailcause/tailcause/enrich"
	"github.com/tailcause/tailcause/internal/obs"
)

// obsFlags is the self-observability listener every long-running role has:
// Prometheus /metrics, /healthz and /readyz.
type obsFlags struct{ addr string }

func (o *obsFlags) register(fs *flag.FlagSet, e *env) {
	fs.StringVar(&o.addr, "metrics-addr", orDefault(e.getenv("TAILCAUSE_METRICS_ADDR"), obs.DefaultAddr),
		"listen address of /metrics, /healthz and /readyz (empty: off; env TAILCAUSE_METRICS_ADDR)")
}

// start serves reg and the readiness checks until the returned stop.
func (o *obsFlags) start(ctx context.Context, e *env, reg *prometheus.Registry, checks ...obs.Check) (func(), error) {
	if o.addr == "" {
		return func() {}, nil
	}
	cfg := obs.DefaultConfig()
	cfg.Addr = o.addr
	s, err := obs.New(cfg, reg, checks, e.log)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	e.log.Info("observability listening", "addr", s.Addr().String())
	return func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(c)
	}, nil
}

// enrichCollectors exposes the enricher's counters and the join's state.
func enrichCollectors(p *enrich.Pipeline) []prometheus.Collector {
	return []prometheus.Collector{
		obs.NewFuncCollector("tailcause_enrich", func() []obs.Value { return obs.StructValues(&p.C) }),
		obs.NewFuncCollector("tailcause_join", func() []obs.Value {
			st := p.JoinStats()
			return obs.StructValues(&st, "Pending", "Traces", "Hosts", "EngineSeries", "GPUSeries")
		}),
	}
}
