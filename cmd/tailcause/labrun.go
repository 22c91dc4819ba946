package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/tailcause/tailcause/enrich"
	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/faultlab"
	"github.com/tailcause/tailcause/internal/faultlab/sink"
	"github.com/tailcause/tailcause/schemas"
)

// runLab runs one fault-lab scenario through the real pipeline: the
// simulator writes to an in-process Kafka broker exactly as the Collector's
// kafka exporter does, the enricher joins and writes to ClickHouse. It
// returns when every simulated request is in the store.
func runLab(ctx context.Context, e *env, st *chstore.Store, cfg faultlab.Config, progress io.Writer) (*faultlab.Truth, error) {
	kc, err := embeddedKafka()
	if err != nil {
		return nil, err
	}
	defer kc.Close()
	brokers := kc.ListenAddrs()
	ec := enrich.DefaultConfig()
	ec.Brokers = brokers
	ec.IdleFlush = 2 * time.Second
	ec.BatchWait = 500 * time.Millisecond
	p, err := enrich.New(ec, st, e.log)
	if err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- p.Run(rctx) }()

	ks, err := sink.NewKafka(sink.KafkaConfig{Brokers: brokers, TracesTopic: schemas.TopicSpans, MetricsTopic: schemas.TopicMetrics})
	if err != nil {
		return nil, err
	}
	var opts []faultlab.Option
	if progress != nil {
		opts = append(opts, faultlab.WithProgress(progress, time.Now, 2*time.Second))
	}
	truth, err := faultlab.Run(ctx, cfg, ks, opts...)
	ks.Close()
	if err != nil {
		return nil, fmt.Errorf("simulate %s: %w", cfg.Scenario.Name, err)
	}
	want := truth.Stats.Requests
	last, lastChange := int64(-1), time.Now()
	for {
		n := p.C.Requests.Load()
		if n >= want {
			break
		}
		if n != last {
			last, lastChange = n, time.Now()
			if progress != nil {
				fmt.Fprintf(progress, "  enriched %d/%d requests\n", n, want)
			}
		}
		if time.Since(lastChange) > 60*time.Second {
			return nil, fmt.Errorf("enrich stalled at %d of %d requests", n, want)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	// The samples group runs beside the join; give it a moment to finish.
	for prev := int64(-1); p.C.Samples.Load() != prev; {
		prev = p.C.Samples.Load()
		time.Sleep(1500 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		return nil, err
	}
	return truth, nil
}
