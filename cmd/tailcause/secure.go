package main

// The connection-security flags every subcommand that talks to Kafka shares
// (TLS, SASL), the listeners' TLS flags, and how secrets are read: from the
// environment or a file, never from a flag default (defaults are printed)
// and never echoed in an error.

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/tlsfiles"
)

// kafkaSecurityFlags are --kafka-tls* and --kafka-sasl-*.
type kafkaSecurityFlags struct {
	cfg          kafkax.SecurityConfig
	passwordFile string
	envPassword  string
}

func (k *kafkaSecurityFlags) register(fs *flag.FlagSet, e *env) {
	fs.BoolVar(&k.cfg.TLS, "kafka-tls", e.getenv("TAILCAUSE_KAFKA_TLS") == "true", "connect to the Kafka brokers over TLS (implied by --kafka-tls-ca, --kafka-tls-cert, --kafka-tls-server-name; env TAILCAUSE_KAFKA_TLS=true)")
	fs.StringVar(&k.cfg.CAFile, "kafka-tls-ca", e.getenv("TAILCAUSE_KAFKA_TLS_CA"), "PEM file of the CAs that sign the brokers' certificates (default: the system's roots; env TAILCAUSE_KAFKA_TLS_CA)")
	fs.StringVar(&k.cfg.CertFile, "kafka-tls-cert", e.getenv("TAILCAUSE_KAFKA_TLS_CERT"), "PEM client certificate, for brokers that require one (with --kafka-tls-key; env TAILCAUSE_KAFKA_TLS_CERT)")
	fs.StringVar(&k.cfg.KeyFile, "kafka-tls-key", e.getenv("TAILCAUSE_KAFKA_TLS_KEY"), "PEM key of --kafka-tls-cert (env TAILCAUSE_KAFKA_TLS_KEY)")
	fs.StringVar(&k.cfg.ServerName, "kafka-tls-server-name", e.getenv("TAILCAUSE_KAFKA_TLS_SERVER_NAME"), "name to check in the brokers' certificates (default: the host dialled; env TAILCAUSE_KAFKA_TLS_SERVER_NAME)")
	fs.StringVar(&k.cfg.SASLMechanism, "kafka-sasl-mechanism", e.getenv("TAILCAUSE_KAFKA_SASL_MECHANISM"), "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (default none; env TAILCAUSE_KAFKA_SASL_MECHANISM)")
	fs.StringVar(&k.cfg.SASLUsername, "kafka-sasl-user", e.getenv("TAILCAUSE_KAFKA_SASL_USER"), "SASL user (env TAILCAUSE_KAFKA_SASL_USER)")
	fs.StringVar(&k.passwordFile, "kafka-sasl-password-file", e.getenv("TAILCAUSE_KAFKA_SASL_PASSWORD_FILE"), "file holding the SASL password (env TAILCAUSE_KAFKA_SASL_PASSWORD_FILE; or the password itself in TAILCAUSE_KAFKA_SASL_PASSWORD)")
	k.envPassword = e.getenv("TAILCAUSE_KAFKA_SASL_PASSWORD") // never a flag: flags show in ps and defaults are printed
}

// security reads the password and the certificate files: what every Kafka
// client of the command dials with. A mistake is errUsage.
func (k *kafkaSecurityFlags) security() (kafkax.Security, error) {
	c := k.cfg
	pw, err := readSecret("Kafka SASL password", k.envPassword, "TAILCAUSE_KAFKA_SASL_PASSWORD", k.passwordFile, "--kafka-sasl-password-file")
	if err != nil {
		return kafkax.Security{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	c.SASLPassword = pw
	sec, err := c.Build()
	if err != nil {
		return kafkax.Security{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	return sec, nil
}

// readSecret is a secret given either in the environment variable envName
// (value envVal) or in a file (flagName); both is a mistake. A file's
// trailing newline is dropped. Errors never contain the secret.
func readSecret(what, envVal, envName, file, flagName string) (string, error) {
	switch {
	case envVal != "" && file != "":
		return "", fmt.Errorf("%s: both %s and %s are set: drop one", what, envName, flagName)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the path is named below, once
			}
			return "", fmt.Errorf("%s: read %s %s: %v", what, flagName, file, err)
		}
		s := strings.TrimRight(string(b), "\r\n")
		if s == "" {
			return "", fmt.Errorf("%s: %s %s is empty", what, flagName, file)
		}
		return s, nil
	}
	return envVal, nil
}

// listenTLSFlags are --tls-cert, --tls-key and --tls-client-ca of a role
// that serves HTTP or gRPC.
type listenTLSFlags struct{ cert, key, clientCA string }

func (l *listenTLSFlags) register(fs *flag.FlagSet, e *env, what string) {
	fs.StringVar(&l.cert, "tls-cert", e.getenv("TAILCAUSE_TLS_CERT"), "PEM certificate (chain) of "+what+": serve TLS (with --tls-key; env TAILCAUSE_TLS_CERT)")
	fs.StringVar(&l.key, "tls-key", e.getenv("TAILCAUSE_TLS_KEY"), "PEM key of --tls-cert (env TAILCAUSE_TLS_KEY)")
	fs.StringVar(&l.clientCA, "tls-client-ca", e.getenv("TAILCAUSE_TLS_CLIENT_CA"), "PEM CAs of client certificates: require one signed by them (mutual TLS; env TAILCAUSE_TLS_CLIENT_CA)")
}

// config is nil without --tls-cert/--tls-key (plain TCP).
func (l *listenTLSFlags) config() (*tls.Config, error) {
	if l.cert == "" && l.key == "" {
		if l.clientCA != "" {
			return nil, fmt.Errorf("%w: --tls-client-ca needs --tls-cert and --tls-key", errUsage)
		}
		return nil, nil
	}
	tc, err := tlsfiles.ServerConfig(l.cert, l.key, l.clientCA)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	return tc, nil
}

// chSecurityFlags are the ClickHouse flags beyond --clickhouse: a DSN, TLS
// files and the password from a file. They are part of storeFlags.
type chSecurityFlags struct {
	dsn, passwordFile               string
	tls                             bool
	caFile, certFile, keyFile, name string

	loaded   bool
	password string // from --clickhouse-password-file or the environment
	tlsCfg   *tls.Config
}

func (c *chSecurityFlags) register(fs *flag.FlagSet, e *env) {
	fs.StringVar(&c.dsn, "clickhouse-dsn", "", "ClickHouse DSN instead of --clickhouse, e.g. clickhouse://user@h1:9440,h2:9440/db?secure=true "+
		"(several hosts, user, secure, skip_verify, tls_server_name, settings; a database it names replaces --database). "+
		"Prefer env TAILCAUSE_CLICKHOUSE_DSN when it holds a password")
	c.dsn = orDefault(c.dsn, e.getenv("TAILCAUSE_CLICKHOUSE_DSN")) // never a flag default: it may hold a password
	fs.StringVar(&c.passwordFile, "clickhouse-password-file", e.getenv("TAILCAUSE_CLICKHOUSE_PASSWORD_FILE"), "file holding the ClickHouse password (env TAILCAUSE_CLICKHOUSE_PASSWORD_FILE; or the password itself in TAILCAUSE_CLICKHOUSE_PASSWORD)")
	fs.BoolVar(&c.tls, "clickhouse-tls", e.getenv("TAILCAUSE_CLICKHOUSE_TLS") == "true", "connect to ClickHouse over TLS (its secure port, 9440; implied by the other --clickhouse-tls-* flags; env TAILCAUSE_CLICKHOUSE_TLS=true)")
	fs.StringVar(&c.caFile, "clickhouse-tls-ca", e.getenv("TAILCAUSE_CLICKHOUSE_TLS_CA"), "PEM file of the CAs that sign ClickHouse's certificate (default: the system's roots; env TAILCAUSE_CLICKHOUSE_TLS_CA)")
	fs.StringVar(&c.certFile, "clickhouse-tls-cert", e.getenv("TAILCAUSE_CLICKHOUSE_TLS_CERT"), "PEM client certificate for ClickHouse (with --clickhouse-tls-key; env TAILCAUSE_CLICKHOUSE_TLS_CERT)")
	fs.StringVar(&c.keyFile, "clickhouse-tls-key", e.getenv("TAILCAUSE_CLICKHOUSE_TLS_KEY"), "PEM key of --clickhouse-tls-cert (env TAILCAUSE_CLICKHOUSE_TLS_KEY)")
	fs.StringVar(&c.name, "clickhouse-tls-server-name", e.getenv("TAILCAUSE_CLICKHOUSE_TLS_SERVER_NAME"), "name to check in ClickHouse's certificate (default: the host dialled; env TAILCAUSE_CLICKHOUSE_TLS_SERVER_NAME)")
}

// load reads the password file and the TLS files once; envPassword is
// TAILCAUSE_CLICKHOUSE_PASSWORD. A mistake is errUsage.
func (c *chSecurityFlags) load(envPassword string) error {
	if c.loaded {
		return nil
	}
	pw, err := readSecret("ClickHouse password", envPassword, "TAILCAUSE_CLICKHOUSE_PASSWORD", c.passwordFile, "--clickhouse-password-file")
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	c.password = pw
	if c.tls || c.caFile != "" || c.certFile != "" || c.keyFile != "" || c.name != "" {
		tc, err := tlsfiles.ClientConfig(c.caFile, c.certFile, c.keyFile, c.name)
		if err != nil {
			return fmt.Errorf("%w: clickhouse %v", errUsage, err)
		}
		c.tlsCfg = tc
	}
	c.loaded = true
	return nil
}

// where names the ClickHouse servers for messages: the DSN's hosts (never
// the DSN itself, which may hold a password), else --clickhouse.
func (s *storeFlags) where() string {
	if s.sec.dsn == "" {
		return s.addr
	}
	c := s.config()
	c.DSN = s.sec.dsn
	if hosts := c.Hosts(); hosts != "" {
		return hosts
	}
	return "the --clickhouse-dsn hosts"
}

// tokenFrom is a bearer token from --token (flagVal), its environment
// variable (envVal) or --token-file: the flag wins over the environment, and
// a file excludes both. Errors never contain the token.
func tokenFrom(flagVal, envVal, envName, file string) (string, error) {
	if file == "" {
		return orDefault(flagVal, envVal), nil
	}
	if flagVal != "" {
		return "", fmt.Errorf("%w: --token and --token-file are both set: drop one", errUsage)
	}
	t, err := readSecret("bearer token", envVal, envName, file, "--token-file")
	if err != nil {
		return "", fmt.Errorf("%w: %v", errUsage, err)
	}
	return t, nil
}
