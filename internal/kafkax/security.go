package kafkax

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/tailcause/tailcause/internal/tlsfiles"
)

// SASL mechanisms SecurityConfig accepts.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// SecurityConfig says how every Kafka client of a process reaches the
// brokers: TLS (security.protocol SSL) and SASL (SASL_SSL, or
// SASL_PLAINTEXT without TLS). The zero value is PLAINTEXT. It holds file
// names and the SASL password; Build reads the files once.
type SecurityConfig struct {
	// TLS turns TLS on. CAFile, CertFile and ServerName imply it.
	TLS bool
	// CAFile is a PEM bundle of the CAs that sign the brokers' certificates;
	// empty: the system's roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// brokers that authenticate clients by certificate (ssl.client.auth);
	// both or neither.
	CertFile, KeyFile string
	// ServerName is the name checked in the brokers' certificates; empty:
	// the host of each address dialled.
	ServerName string
	// SASLMechanism is "" (none), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	SASLMechanism string
	// SASLUsername and SASLPassword are the SASL credentials. The password
	// is never printed: String and every error leave it out.
	SASLUsername, SASLPassword string
}

// TLSEnabled reports whether the configuration asks for TLS.
func (c SecurityConfig) TLSEnabled() bool {
	return c.TLS || c.CAFile != "" || c.CertFile != "" || c.ServerName != ""
}

// Validate reports a configuration mistake without reading any file.
func (c SecurityConfig) Validate() error {
	var errs []error
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, errors.New("kafka tls: a client certificate needs both its certificate and its key file"))
	}
	switch strings.ToUpper(c.SASLMechanism) {
	case "":
		if c.SASLUsername != "" || c.SASLPassword != "" {
			errs = append(errs, errors.New("kafka sasl: a user or password is set but no mechanism (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"))
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if c.SASLUsername == "" {
			errs = append(errs, fmt.Errorf("kafka sasl %s: no user", c.SASLMechanism))
		}
		if c.SASLPassword == "" {
			errs = append(errs, fmt.Errorf("kafka sasl %s: no password", c.SASLMechanism))
		}
	default:
		errs = append(errs, fmt.Errorf("kafka sasl mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.SASLMechanism))
	}
	return errors.Join(errs...)
}

// String describes the configuration without its password.
func (c SecurityConfig) String() string {
	var parts []string
	if c.TLSEnabled() {
		s := "tls"
		if c.CertFile != "" {
			s += " with client certificate"
		}
		parts = append(parts, s)
	}
	if c.SASLMechanism != "" {
		parts = append(parts, "sasl "+strings.ToUpper(c.SASLMechanism)+" as "+c.SASLUsername)
	}
	if len(parts) == 0 {
		return "plaintext"
	}
	return strings.Join(parts, ", ")
}

// Build reads the certificate files and returns the Security every client
// is made with.
func (c SecurityConfig) Build() (Security, error) {
	if err := c.Validate(); err != nil {
		return Security{}, err
	}
	var s Security
	s.desc = c.String()
	if c.TLSEnabled() {
		tc, err := tlsfiles.ClientConfig(c.CAFile, c.CertFile, c.KeyFile, c.ServerName)
		if err != nil {
			return Security{}, fmt.Errorf("kafka %w", err)
		}
		s.TLS = tc
	}
	switch strings.ToUpper(c.SASLMechanism) {
	case SASLPlain:
		s.SASL = plain.Mechanism{Username: c.SASLUsername, Password: c.SASLPassword}
	case SASLScramSHA256, SASLScramSHA512:
		algo := scram.SHA256
		if strings.ToUpper(c.SASLMechanism) == SASLScramSHA512 {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, c.SASLUsername, c.SASLPassword)
		if err != nil {
			// The error of xdg-go/scram names the failing step (SASLprep of
			// the user or password), never their value.
			return Security{}, fmt.Errorf("kafka sasl %s: %w", c.SASLMechanism, err)
		}
		s.SASL = m
	}
	return s, nil
}

// Security is a built SecurityConfig: what every Kafka client of the
// process dials with. The zero value is PLAINTEXT without SASL. It holds
// the SASL credentials: print it only through String.
type Security struct {
	TLS  *tls.Config
	SASL sasl.Mechanism
	desc string
}

// String describes the security without credentials.
func (s Security) String() string {
	if s.desc != "" {
		return s.desc
	}
	if s.TLS == nil && s.SASL == nil {
		return "plaintext"
	}
	return "custom"
}

// GoString keeps %#v from printing the credentials.
func (s Security) GoString() string { return "kafkax.Security(" + s.String() + ")" }

// Dialer is a kafka-go Dialer for readers and partition look-ups.
func (s Security) Dialer(clientID string, timeout time.Duration) *kafka.Dialer {
	return &kafka.Dialer{
		ClientID:      clientID,
		Timeout:       timeout,
		DualStack:     true,
		TLS:           s.tlsClone(),
		SASLMechanism: s.SASL,
	}
}

// Transport is a kafka-go Transport for writers and admin clients.
func (s Security) Transport(clientID string, dialTimeout time.Duration) *kafka.Transport {
	return &kafka.Transport{
		ClientID:    clientID,
		DialTimeout: dialTimeout,
		TLS:         s.tlsClone(),
		SASL:        s.SASL,
	}
}

func (s Security) tlsClone() *tls.Config {
	if s.TLS == nil {
		return nil
	}
	return s.TLS.Clone()
}
