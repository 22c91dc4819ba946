package main

import (
	"context"
	"flag"
	"fmt"
	"sync"
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

// obsServer is the observability listener of one role, once listening.
type obsServer struct {
	s    *obs.Server // nil when --metrics-addr is empty
	stop func()
}

// start listens, so that a taken port fails the command before anything
// else runs; the listener then serves reg and the readiness checks as the
// role's "observability server" component (run), until the group's
// context ends or the listener fails. stop (idempotent) shuts it down on
// the paths that return before the group runs.
func (o *obsFlags) start(ctx context.Context, e *env, reg *prometheus.Registry, checks ...obs.Check) (*obsServer, error) {
	if o.addr == "" {
		return &obsServer{stop: func() {}}, nil
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
	var once sync.Once
	return &obsServer{s: s, stop: func() {
		once.Do(func() {
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = s.Shutdown(c)
		})
	}}, nil
}

// run is the listener's component: it ends when ctx does (nil) or when the
// listener fails (that error), and shuts the listener down either way.
func (o *obsServer) run(ctx context.Context) error {
	if o.s == nil {
		<-ctx.Done()
		return nil
	}
	defer o.stop()
	return o.s.Wait(ctx)
}

// enrichCollectors exposes the enricher's counters and the join's state.
// Every field's HELP text comes from enrich (CounterFields,
// JoinStatsFields), which owns the counters.
func enrichCollectors(p *enrich.Pipeline) []prometheus.Collector {
	counters, join := enrich.CounterFields(), enrich.JoinStatsFields()
	return []prometheus.Collector{
		obs.NewFuncCollector("tailcause_enrich", func() []obs.Value { return obs.StructValues(&p.C, counters) }),
		obs.NewFuncCollector("tailcause_join", func() []obs.Value {
			st := p.JoinStats()
			return obs.StructValues(&st, join)
		}),
	}
}
