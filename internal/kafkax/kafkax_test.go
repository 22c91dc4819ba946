package kafkax_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/goleak"

	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/kafkax/kafkaxtest"
	"github.com/tailcause/tailcause/schemas"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newProducer(t *testing.T, brokers []string, mod func(*kafkax.Config)) *kafkax.Producer {
	t.Helper()
	cfg := kafkax.DefaultConfig()
	cfg.Brokers = brokers
	cfg.MaxAttempts = 2
	cfg.BackoffMin, cfg.BackoffMax = 10*time.Millisecond, 20*time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	p, err := kafkax.NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// The producer's behaviour on a live broker (placement, headers, order,
// size limits, close) is TestProducerConformance, on kfake and on the real
// broker; a broker going away is tested here, on kfake, which a test may
// stop.
func TestProducerBrokerDownIsRetriable(t *testing.T) {
	c, brokers := kafkaxtest.Cluster(t, 1, "t")
	p := newProducer(t, brokers, nil)
	ctx := context.Background()
	if err := p.WriteRecords(ctx, "t", []kafkax.Record{{Value: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err := p.WriteRecords(ctx, "t", []kafkax.Record{{Value: []byte("b")}})
	if err == nil {
		t.Fatal("write to a closed broker succeeded")
	}
	if !kafkax.IsRetriable(err) {
		t.Errorf("broker down: IsRetriable(%v) = false", err)
	}
	var ke *kafkax.Error
	if !errors.As(err, &ke) || ke.Topic != "t" || ke.Op != "write" {
		t.Errorf("error %#v is not a *kafkax.Error for topic t", err)
	}
}

func TestIsRetriable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("boom"), false},
		{&kafkax.Error{Op: "write", Retriable: true, Err: errors.New("x")}, true},
		{fmt.Errorf("wrapped: %w", &kafkax.Error{Op: "write", Err: kafka.NotEnoughReplicas}), false}, // *Error decides
		{kafka.NotEnoughReplicas, true},
		{kafka.LeaderNotAvailable, true},
		{kafka.TopicAuthorizationFailed, false},
		{kafka.MessageSizeTooLarge, false},
		{kafka.WriteErrors{nil, kafka.NotLeaderForPartition}, true},
		{kafka.WriteErrors{kafka.NotLeaderForPartition, kafka.InvalidTopic}, false},
		{kafka.MessageTooLargeError{}, false},
		{context.DeadlineExceeded, true},
		{io.ErrUnexpectedEOF, true},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
	} {
		if got := kafkax.IsRetriable(tc.err); got != tc.want {
			t.Errorf("IsRetriable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := kafkax.DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := kafkax.DefaultConfig()
	bad.Brokers = []string{"nohost"}
	bad.BatchRecords = 0
	bad.Compression = "brotli"
	err := bad.Validate()
	for _, want := range []string{"nohost", "batch records", "brotli"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
	if _, err := kafkax.NewProducer(bad); err == nil {
		t.Error("NewProducer accepted an invalid config")
	}
}

func TestEnsureTopics(t *testing.T) {
	declared, err := schemas.Topics()
	if err != nil {
		t.Fatal(err)
	}
	_, brokers := kafkaxtest.Cluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if _, err := kafkax.CheckTopics(ctx, brokers, kafkax.Security{}, declared, 0); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("check on an empty cluster: %v, want missing topics", err)
	}
	states, err := kafkax.EnsureTopics(ctx, brokers, kafkax.Security{}, declared, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range states {
		if st.Action != "created" || st.Partitions != declared[i].Partitions {
			t.Errorf("first run: %+v", st)
		}
	}
	states, err = kafkax.EnsureTopics(ctx, brokers, kafkax.Security{}, declared, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range states {
		if st.Action != "exists" || st.Partitions != declared[i].Partitions || st.ReplicationFactor != 1 || len(st.Problems) != 0 {
			t.Errorf("second run: %+v", st)
		}
	}
	if _, err := kafkax.CheckTopics(ctx, brokers, kafkax.Security{}, declared, 0); err != nil {
		t.Errorf("check after create: %v", err)
	}
}

func TestEnsureTopicsPartitionMismatch(t *testing.T) {
	_, brokers := kafkaxtest.Cluster(t, 2, schemas.TopicSpans)
	declared := []schemas.Topic{{Name: schemas.TopicSpans, Partitions: 6, ReplicationFactor: 1}}
	states, err := kafkax.EnsureTopics(context.Background(), brokers, kafkax.Security{}, declared, 0)
	if err == nil || !strings.Contains(err.Error(), "has 2 partitions, declared 6") {
		t.Fatalf("err = %v, want a partition mismatch", err)
	}
	if len(states) != 1 || states[0].Action != "exists" || len(states[0].Problems) != 1 {
		t.Errorf("states %+v", states)
	}
}
