package testkit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// FreshTopic creates a uniquely named topic with the given number of
// partitions (replication factor 1) on the broker at addr, waits until every
// partition has a leader, and deletes the topic on cleanup.
func FreshTopic(t testing.TB, addr string, partitions int) string {
	t.Helper()
	return FreshTopicWith(t, addr, partitions, nil)
}

// FreshTopicWith is FreshTopic with topic configs, e.g.
// {"max.message.bytes": "8388608"} as schemas/kafka/topics.json declares.
func FreshTopicWith(t testing.TB, addr string, partitions int, configs map[string]string) string {
	t.Helper()
	name := uniqueName(t, "test")
	var entries []kafka.ConfigEntry
	for k, v := range configs {
		entries = append(entries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
	}
	// An own transport, closed after use, so that goleak in the calling
	// test does not find kafka-go's pooled connections.
	transport := &kafka.Transport{}
	client := &kafka.Client{Addr: kafka.TCP(addr), Timeout: 30 * time.Second, Transport: transport}
	defer transport.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{Topic: name, NumPartitions: partitions, ReplicationFactor: 1, ConfigEntries: entries}},
	})
	if err == nil {
		err = resp.Errors[name]
	}
	if err != nil {
		t.Fatalf("create topic %s on %s: %v", name, addr, err)
	}
	t.Cleanup(func() {
		defer transport.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{name}})
		if err == nil {
			err = resp.Errors[name]
		}
		if err != nil && !errors.Is(err, kafka.UnknownTopicOrPartition) {
			t.Errorf("delete topic %s: %v", name, err)
		}
	})
	// CreateTopics returns before the partitions have leaders; a producer
	// that starts at once would see UnknownTopicOrPartition.
	if err := waitLeaders(ctx, client, name, partitions); err != nil {
		t.Fatalf("topic %s: %v", name, err)
	}
	return name
}

func waitLeaders(ctx context.Context, client *kafka.Client, topic string, partitions int) error {
	last := errors.New("no metadata yet")
	for {
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
		switch {
		case err != nil:
			last = err
		case len(md.Topics) != 1:
			last = fmt.Errorf("metadata lists %d topics", len(md.Topics))
		case md.Topics[0].Error != nil:
			last = md.Topics[0].Error
		default:
			led := 0
			for _, p := range md.Topics[0].Partitions {
				if p.Error == nil && p.Leader.Host != "" {
					led++
				}
			}
			if led == partitions {
				return nil
			}
			last = fmt.Errorf("%d of %d partitions have a leader", led, partitions)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for partition leaders: %w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
