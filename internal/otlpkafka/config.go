package otlpkafka

import (
	"errors"
	"fmt"
)

// DefaultMaxMessageBytes is the Collector kafka exporter's default
// producer::max_message_bytes.
const DefaultMaxMessageBytes = 1_000_000

// minMaxMessageBytes keeps the limit above the size of any sane resource and
// scope header, so splitting always makes progress.
const minMaxMessageBytes = 1024

// SignalHeader is the record header that names the signal ("traces",
// "metrics" or "logs"), written when Config.SignalHeader is set.
const SignalHeader = "otelcol.signal"

// Config configures an Encoder.
type Config struct {
	// MaxMessageBytes bounds the size of one record value. Larger payloads
	// are split; a single span, metric or log record above it is an error.
	MaxMessageBytes int
	// SignalHeader adds the header `otelcol.signal: traces|metrics|logs` to
	// every record. The Collector writes no header by default.
	SignalHeader bool
	// PartitionLogsByResource writes one record per ResourceLogs keyed by the
	// resource-attribute hash instead of one unkeyed record per request.
	PartitionLogsByResource bool
}

// DefaultConfig returns the Collector's defaults.
func DefaultConfig() Config {
	return Config{MaxMessageBytes: DefaultMaxMessageBytes}
}

// Validate reports whether the configuration is usable.
func (c Config) Validate() error {
	var errs []error
	if c.MaxMessageBytes < minMaxMessageBytes {
		errs = append(errs, fmt.Errorf("max message bytes %d: must be at least %d", c.MaxMessageBytes, minMaxMessageBytes))
	}
	return errors.Join(errs...)
}
