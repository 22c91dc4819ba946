package eval

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/tailcause/tailcause/enrich"
	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/lab/faultlab"
	"github.com/tailcause/tailcause/lab/faultlab/sink"
	"github.com/tailcause/tailcause/schemas"
)

// EmbeddedKafka starts an in-process kfake broker with the declared topics
// (schemas.Topics).
func EmbeddedKafka() (*kfake.Cluster, error) {
	topics, err := schemas.Topics()
	if err != nil {
		return nil, err
	}
	opts := []kfake.Opt{kfake.NumBrokers(1)}
	for _, t := range topics {
		opts = append(opts, kfake.SeedTopics(int32(t.Partitions), t.Name))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start embedded kafka: %w", err)
	}
	return c, nil
}

// RunLab runs one fault-lab configuration through the real pipeline: the
// simulator writes to an in-process Kafka broker exactly as the Collector's
// kafka exporter (and `tailcause ingest`) does, the enricher joins and
// writes to ClickHouse. It returns when every simulated request is in the
// store. progress, when set, gets the simulator's and the enricher's
// progress lines.
func RunLab(ctx context.Context, log *slog.Logger, st *chstore.Store, cfg faultlab.Config, progress io.Writer) (*faultlab.Truth, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	kc, err := EmbeddedKafka()
	if err != nil {
		return nil, err
	}
	defer kc.Close()
	brokers := kc.ListenAddrs()
	ec := enrich.DefaultConfig()
	ec.Brokers = brokers
	ec.IdleFlush = 2 * time.Second
	ec.BatchWait = 500 * time.Millisecond
	p, err := enrich.New(ec, st, log)
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
		name := "baseline"
		if cfg.Scenario != nil {
			name = cfg.Scenario.Name
		}
		return nil, fmt.Errorf("simulate %s: %w", name, err)
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
		case <-time.After(250 * time.Millisecond):
		}
	}
	// The samples group runs beside the join; give it a moment to finish.
	for prev := int64(-1); p.C.Samples.Load() != prev; {
		prev = p.C.Samples.Load()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	stop()
	if err := <-done; err != nil {
		return nil, err
	}
	return truth, nil
}

// FreshStore opens database on the server of cfg, drops whatever an earlier
// run left in it, and migrates it without a TTL on any table: the lab's data
// is dated by the run (faultlab.DefaultStart, January 2026), not by the wall
// clock, and a retention TTL would delete it as it is written.
func FreshStore(ctx context.Context, cfg chstore.Config) (*chstore.Store, error) {
	cfg.TTL = 0
	st, err := chstore.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*chstore.Store, error) {
		st.Close()
		return nil, err
	}
	names, err := tables(ctx, st)
	if err != nil {
		return fail(err)
	}
	for _, n := range names {
		if err := st.Conn().Exec(ctx, "DROP TABLE IF EXISTS `"+n+"`"); err != nil {
			return fail(fmt.Errorf("drop %s.%s: %w", cfg.Database, n, err))
		}
	}
	if _, err := st.Migrate(ctx, cfg.Logger); err != nil {
		return fail(err)
	}
	return st, nil
}

// keptRun opens the database an earlier run of case c kept (Options.Keep)
// and returns it with the run's truth: the screened truth when screening
// simulated the case (CaseFor), else simulated now, in memory. The
// database must hold exactly the requests of that truth: a database of
// another case, duration or lab version is refused rather than scored
// against the wrong truth.
func keptRun(ctx context.Context, cfg chstore.Config, c *faultlab.Case, truth *faultlab.Truth) (*chstore.Store, *faultlab.Truth, error) {
	cfg.NoCreate = true
	st, err := chstore.Open(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("reuse %s (kept by an earlier --keep run?): %w", cfg.Database, err)
	}
	if truth == nil {
		if truth, err = faultlab.Simulate(ctx, c.Config); err != nil {
			st.Close()
			return nil, nil, err
		}
	}
	var n uint64
	if err := st.Conn().QueryRow(ctx, "SELECT count() FROM requests FINAL").Scan(&n); err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("reuse %s: count its requests: %w", cfg.Database, err)
	}
	if int64(n) != truth.Stats.Requests {
		st.Close()
		return nil, nil, fmt.Errorf("reuse %s: it holds %d requests, the case simulates %d: not this case's run (another seed, --duration, --min-effect or lab version)", cfg.Database, n, truth.Stats.Requests)
	}
	return st, truth, nil
}

// tables lists the tables and views of the store's database (not the
// inner tables of materialized views: they go with their view).
func tables(ctx context.Context, st *chstore.Store) ([]string, error) {
	rows, err := st.Conn().Query(ctx, "SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("list tables of %s: %w", st.Database(), err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		if !strings.HasPrefix(n, ".inner") {
			out = append(out, n)
		}
	}
	return out, rows.Err()
}

// DropDatabase drops the store's database (best effort, for cleanup).
func DropDatabase(st *chstore.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = st.Conn().Exec(ctx, "DROP DATABASE IF EXISTS `"+st.Database()+"`")
}
