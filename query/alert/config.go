package alert

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"
)

// Formats of a receiver's request body.
const (
	FormatGeneric = "generic" // the v1 JSON plus event, delivery_id, report_url
	FormatSlack   = "slack"   // Slack incoming-webhook blocks + text
)

// Duration is a time.Duration written as a Go duration string ("5s") in JSON.
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string such as \"5s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// Receiver is one webhook endpoint.
type Receiver struct {
	// Name identifies the receiver in the outbox; changing it makes the
	// receiver a new one.
	Name string `json:"name"`
	URL  string `json:"url"`
	// Format is FormatGeneric (default) or FormatSlack.
	Format string `json:"format,omitempty"`
	// SecretEnv names the environment variable holding the HMAC secret;
	// empty sends no X-Tailcause-Signature.
	SecretEnv string `json:"secret_env,omitempty"`
	// Timeout bounds one delivery attempt (default 10s, at most 60s).
	Timeout Duration `json:"timeout,omitempty"`
	// Events the receiver gets; empty means all.
	Events []EventKind `json:"events,omitempty"`
}

// Config is the webhook configuration (deploy/config/webhooks.example.json).
type Config struct {
	Receivers []Receiver `json:"receivers"`
	// MaxAttempts per delivery and receiver before giving up.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// InitialBackoff doubles after each failed attempt up to MaxBackoff; the
	// wait is drawn uniformly from [backoff/2, backoff) (jitter).
	InitialBackoff Duration `json:"initial_backoff,omitempty"`
	MaxBackoff     Duration `json:"max_backoff,omitempty"`
	// MaxAge: a delivery still failing this long after it was enqueued is
	// given up (recorded as failed).
	MaxAge Duration `json:"max_age,omitempty"`
	// PollInterval is how often the dispatcher scans the outbox (Enqueue
	// also wakes it).
	PollInterval Duration `json:"poll_interval,omitempty"`
	// Batch bounds the deliveries of one scan; Concurrency the requests in
	// flight.
	Batch       int `json:"batch,omitempty"`
	Concurrency int `json:"concurrency,omitempty"`
	// ClaimSettle is how long a dispatcher waits between inserting its
	// claims on a scan's deliveries and reading them back (claim.go): the
	// bound on a claim insert's time to commit that makes one dispatcher
	// of N win each attempt. Default 1s; a claim insert that takes half of
	// it is not acted on.
	ClaimSettle Duration `json:"claim_settle,omitempty"`
	// ClaimLease is how long a claim holds: after it, a dispatcher that
	// died mid-delivery no longer blocks the attempt. Default (0): long
	// enough for a whole scan (settle + ⌈batch/concurrency⌉ × the longest
	// receiver timeout + the recording of the attempts + 30s).
	ClaimLease Duration `json:"claim_lease,omitempty"`
}

// DefaultConfig has no receivers and the default delivery policy: up to 20
// attempts, backoff 1s doubling to 5m, given up after 24h.
func DefaultConfig() Config {
	return Config{
		MaxAttempts:    20,
		InitialBackoff: Duration(time.Second),
		MaxBackoff:     Duration(5 * time.Minute),
		MaxAge:         Duration(24 * time.Hour),
		PollInterval:   Duration(2 * time.Second),
		Batch:          100,
		Concurrency:    4,
		ClaimSettle:    Duration(time.Second),
	}
}

const defaultReceiverTimeout = 10 * time.Second

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxAttempts == 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	if c.InitialBackoff == 0 {
		c.InitialBackoff = d.InitialBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = d.MaxBackoff
	}
	if c.MaxAge == 0 {
		c.MaxAge = d.MaxAge
	}
	if c.PollInterval == 0 {
		c.PollInterval = d.PollInterval
	}
	if c.Batch == 0 {
		c.Batch = d.Batch
	}
	if c.Concurrency == 0 {
		c.Concurrency = d.Concurrency
	}
	if c.ClaimSettle == 0 {
		c.ClaimSettle = d.ClaimSettle
	}
	c.Receivers = append([]Receiver(nil), c.Receivers...)
	for i := range c.Receivers {
		r := &c.Receivers[i]
		if r.Format == "" {
			r.Format = FormatGeneric
		}
		if r.Timeout == 0 {
			r.Timeout = Duration(defaultReceiverTimeout)
		}
	}
	return c
}

// maxTimeout is the longest receiver timeout.
func (c Config) maxTimeout() time.Duration {
	if len(c.Receivers) == 0 {
		return defaultReceiverTimeout
	}
	var t time.Duration
	for _, r := range c.Receivers {
		if r.Timeout != 0 {
			t = max(t, time.Duration(r.Timeout))
		} else {
			t = max(t, defaultReceiverTimeout)
		}
	}
	return t
}

// minLease is the shortest lease in which one delivery can be claimed,
// sent and recorded.
func (c Config) minLease() time.Duration {
	return time.Duration(c.ClaimSettle) + c.maxTimeout() + recordTimeout
}

// lease is ClaimLease, or the default: a whole scan's deliveries in turn.
func (c Config) lease() time.Duration {
	if c.ClaimLease != 0 {
		return time.Duration(c.ClaimLease)
	}
	rounds := time.Duration((c.Batch + c.Concurrency - 1) / max(c.Concurrency, 1))
	return time.Duration(c.ClaimSettle) + rounds*c.maxTimeout() + recordTimeout + 30*time.Second
}

// Validate reports every mistake, after defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.MaxAttempts < 1 || c.MaxAttempts > 1000 {
		bad("max_attempts %d: want 1..1000", c.MaxAttempts)
	}
	if c.InitialBackoff <= 0 || c.MaxBackoff < c.InitialBackoff {
		bad("backoff %v..%v: want 0 < initial_backoff <= max_backoff", time.Duration(c.InitialBackoff), time.Duration(c.MaxBackoff))
	}
	if c.MaxAge < Duration(time.Minute) || c.MaxAge > Duration(30*24*time.Hour) {
		bad("max_age %v: want 1m..720h", time.Duration(c.MaxAge))
	}
	if c.PollInterval < Duration(10*time.Millisecond) || c.PollInterval > Duration(time.Minute) {
		bad("poll_interval %v: want 10ms..1m", time.Duration(c.PollInterval))
	}
	if c.Batch < 1 || c.Batch > 10000 {
		bad("batch %d: want 1..10000", c.Batch)
	}
	if c.Concurrency < 1 || c.Concurrency > 64 {
		bad("concurrency %d: want 1..64", c.Concurrency)
	}
	if c.ClaimSettle < Duration(10*time.Millisecond) || c.ClaimSettle > Duration(time.Minute) {
		bad("claim_settle %v: want 10ms..1m", time.Duration(c.ClaimSettle))
	}
	if c.ClaimLease != 0 && (time.Duration(c.ClaimLease) <= c.minLease() || c.ClaimLease > Duration(24*time.Hour)) {
		bad("claim_lease %v: want more than claim_settle + the longest receiver timeout + %v (%v), at most 24h", time.Duration(c.ClaimLease), recordTimeout, c.minLease())
	}
	if len(c.Receivers) > 100 {
		bad("%d receivers: at most 100", len(c.Receivers))
	}
	seen := map[string]bool{}
	for i, r := range c.Receivers {
		where := fmt.Sprintf("receiver %d (%q)", i, r.Name)
		if r.Name == "" || len(r.Name) > 64 {
			bad("%s: name is required, at most 64 characters", where)
		}
		if seen[r.Name] {
			bad("%s: duplicate name", where)
		}
		seen[r.Name] = true
		u, err := url.Parse(r.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("%s: url %q: want an absolute http(s) URL", where, r.URL)
		}
		if r.Format != FormatGeneric && r.Format != FormatSlack {
			bad("%s: format %q: want %q or %q", where, r.Format, FormatGeneric, FormatSlack)
		}
		if r.Timeout <= 0 || r.Timeout > Duration(time.Minute) {
			bad("%s: timeout %v: want 0 < timeout <= 1m", where, time.Duration(r.Timeout))
		}
		for _, e := range r.Events {
			if !e.Valid() {
				bad("%s: event %q: want opened, top_culprit_changed or resolved", where, e)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid webhook config: %w", err)
	}
	return nil
}

// maxConfigBytes bounds a config file.
const maxConfigBytes = 1 << 20

// LoadConfig reads a JSON config file strictly (unknown fields are errors),
// applies defaults and validates it.
func LoadConfig(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("open webhook config: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return Config{}, fmt.Errorf("read webhook config %s: %w", path, err)
	}
	if len(b) > maxConfigBytes {
		return Config{}, fmt.Errorf("read webhook config %s: larger than %d bytes", path, maxConfigBytes)
	}
	return ParseConfig(b)
}

// ParseConfig decodes, defaults and validates a JSON config.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("decode webhook config: %w", err)
	}
	c = c.withDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
