package kafkax

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/tailcause/tailcause/schemas"
)

// TopicState is what EnsureTopics or CheckTopics found for one topic.
type TopicState struct {
	Name string
	// Action is "created", "exists" or "missing" (CheckTopics only).
	Action string
	// Partitions and ReplicationFactor are the topic's, as the cluster
	// reports them (as requested, for a topic just created).
	Partitions        int
	ReplicationFactor int
	// Problems lists differences from the declaration. A partition count
	// that differs is also an error: it changes which partition a key maps
	// to, so it is never "fixed" automatically.
	Problems []string
}

// adminTimeout bounds each admin request.
const adminTimeout = 15 * time.Second

// EnsureTopics creates the topics that do not exist, with the declared
// partitions and configs and the declared replication factor (or
// replicationOverride when it is > 0), and validates the ones that do. It
// returns an error naming every topic whose partition count differs from
// the declaration.
func EnsureTopics(ctx context.Context, brokers []string, sec Security, topics []schemas.Topic, replicationOverride int) ([]TopicState, error) {
	return syncTopics(ctx, brokers, sec, topics, replicationOverride, true)
}

// CheckTopics validates the declared topics without changing anything; a
// missing topic is an error.
func CheckTopics(ctx context.Context, brokers []string, sec Security, topics []schemas.Topic, replicationOverride int) ([]TopicState, error) {
	return syncTopics(ctx, brokers, sec, topics, replicationOverride, false)
}

func syncTopics(ctx context.Context, brokers []string, sec Security, topics []schemas.Topic, replicationOverride int, create bool) ([]TopicState, error) {
	if len(brokers) == 0 {
		return nil, errors.New("sync topics: no brokers given")
	}
	if replicationOverride < 0 {
		return nil, fmt.Errorf("sync topics: replication %d: must be >= 0", replicationOverride)
	}
	t := sec.Transport("tailcause-topics", adminTimeout)
	defer t.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: adminTimeout, Transport: t}

	names := make([]string, len(topics))
	for i, tp := range topics {
		names[i] = tp.Name
	}
	meta, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
	if err != nil {
		return nil, &Error{Op: "read topic metadata", Retriable: classify(err), Err: err}
	}
	found := make(map[string]kafka.Topic, len(meta.Topics))
	for _, tp := range meta.Topics {
		found[tp.Name] = tp
	}

	states := make([]TopicState, len(topics))
	var toCreate []kafka.TopicConfig
	var errs []error
	for i, want := range topics {
		rf := want.ReplicationFactor
		if replicationOverride > 0 {
			rf = replicationOverride
		}
		st := TopicState{Name: want.Name}
		got, ok := found[want.Name]
		switch {
		case ok && got.Error == nil:
			st.Action = "exists"
			st.Partitions = len(got.Partitions)
			if len(got.Partitions) > 0 {
				st.ReplicationFactor = len(got.Partitions[0].Replicas)
			}
			if st.Partitions != want.Partitions {
				p := fmt.Sprintf("has %d partitions, declared %d", st.Partitions, want.Partitions)
				st.Problems = append(st.Problems, p)
				errs = append(errs, fmt.Errorf("topic %s %s", want.Name, p))
			}
			if st.ReplicationFactor != rf {
				st.Problems = append(st.Problems, fmt.Sprintf("has replication factor %d, want %d", st.ReplicationFactor, rf))
			}
		case ok && !errors.Is(got.Error, kafka.UnknownTopicOrPartition):
			return nil, &Error{Op: "read topic metadata", Topic: want.Name, Retriable: classify(got.Error), Err: got.Error}
		case create:
			st.Action = "created"
			st.Partitions, st.ReplicationFactor = want.Partitions, rf
			toCreate = append(toCreate, topicConfig(want, rf))
		default:
			st.Action = "missing"
			errs = append(errs, fmt.Errorf("topic %s does not exist", want.Name))
		}
		states[i] = st
	}

	if len(toCreate) > 0 {
		res, err := c.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: toCreate})
		if err != nil {
			return states, &Error{Op: "create topics", Retriable: classify(err), Err: err}
		}
		for _, tc := range toCreate {
			if err := res.Errors[tc.Topic]; err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
				errs = append(errs, &Error{Op: "create topic", Topic: tc.Topic, Retriable: classify(err), Err: err})
			}
		}
	}
	if len(errs) > 0 {
		return states, fmt.Errorf("sync topics: %w", errors.Join(errs...))
	}
	return states, nil
}

func topicConfig(t schemas.Topic, rf int) kafka.TopicConfig {
	keys := make([]string, 0, len(t.Configs))
	for k := range t.Configs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	entries := make([]kafka.ConfigEntry, 0, len(keys))
	for _, k := range keys {
		entries = append(entries, kafka.ConfigEntry{ConfigName: k, ConfigValue: t.Configs[k]})
	}
	return kafka.TopicConfig{
		Topic:             t.Name,
		NumPartitions:     t.Partitions,
		ReplicationFactor: rf,
		ConfigEntries:     entries,
	}
}
