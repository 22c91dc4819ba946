package kafkax

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// Config configures a Producer.
type Config struct {
	// Brokers are the bootstrap addresses, host:port.
	Brokers []string
	// ClientID names this client in broker logs and quotas.
	ClientID string
	// BatchRecords bounds the records in one produce batch per partition.
	BatchRecords int
	// BatchBytes bounds the bytes of one produce batch per partition. It must
	// hold the largest record (otlpkafka's 1,000,000-byte values plus key and
	// headers) and stay within the topics' max.message.bytes.
	BatchBytes int64
	// Linger is how long a partition batch waits for more records from
	// concurrent writers before it is sent.
	Linger time.Duration
	// WriteTimeout bounds one produce request, acknowledgement included.
	WriteTimeout time.Duration
	// MetadataTimeout bounds one metadata request.
	MetadataTimeout time.Duration
	// MaxAttempts is how often a batch is tried before its error is returned.
	MaxAttempts int
	// BackoffMin and BackoffMax bound the wait between attempts.
	BackoffMin, BackoffMax time.Duration
	// Compression is none, gzip, snappy, lz4 or zstd.
	Compression string
	// Security is how the producer reaches the brokers (TLS, SASL); the
	// zero value is PLAINTEXT.
	Security Security
}

// DefaultBroker is the bootstrap address every client of the module
// dials unless told otherwise (the dev broker of deploy/dev; the IPv4
// loopback, which "localhost" may not resolve to first).
const DefaultBroker = "127.0.0.1:9092"

// DefaultConfig returns a configuration for a broker on DefaultBroker.
func DefaultConfig() Config {
	return Config{
		Brokers:         []string{DefaultBroker},
		ClientID:        "tailcause",
		BatchRecords:    1000,
		BatchBytes:      1 << 20,
		Linger:          5 * time.Millisecond,
		WriteTimeout:    10 * time.Second,
		MetadataTimeout: 10 * time.Second,
		MaxAttempts:     3,
		BackoffMin:      100 * time.Millisecond,
		BackoffMax:      time.Second,
		Compression:     "none",
	}
}

// Validate reports whether the configuration is usable.
func (c Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("brokers: at least one is required"))
	}
	for _, b := range c.Brokers {
		if strings.TrimSpace(b) == "" || !strings.Contains(b, ":") {
			errs = append(errs, fmt.Errorf("broker %q: want host:port", b))
		}
	}
	if c.BatchRecords < 1 {
		errs = append(errs, fmt.Errorf("batch records %d: must be at least 1", c.BatchRecords))
	}
	if c.BatchBytes < 1024 {
		errs = append(errs, fmt.Errorf("batch bytes %d: must be at least 1024", c.BatchBytes))
	}
	if c.Linger < 0 || c.Linger > time.Second {
		errs = append(errs, fmt.Errorf("linger %s: must be within [0, 1s]", c.Linger))
	}
	if c.WriteTimeout <= 0 || c.MetadataTimeout <= 0 {
		errs = append(errs, errors.New("write and metadata timeouts must be positive"))
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > 20 {
		errs = append(errs, fmt.Errorf("max attempts %d: must be within [1, 20]", c.MaxAttempts))
	}
	if c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin {
		errs = append(errs, fmt.Errorf("backoff [%s, %s]: want 0 < min <= max", c.BackoffMin, c.BackoffMax))
	}
	if _, err := compression(c.Compression); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func compression(name string) (kafka.Compression, error) {
	switch strings.ToLower(name) {
	case "", "none":
		return 0, nil
	case "gzip":
		return kafka.Gzip, nil
	case "snappy":
		return kafka.Snappy, nil
	case "lz4":
		return kafka.Lz4, nil
	case "zstd":
		return kafka.Zstd, nil
	}
	return 0, fmt.Errorf("compression %q: want none, gzip, snappy, lz4 or zstd", name)
}
