package kafkaxtest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tailcause/tailcause/internal/kafkax"
)

// Cluster starts a one-broker kfake cluster with the given topics, each with
// partitions partitions, and closes it when the test ends.
func Cluster(t testing.TB, partitions int32, topics ...string) (*kfake.Cluster, []string) {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1)}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(partitions, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("start kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c, c.ListenAddrs()
}

// Consume reads topic from the beginning until it has n records or timeout
// passes, and returns what it read, failing the test when it read fewer.
func Consume(t testing.TB, brokers []string, topic string, n int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		t.Fatalf("create kafka reader: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	if len(out) < n {
		t.Fatalf("read %d records from %s, want %d", len(out), topic, n)
	}
	return out
}

// Write is one recorded WriteRecords call.
type Write struct {
	Topic   string
	Records []kafkax.Record // deep copies
}

// Producer is an in-memory producer. Set Err to make writes fail, Block to
// make them wait (until Block is closed or ctx ends). The zero value is
// ready to use and safe for concurrent use.
type Producer struct {
	mu     sync.Mutex
	writes []Write
	// Err, when set, is returned by every write (nothing is recorded).
	Err error
	// Block, when set, makes writes wait for it to close; Started receives
	// (without blocking) when a write begins waiting.
	Block   chan struct{}
	Started chan struct{}
	// Discard skips recording, for benchmarks.
	Discard bool
}

// WriteRecords records a deep copy of recs.
func (p *Producer) WriteRecords(ctx context.Context, topic string, recs []kafkax.Record) error {
	p.mu.Lock()
	block, started, err, discard := p.Block, p.Started, p.Err, p.Discard
	p.mu.Unlock()
	if block != nil {
		if started != nil {
			select {
			case started <- struct{}{}:
			default:
			}
		}
		select {
		case <-block:
		case <-ctx.Done():
			return &kafkax.Error{Op: "write", Topic: topic, Retriable: true, Err: ctx.Err()}
		}
	}
	if err != nil {
		return err
	}
	if discard {
		return nil
	}
	w := Write{Topic: topic, Records: make([]kafkax.Record, len(recs))}
	for i, r := range recs {
		w.Records[i] = kafkax.Record{Key: slices.Clone(r.Key), Value: slices.Clone(r.Value), Headers: slices.Clone(r.Headers)}
	}
	p.mu.Lock()
	p.writes = append(p.writes, w)
	p.mu.Unlock()
	return nil
}

// SetErr sets Err under the lock, for tests that change it while writes run.
func (p *Producer) SetErr(err error) {
	p.mu.Lock()
	p.Err = err
	p.mu.Unlock()
}

// Writes returns the recorded writes.
func (p *Producer) Writes() []Write {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.writes)
}

// Records returns every recorded record written to topic, in order.
func (p *Producer) Records(topic string) []kafkax.Record {
	var out []kafkax.Record
	for _, w := range p.Writes() {
		if w.Topic == topic {
			out = append(out, w.Records...)
		}
	}
	return out
}
