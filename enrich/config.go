package enrich

import (
	"errors"
	"fmt"
	"time"

	"github.com/tailcause/tailcause/enrich/join"
	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/schemas"
)

// Config is the enricher's configuration.
type Config struct {
	Brokers []string
	// Kafka is how every client of the enricher (span and sample groups,
	// broadcast readers, the dead-letter writer) reaches the brokers: TLS,
	// SASL. The zero value is PLAINTEXT.
	Kafka           kafkax.Security
	GroupID         string // consumer group of the span topic (the join)
	SamplesGroupID  string // consumer group of the metric topic (raw samples to ClickHouse)
	SpansTopic      string
	MetricsTopic    string
	DeadLetterTopic string
	Encoding        string // otlp_proto (the Collector's default) or otlp_json

	Join join.Config

	BatchRows      int           // flush to ClickHouse at this many request rows; sample blocks hold at most this many
	BatchWait      time.Duration // or when the oldest buffered row is this old
	CommitInterval time.Duration // how often completed offsets are committed
	// IdleFlush: when no input arrived for this long (wall clock), every
	// pending request is emitted with what is known. It only matters at the
	// end of a stream; while data flows, event time alone decides.
	IdleFlush time.Duration
	// MetricsLookback: the broadcast metric readers start this far (in
	// record time) before the first span record fetched.
	MetricsLookback time.Duration
	// MetricsAhead: the metric readers pause when their event time runs this
	// far ahead of the span stream (bounds the join state on replays). 0
	// (the default) derives it from the join: Join.MaxWait + 30 s, resolved
	// by New, so a longer --max-wait moves it along.
	MetricsAhead time.Duration
	// RetryMax is the longest backoff between retries of a failed write.
	RetryMax time.Duration
	// DeadLetterMaxBytes is the dead-letter topic's max.message.bytes: the
	// dead-letter writer's batches are sized to it, and a dead letter that
	// would exceed it keeps only the head of its value (header
	// tailcause.truncated). Default DefaultDeadLetterMaxBytes.
	DeadLetterMaxBytes int
	// MaxEventAge and MaxEventSkew bound the event time accepted on input
	// to [now − MaxEventAge, now + MaxEventSkew] (wall clock): a request,
	// step or sample outside is dropped, counted (OutOfBounds), and its
	// record is rejected (rejected_input, reason event_time) and
	// dead-lettered. MaxEventAge 0 (the default) sets no lower bound, so
	// that replays of old topics (and the fault lab's data, dated early
	// 2026) are taken; `tailcause enrich` sets it to its --ttl, the age at
	// which ClickHouse would delete the rows at once. MaxEventSkew (default
	// 1 min) is the clock skew tolerated ahead of this host's clock.
	MaxEventAge, MaxEventSkew time.Duration
	// GiveUpAfter is how often a write that fails permanently is tried
	// before what it carries is counted, logged and skipped: a dead letter
	// the topic refuses. (Rows ClickHouse refuses for good are not retried:
	// they are isolated and dead-lettered at once.)
	GiveUpAfter int
}

// DefaultDeadLetterMaxBytes is the max.message.bytes that
// schemas/kafka/topics.json declares for tailcause.deadletter.v1 (and the
// input topics): 8 MiB.
const DefaultDeadLetterMaxBytes = 8 << 20

// DefaultConfig reads the Collector's default topics.
func DefaultConfig() Config {
	jc := join.DefaultConfig()
	return Config{
		Brokers:         kafkax.DefaultConfig().Brokers,
		GroupID:         "tailcause-enrich",
		SamplesGroupID:  "tailcause-samples",
		SpansTopic:      schemas.TopicSpans,
		MetricsTopic:    schemas.TopicMetrics,
		DeadLetterTopic: schemas.TopicDeadLetter,
		Encoding:        "otlp_proto",
		Join:            jc,
		BatchRows:       5000,
		BatchWait:       time.Second,
		CommitInterval:  time.Second,
		IdleFlush:       5 * time.Second,
		MetricsLookback: time.Hour,
		RetryMax:        5 * time.Second,

		DeadLetterMaxBytes: DefaultDeadLetterMaxBytes,
		GiveUpAfter:        3,
		MaxEventSkew:       time.Minute,
	}
}

// metricsAheadMargin is how far past the join's max wait the metric
// readers may run ahead of the spans when MetricsAhead is derived.
const metricsAheadMargin = 30 * time.Second

// withDerived fills the fields whose zero value means "derived from the
// others" (MetricsAhead).
func (c Config) withDerived() Config {
	if c.MetricsAhead == 0 {
		c.MetricsAhead = c.Join.MaxWait + metricsAheadMargin
	}
	return c
}

// Validate reports a configuration mistake.
func (c Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("enrich: no Kafka brokers"))
	}
	if c.GroupID == "" || c.SamplesGroupID == "" || c.GroupID == c.SamplesGroupID {
		errs = append(errs, errors.New("enrich: group ids must be set and differ"))
	}
	if c.SpansTopic == "" || c.MetricsTopic == "" || c.DeadLetterTopic == "" {
		errs = append(errs, errors.New("enrich: topics must be set"))
	}
	if c.Encoding != "otlp_proto" && c.Encoding != "otlp_json" {
		errs = append(errs, fmt.Errorf("enrich: encoding %q: want otlp_proto or otlp_json", c.Encoding))
	}
	if c.BatchRows < 1 || c.BatchWait <= 0 || c.CommitInterval <= 0 || c.IdleFlush <= 0 || c.RetryMax <= 0 {
		errs = append(errs, errors.New("enrich: batch rows, batch wait, commit interval, idle flush and retry max must be positive"))
	}
	if c.DeadLetterMaxBytes < 64<<10 {
		errs = append(errs, fmt.Errorf("enrich: dead-letter max bytes %d: must be at least 64 KiB", c.DeadLetterMaxBytes))
	}
	if c.MaxEventAge < 0 || c.MaxEventSkew <= 0 {
		errs = append(errs, fmt.Errorf("enrich: max event age %s must be >= 0 (0: no lower bound) and max event skew %s positive", c.MaxEventAge, c.MaxEventSkew))
	}
	if c.GiveUpAfter < 1 {
		errs = append(errs, fmt.Errorf("enrich: give up after %d tries: must be at least 1", c.GiveUpAfter))
	}
	if c.MetricsAhead != 0 && c.MetricsAhead < c.Join.MaxWait {
		errs = append(errs, fmt.Errorf("enrich: metrics ahead %s must be at least the join's max wait %s, or the join can stall", c.MetricsAhead, c.Join.MaxWait))
	}
	if err := c.Join.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
