package kafkax_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/testkit"
	"github.com/tailcause/tailcause/schemas"
)

func TestSecurityConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  kafkax.SecurityConfig
		want string // "" = valid
	}{
		{"plaintext", kafkax.SecurityConfig{}, ""},
		{"tls", kafkax.SecurityConfig{TLS: true}, ""},
		{"scram", kafkax.SecurityConfig{SASLMechanism: "SCRAM-SHA-512", SASLUsername: "u", SASLPassword: "p"}, ""},
		{"lower-case mechanism", kafkax.SecurityConfig{SASLMechanism: "plain", SASLUsername: "u", SASLPassword: "p"}, ""},
		{"cert without key", kafkax.SecurityConfig{CertFile: "c.pem"}, "both its certificate and its key"},
		{"unknown mechanism", kafkax.SecurityConfig{SASLMechanism: "GSSAPI", SASLUsername: "u", SASLPassword: "p"}, `mechanism "GSSAPI"`},
		{"no user", kafkax.SecurityConfig{SASLMechanism: "PLAIN", SASLPassword: "p"}, "no user"},
		{"no password", kafkax.SecurityConfig{SASLMechanism: "PLAIN", SASLUsername: "u"}, "no password"},
		{"password without mechanism", kafkax.SecurityConfig{SASLUsername: "u", SASLPassword: "p"}, "no mechanism"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestSecurityNeverPrintsThePassword(t *testing.T) {
	const pw = "s3cret-Pa55word"
	cfg := kafkax.SecurityConfig{TLS: true, SASLMechanism: "SCRAM-SHA-256", SASLUsername: "svc", SASLPassword: pw}
	sec, err := cfg.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{cfg.String(), sec.String(), fmt.Sprintf("%v", sec), fmt.Sprintf("%+v", sec), fmt.Sprintf("%#v", sec), fmt.Sprint(cfg)} {
		if strings.Contains(s, pw) {
			t.Fatalf("printed the password: %s", s)
		}
	}
	if got := sec.String(); got != "tls, sasl SCRAM-SHA-256 as svc" {
		t.Errorf("String = %q", got)
	}
	_, err = kafkax.SecurityConfig{CAFile: filepath.Join(t.TempDir(), "missing.pem")}.Build()
	if err == nil || !strings.Contains(err.Error(), "read CA file") {
		t.Errorf("Build with a missing CA file = %v", err)
	}
}

// TestSecureBroker produces and consumes through tailcause's own clients
// (the Producer, the topic admin, and kafka-go readers made with the
// Dialer every enricher reader uses, group and partition readers) against a
// real Kafka 4.x broker over SSL with a client certificate and over SASL_SSL
// with SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN; and shows that a wrong
// password, a missing client certificate, an unknown CA and plaintext each
// fail with an error that says so.
func TestSecureBroker(t *testing.T) {
	k := testkit.StartSecureKafka(t)
	scram512 := func(mod func(*kafkax.SecurityConfig)) kafkax.SecurityConfig {
		user, _ := k.User("SCRAM-SHA-512")
		c := kafkax.SecurityConfig{CAFile: k.CA(), SASLMechanism: "SCRAM-SHA-512", SASLUsername: user, SASLPassword: k.Password(t, "SCRAM-SHA-512")}
		if mod != nil {
			mod(&c)
		}
		return c
	}
	build := func(t *testing.T, c kafkax.SecurityConfig) kafkax.Security {
		t.Helper()
		sec, err := c.Build()
		if err != nil {
			t.Fatal(err)
		}
		return sec
	}

	// The topic admin creates the test's topic over SASL_SSL.
	topic := fmt.Sprintf("secure_%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := build(t, scram512(nil))
	states, err := kafkax.EnsureTopics(ctx, []string{k.SASLSSL}, admin, []schemas.Topic{{Name: topic, Partitions: 2, ReplicationFactor: 1}}, 0)
	if err != nil {
		t.Fatalf("create a topic over SASL_SSL: %v", err)
	}
	if states[0].Action != "created" {
		t.Fatalf("topic state %+v", states[0])
	}
	if _, err := kafkax.CheckTopics(ctx, []string{k.SSL}, build(t, kafkax.SecurityConfig{CAFile: k.CA(), CertFile: k.ClientCert(), KeyFile: k.ClientKey()}),
		[]schemas.Topic{{Name: topic, Partitions: 2, ReplicationFactor: 1}}, 0); err != nil {
		t.Fatalf("check the topic over SSL with a client certificate: %v", err)
	}

	for _, tc := range []struct {
		name   string
		broker string
		cfg    kafkax.SecurityConfig
		group  bool // read with a consumer group (as the enricher's span and sample readers)
	}{
		{"SSL client certificate", k.SSL, kafkax.SecurityConfig{CAFile: k.CA(), CertFile: k.ClientCert(), KeyFile: k.ClientKey()}, false},
		{"SASL_SSL SCRAM-SHA-512", k.SASLSSL, scram512(nil), true},
		{"SASL_SSL SCRAM-SHA-256", k.SASLSSL, func() kafkax.SecurityConfig {
			user, _ := k.User("SCRAM-SHA-256")
			return kafkax.SecurityConfig{CAFile: k.CA(), SASLMechanism: "SCRAM-SHA-256", SASLUsername: user, SASLPassword: k.Password(t, "SCRAM-SHA-256")}
		}(), false},
		{"SASL_SSL PLAIN", k.SASLSSL, func() kafkax.SecurityConfig {
			user, _ := k.User("PLAIN")
			return kafkax.SecurityConfig{CAFile: k.CA(), ServerName: "localhost", SASLMechanism: "PLAIN", SASLUsername: user, SASLPassword: k.Password(t, "PLAIN")}
		}(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sec := build(t, tc.cfg)
			p := newProducer(t, []string{tc.broker}, func(c *kafkax.Config) { c.Security = sec; c.MaxAttempts = 3 })
			want := map[string]bool{}
			var recs []kafkax.Record
			for i := range 10 {
				v := fmt.Sprintf("%s/%d", tc.name, i)
				want[v] = true
				recs = append(recs, kafkax.Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte(v)})
			}
			wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer wcancel()
			if err := p.WriteRecords(wctx, topic, recs); err != nil {
				t.Fatalf("write over %s: %v", tc.name, err)
			}
			got := readSecure(t, tc.broker, sec, topic, tc.group, want)
			for v := range want {
				if !got[v] {
					t.Errorf("record %q not read back", v)
				}
			}
		})
	}

	fails := func(t *testing.T, broker string, sec kafkax.Security, wantErr func(error) bool, what string) {
		t.Helper()
		p := newProducer(t, []string{broker}, func(c *kafkax.Config) { c.Security = sec; c.MaxAttempts = 1; c.WriteTimeout = 10 * time.Second })
		wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer wcancel()
		err := p.WriteRecords(wctx, topic, []kafkax.Record{{Value: []byte("x")}})
		if err == nil {
			t.Fatalf("write succeeded, want it to fail: %s", what)
		}
		if !wantErr(err) {
			t.Fatalf("write error %q: want one that says %s", err, what)
		}
		t.Logf("%s: %v", what, err)
	}
	t.Run("wrong password", func(t *testing.T) {
		const wrong = "not-the-password-0123"
		for _, mech := range []string{"SCRAM-SHA-512", "PLAIN"} {
			user, _ := k.User(mech)
			sec := build(t, kafkax.SecurityConfig{CAFile: k.CA(), SASLMechanism: mech, SASLUsername: user, SASLPassword: wrong})
			fails(t, k.SASLSSL, sec, func(err error) bool {
				return errors.Is(err, kafka.SASLAuthenticationFailed) && strings.Contains(err.Error(), "SASL Authentication failed") &&
					!strings.Contains(err.Error(), wrong) && !kafkax.IsRetriable(err)
			}, mech+": SASL authentication failed, permanent, without the password")
		}
		// The topic admin and the readiness check say the same.
		sec := build(t, scram512(func(c *kafkax.SecurityConfig) { c.SASLPassword = wrong }))
		actx, acancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer acancel()
		if _, err := kafkax.CheckTopics(actx, []string{k.SASLSSL}, sec, []schemas.Topic{{Name: topic, Partitions: 2, ReplicationFactor: 1}}, 0); !errors.Is(err, kafka.SASLAuthenticationFailed) {
			t.Errorf("CheckTopics with a wrong password = %v, want SASL authentication failed", err)
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		fails(t, k.SSL, build(t, kafkax.SecurityConfig{CAFile: k.CA()}), func(err error) bool {
			s := err.Error()
			return strings.Contains(s, "tls:") && strings.Contains(s, "certificate")
		}, "the broker wants a client certificate")
	})
	t.Run("unknown CA", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "other-ca.pem")
		writeOtherCA(t, other)
		fails(t, k.SASLSSL, build(t, scram512(func(c *kafkax.SecurityConfig) { c.CAFile = other })), func(err error) bool {
			return strings.Contains(err.Error(), "certificate signed by unknown authority")
		}, "the broker's certificate is signed by an unknown authority")
	})
	t.Run("plaintext to a TLS listener", func(t *testing.T) {
		fails(t, k.SASLSSL, kafkax.Security{}, func(error) bool { return true }, "plaintext cannot talk to SASL_SSL")
	})
}

// readSecure reads topic until every value of want arrived, with a group
// reader or one reader per partition, both dialling with sec.
func readSecure(t *testing.T, broker string, sec kafkax.Security, topic string, group bool, want map[string]bool) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got := map[string]bool{}
	var readers []*kafka.Reader
	if group {
		readers = append(readers, kafka.NewReader(kafka.ReaderConfig{
			Brokers: []string{broker}, Dialer: sec.Dialer("tailcause-test", 10*time.Second),
			GroupID: fmt.Sprintf("g-%d", time.Now().UnixNano()), Topic: topic, StartOffset: kafka.FirstOffset,
			MaxWait: 250 * time.Millisecond, SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second,
		}))
	} else {
		parts, err := sec.Dialer("tailcause-test", 10*time.Second).LookupPartitions(ctx, "tcp", broker, topic)
		if err != nil {
			t.Fatalf("look up partitions: %v", err)
		}
		for _, p := range parts {
			readers = append(readers, kafka.NewReader(kafka.ReaderConfig{
				Brokers: []string{broker}, Dialer: sec.Dialer("tailcause-test", 10*time.Second),
				Topic: topic, Partition: p.ID, MaxWait: 250 * time.Millisecond,
			}))
		}
	}
	defer func() {
		for _, r := range readers {
			r.Close()
		}
	}()
	msgs := make(chan string)
	for _, r := range readers {
		go func() {
			for {
				m, err := r.FetchMessage(ctx)
				if err != nil {
					return
				}
				if group {
					if err := r.CommitMessages(ctx, m); err != nil {
						return
					}
				}
				select {
				case msgs <- string(m.Value):
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for {
		done := true
		for v := range want {
			done = done && got[v]
		}
		if done {
			return got
		}
		select {
		case v := <-msgs:
			got[v] = true
		case <-ctx.Done():
			t.Errorf("read: %v after %d records", ctx.Err(), len(got))
			return got
		}
	}
}

// writeOtherCA writes a self-signed CA that signed nothing the broker has.
func writeOtherCA(t *testing.T, file string) {
	t.Helper()
	ca := testkit.NewCA(t)
	if err := os.WriteFile(file, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestEveryClientDialsWithSecurity reads the module's non-test sources: a
// Kafka client made any other way than through Security's Transport or
// Dialer would connect in plaintext whatever the flags say. kafka-go's
// defaults (DefaultDialer, DefaultTransport, Dial, DialLeader), a Transport
// or Dialer literal, and a ReaderConfig without a Dialer are refused outside
// security.go; internal/testkit (plumbing for the plaintext dev broker) is
// exempt.
func TestEveryClientDialsWithSecurity(t *testing.T) {
	root, err := testkit.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{"kafka.DefaultDialer", "kafka.DefaultTransport", "kafka.Dial(", "kafka.DialLeader(", "kafka.DialContext(",
		"&kafka.Transport{", "kafka.Transport{", "&kafka.Dialer{", "kafka.Dialer{"}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == filepath.Join("internal", "testkit") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || rel == filepath.Join("internal", "kafkax", "security.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		if !strings.Contains(src, `"github.com/segmentio/kafka-go"`) {
			return nil
		}
		checked++
		for _, f := range forbidden {
			if strings.Contains(src, f) {
				t.Errorf("%s: %s: make Kafka clients with kafkax.Security's Transport or Dialer", rel, f)
			}
		}
		for rest := src; ; {
			i := strings.Index(rest, "kafka.ReaderConfig{")
			if i < 0 {
				break
			}
			rest = rest[i+len("kafka.ReaderConfig{"):]
			end := strings.Index(rest, "})")
			if end < 0 {
				end = len(rest)
			}
			if !strings.Contains(rest[:end], "Dialer:") {
				t.Errorf("%s: a kafka.ReaderConfig without a Dialer (kafkax.Security.Dialer) reads in plaintext", rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 5 {
		t.Fatalf("only %d files import kafka-go: is the walk looking at the module?", checked)
	}
}
