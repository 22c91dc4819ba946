package obs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/tailcause/tailcause/internal/kafkax"
)

// Pinger is what ClickHouseCheck needs: *chstore.Store and clickhouse-go's
// driver.Conn have it.
type Pinger interface {
	Ping(ctx context.Context) error
}

// ClickHouseCheck is ready when p answers a ping.
func ClickHouseCheck(p Pinger) Check {
	return Check{Name: "clickhouse", Run: func(ctx context.Context) error {
		if err := p.Ping(ctx); err != nil {
			return fmt.Errorf("ping: %w", err)
		}
		return nil
	}}
}

// KafkaCheck is ready when one of brokers answers a metadata request that
// lists at least one broker and, for each of topics, the topic with every
// partition led. Each run dials anew and closes its connections, so an
// idle role holds no Kafka connection for its probes. sec is how the role's
// own clients reach the brokers (TLS, SASL).
func KafkaCheck(brokers []string, sec kafkax.Security, topics ...string) Check {
	brokers = append([]string(nil), brokers...)
	topics = append([]string(nil), topics...)
	return Check{Name: "kafka", Run: func(ctx context.Context) error {
		if len(brokers) == 0 {
			return errors.New("no brokers configured")
		}
		transport := sec.Transport("tailcause-readyz", 5*time.Second)
		transport.MetadataTTL = time.Second
		defer transport.CloseIdleConnections()
		client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: transport}
		// With no topics named, kafka-go asks for every topic: small on
		// the clusters tailcause runs with.
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
		if err != nil {
			return fmt.Errorf("metadata from %v: %w", brokers, err)
		}
		if len(md.Brokers) == 0 {
			return fmt.Errorf("metadata from %v lists no broker", brokers)
		}
		for _, want := range topics {
			if err := topicLed(md, want); err != nil {
				return err
			}
		}
		return nil
	}}
}

func topicLed(md *kafka.MetadataResponse, name string) error {
	for _, t := range md.Topics {
		if t.Name != name {
			continue
		}
		if t.Error != nil {
			return fmt.Errorf("topic %s: %w", name, t.Error)
		}
		if len(t.Partitions) == 0 {
			return fmt.Errorf("topic %s has no partitions", name)
		}
		for _, p := range t.Partitions {
			if p.Error != nil {
				return fmt.Errorf("topic %s partition %d: %w", name, p.ID, p.Error)
			}
			if p.Leader.Host == "" {
				return fmt.Errorf("topic %s partition %d has no leader", name, p.ID)
			}
		}
		return nil
	}
	return fmt.Errorf("topic %s does not exist", name)
}
