package ingest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/otlpkafka"
	"github.com/tailcause/tailcause/schemas"
)

// Config configures the ingest server.
type Config struct {
	// GRPCAddr and HTTPAddr are the listen addresses; an empty one disables
	// that receiver (at least one must be set).
	GRPCAddr string
	HTTPAddr string
	// TLS, when set, is served on both listeners (OTLP/gRPC with TLS
	// transport credentials, OTLP/HTTP as HTTPS); its ClientAuth decides
	// whether clients must present a certificate. Nil: plain TCP.
	TLS *tls.Config
	// Token, when set, is the bearer token every request must carry
	// (HTTP "Authorization: Bearer <token>", gRPC metadata "authorization").
	Token string
	// MaxBodyBytes bounds a request body after decompression (HTTP) and a
	// gRPC message.
	MaxBodyBytes int64
	// MaxWireBytes bounds an HTTP request body as received (compressed).
	MaxWireBytes int64
	// MaxInFlight bounds the requests being handled at once (and the gRPC
	// streams of one connection); more are rejected with 429 /
	// ResourceExhausted.
	MaxInFlight int
	// MaxDecodeBytes bounds the request bytes (after decompression) being
	// decoded and exported at once, across both transports: an HTTP body
	// reserves its size once read, a gRPC message MaxBodyBytes when its
	// stream is admitted (its size is not known before it is read). Past it,
	// 429 / ResourceExhausted. It must be at least MaxBodyBytes.
	MaxDecodeBytes int64
	// WriteTimeout bounds how long one request waits for Kafka's
	// acknowledgement. Keep it below the clients' export timeout (the
	// Collector's default is 5 s) so they see 503, not their own timeout.
	WriteTimeout time.Duration
	// RetryAfter is the back-off suggested with 429 and 503.
	RetryAfter time.Duration
	// ReadTimeout bounds reading one HTTP request, body included;
	// IdleTimeout bounds an idle keep-alive connection.
	ReadTimeout time.Duration
	IdleTimeout time.Duration
	// ShutdownTimeout bounds the drain in Run.
	ShutdownTimeout time.Duration
	// Topics for each signal.
	TracesTopic, MetricsTopic, LogsTopic string
	// Encoding shapes the records (message size limit, header, log keys).
	Encoding otlpkafka.Config
}

// DefaultConfig returns the standard ports and limits.
func DefaultConfig() Config {
	return Config{
		GRPCAddr:        ":4317",
		HTTPAddr:        ":4318",
		MaxBodyBytes:    16 << 20,
		MaxWireBytes:    16 << 20,
		MaxInFlight:     64,
		MaxDecodeBytes:  256 << 20,
		WriteTimeout:    4 * time.Second,
		RetryAfter:      2 * time.Second,
		ReadTimeout:     30 * time.Second,
		IdleTimeout:     2 * time.Minute,
		ShutdownTimeout: 30 * time.Second,
		TracesTopic:     schemas.TopicSpans,
		MetricsTopic:    schemas.TopicMetrics,
		LogsTopic:       schemas.TopicLogs,
		Encoding:        otlpkafka.DefaultConfig(),
	}
}

// recordOverhead is what a produce batch holds besides the largest record
// value: its key, headers and framing.
const recordOverhead = 64 << 10

// ProducerConfig returns pc with what ingest's records need of their
// producer: batches that hold the largest record (Encoding.MaxMessageBytes
// plus recordOverhead). Every command that builds ingest's producer takes
// its configuration from here, so the derivation lives in one place.
func (c Config) ProducerConfig(pc kafkax.Config) kafkax.Config {
	pc.BatchBytes = max(pc.BatchBytes, int64(c.Encoding.MaxMessageBytes)+recordOverhead)
	return pc
}

// maxBodyLimit keeps a body in a Go slice and a gRPC message size in an int32.
const maxBodyLimit = 1 << 30

// Validate reports whether the configuration is usable.
func (c Config) Validate() error {
	var errs []error
	if c.GRPCAddr == "" && c.HTTPAddr == "" {
		errs = append(errs, errors.New("grpc and http addresses: at least one is required"))
	}
	if c.MaxBodyBytes < 1024 || c.MaxBodyBytes > maxBodyLimit {
		errs = append(errs, fmt.Errorf("max body bytes %d: must be within [1 KiB, 1 GiB]", c.MaxBodyBytes))
	}
	if c.MaxWireBytes < 1024 || c.MaxWireBytes > maxBodyLimit {
		errs = append(errs, fmt.Errorf("max wire bytes %d: must be within [1 KiB, 1 GiB]", c.MaxWireBytes))
	}
	if c.MaxDecodeBytes < c.MaxBodyBytes {
		errs = append(errs, fmt.Errorf("max decode bytes %d: must be at least max body bytes %d", c.MaxDecodeBytes, c.MaxBodyBytes))
	}
	if c.MaxInFlight < 1 {
		errs = append(errs, fmt.Errorf("max in flight %d: must be at least 1", c.MaxInFlight))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"write timeout", c.WriteTimeout}, {"retry after", c.RetryAfter}, {"read timeout", c.ReadTimeout},
		{"idle timeout", c.IdleTimeout}, {"shutdown timeout", c.ShutdownTimeout},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: must be positive", d.name, d.v))
		}
	}
	if c.TracesTopic == "" || c.MetricsTopic == "" || c.LogsTopic == "" {
		errs = append(errs, errors.New("topics: traces, metrics and logs topics are required"))
	}
	if err := c.Encoding.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("encoding: %w", err))
	}
	return errors.Join(errs...)
}
