package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/otlpfixture"
	"github.com/tailcause/tailcause/internal/testkit"
)

// syncBuffer is a bytes.Buffer safe for a command's concurrent log writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runSecureCmd runs the binary's run() with args and an environment of vars.
func runSecureCmd(ctx context.Context, vars map[string]string, args ...string) (code int, out string) {
	var buf syncBuffer
	e := &env{
		stdout: &buf, stderr: &buf,
		log:    slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})),
		getenv: func(k string) string { return vars[k] },
	}
	code = run(ctx, e, args)
	return code, buf.String()
}

func freeTestAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func writeSecret(t *testing.T, dir, name, value string) string {
	t.Helper()
	f := filepath.Join(dir, name)
	if err := os.WriteFile(f, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSecureEndToEnd runs the commands as an operator would against a
// secured Kafka 4.x broker (SASL_SSL, SCRAM-SHA-512) and the real
// ClickHouse through a DSN: `tailcause topics` creates the topics, `tailcause
// all` serves OTLP over TLS (--tls-cert, --tls-key, the token from
// --token-file) and writes through the producer, the span and sample
// consumer groups, the broadcast metric readers and the dead-letter writer,
// all dialling with the shared --kafka-* flags; the joined rows reach
// ClickHouse. A wrong SASL password fails `topics` with an error that says
// so, and no output shows a secret.
func TestSecureEndToEnd(t *testing.T) {
	chAddr := testkit.ClickHouse(t)
	db := testkit.FreshDatabase(t, chAddr)
	k := testkit.StartSecureKafka(t)
	dir := t.TempDir()
	user, pwFile := k.User("SCRAM-SHA-512")
	password := k.Password(t, "SCRAM-SHA-512")
	const token = "secure-e2e-token-0123456789"
	tokenFile := writeSecret(t, dir, "token", token)
	ca := testkit.NewCA(t)
	srv := ca.IssueFiles(t, dir, "ingest", "ingest", "127.0.0.1")

	kafkaFlags := []string{"--kafka", k.SASLSSL, "--kafka-tls-ca", k.CA()}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// A wrong password: exit 1, the broker's verdict, not the password.
	const wrong = "Wrong-Pass-0000"
	code, out := runSecureCmd(ctx, map[string]string{
		"TAILCAUSE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "TAILCAUSE_KAFKA_SASL_USER": user, "TAILCAUSE_KAFKA_SASL_PASSWORD": wrong,
	}, append([]string{"topics", "--timeout", "20s"}, kafkaFlags...)...)
	if code != 1 || !strings.Contains(out, "SASL Authentication failed") || strings.Contains(out, wrong) {
		t.Fatalf("topics with a wrong password: exit %d, output:\n%s", code, out)
	}
	// Both a password variable and a password file: a usage error.
	code, out = runSecureCmd(ctx, map[string]string{"TAILCAUSE_KAFKA_SASL_PASSWORD": password},
		append([]string{"topics", "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", user, "--kafka-sasl-password-file", pwFile}, kafkaFlags...)...)
	if code != 2 || !strings.Contains(out, "drop one") || strings.Contains(out, password) {
		t.Fatalf("password in env and file: exit %d, output:\n%s", code, out)
	}

	code, out = runSecureCmd(ctx, nil, append([]string{"topics", "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", user, "--kafka-sasl-password-file", pwFile}, kafkaFlags...)...)
	if code != 0 {
		t.Fatalf("topics over SASL_SSL: exit %d\n%s", code, out)
	}

	grpcAddr, httpAddr := freeTestAddr(t), freeTestAddr(t)
	vars := map[string]string{
		"TAILCAUSE_KAFKA_SASL_MECHANISM":     "SCRAM-SHA-512",
		"TAILCAUSE_KAFKA_SASL_USER":          user,
		"TAILCAUSE_KAFKA_SASL_PASSWORD_FILE": pwFile,
		"TAILCAUSE_CLICKHOUSE_DSN":           "clickhouse://default@" + chAddr + "/" + db,
	}
	allCtx, stopAll := context.WithCancel(ctx)
	var allOut string
	allDone := make(chan int, 1)
	go func() {
		c, o := runSecureCmd(allCtx, vars, append([]string{"all", "--ttl", "0", "--idle-flush", "10s", "--batch-wait", "200ms", "--metrics-addr", "",
			"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--tls-cert", srv.Cert, "--tls-key", srv.Key, "--token-file", tokenFile}, kafkaFlags...)...)
		allOut = o
		allDone <- c
	}()
	stopped := false
	stop := func() int {
		if stopped {
			return 0
		}
		stopped = true
		stopAll()
		return <-allDone
	}
	defer stop()

	clientTLS := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS}}
	defer hc.CloseIdleConnections()
	endpoint := "https://" + httpAddr
	// Wait for the listener (the store and the migrations come first).
	for deadline := time.Now().Add(90 * time.Second); ; {
		err := sendMetricsHTTP(ctx, hc, endpoint, token, otlpfixture.Metrics()[0])
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("OTLP/HTTP over TLS never accepted: %v", err)
		}
		select {
		case c := <-allDone:
			stopped = true
			t.Fatalf("tailcause all exited %d:\n%s", c, allOut)
		case <-time.After(500 * time.Millisecond):
		}
	}
	for _, md := range otlpfixture.Metrics()[1:] {
		if err := sendMetricsHTTP(ctx, hc, endpoint, token, md); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	if _, err := ptraceotlp.NewGRPCClient(conn).Export(gctx, ptraceotlp.NewExportRequestFromTraces(otlpfixture.Traces())); err != nil {
		t.Fatalf("OTLP/gRPC over TLS: %v", err)
	}

	cfg := chstore.DefaultConfig()
	cfg.Addr, cfg.Database, cfg.TTL = chAddr, db, 0
	st, err := chstore.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	waitRows(t, st, otlpfixture.Requests+1)
	otlpfixture.CheckRows(t, st.Conn())

	if c := stop(); c != 0 {
		t.Errorf("tailcause all exited %d", c)
	}
	for _, secret := range []string{password, token} {
		if strings.Contains(allOut, secret) {
			t.Errorf("tailcause all printed a secret")
		}
	}
	if !strings.Contains(allOut, "sasl SCRAM-SHA-512 as "+user) {
		t.Errorf("the start-up log does not say how Kafka is reached:\n%s", allOut)
	}
	if t.Failed() {
		t.Log(allOut)
	}
}

// TestSecurityFlagMistakes: each mistake in the security flags ends at once
// with exit status 2 and an error naming it, and no output shows a secret
// from the environment or a file.
func TestSecurityFlagMistakes(t *testing.T) {
	dir := t.TempDir()
	const secret = "s3cret-value-42"
	pwFile := writeSecret(t, dir, "pw", secret)
	empty := writeSecret(t, dir, "empty", "")
	vars := map[string]string{
		"TAILCAUSE_CLICKHOUSE": "127.0.0.1:1", "TAILCAUSE_KAFKA": "127.0.0.1:1",
		"TAILCAUSE_INGEST_TOKEN": secret, "TAILCAUSE_CLICKHOUSE_PASSWORD": secret,
	}
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for k, v := range vars {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, tc := range []struct {
		getenv func(string) string
		args   []string
		want   string
	}{
		{env("TAILCAUSE_KAFKA_SASL_PASSWORD", secret), []string{"topics"}, "a user or password is set but no mechanism"},
		{env(), []string{"topics", "--kafka-sasl-mechanism", "SCRAM-SHA-1", "--kafka-sasl-user", "u", "--kafka-sasl-password-file", pwFile}, `mechanism "SCRAM-SHA-1"`},
		{env(), []string{"topics", "--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-user", "u"}, "kafka sasl PLAIN: no password"},
		{env(), []string{"topics", "--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-user", "u", "--kafka-sasl-password-file", filepath.Join(dir, "missing")}, "read --kafka-sasl-password-file"},
		{env(), []string{"topics", "--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-user", "u", "--kafka-sasl-password-file", empty}, "is empty"},
		{env("TAILCAUSE_KAFKA_SASL_PASSWORD", secret), []string{"sim", "--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-user", "u", "--kafka-sasl-password-file", pwFile}, "drop one"},
		{env(), []string{"enrich", "--kafka-tls-cert", pwFile}, "both its certificate and its key"},
		{env(), []string{"ingest", "--kafka-tls-ca", pwFile}, "holds no PEM certificate"},
		{env(), []string{"ingest", "--tls-cert", pwFile}, "needs both a certificate and a key"},
		{env(), []string{"ingest", "--tls-client-ca", pwFile}, "--tls-client-ca needs --tls-cert and --tls-key"},
		{env(), []string{"ingest", "--tls-cert", pwFile, "--tls-key", pwFile}, "tls: load certificate"},
		{env(), []string{"ingest", "--token-file", pwFile}, "--token-file"},
		{env("TAILCAUSE_QUERY_TOKEN", secret), []string{"query", "--token", "x", "--token-file", pwFile}, "--token and --token-file are both set"},
		{env(), []string{"all", "--embedded-kafka", "--kafka-tls"}, "--embedded-kafka runs a plaintext in-process broker"},
		{env("TAILCAUSE_CLICKHOUSE_DSN", "clickhouse://u:"+secret+"@h:port/db"), []string{"migrate"}, "clickhouse dsn: "},
		{env("TAILCAUSE_CLICKHOUSE_DSN", "https://u:"+secret+"@h:8443/db?secure=true"), []string{"rank", "--from", "2026-11-30T09:00:00Z", "--to", "2026-11-30T10:00:00Z"}, "only the native protocol"},
		{env(), []string{"migrate", "--clickhouse-password-file", pwFile}, "both TAILCAUSE_CLICKHOUSE_PASSWORD and --clickhouse-password-file are set"},
		{env(), []string{"migrate", "--clickhouse-tls-ca", filepath.Join(dir, "missing.pem")}, "clickhouse tls: read CA file"},
	} {
		code, out, errs, _ := runEnv(t, tc.getenv, 5*time.Second, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("tailcause %v: exit %d, want 2 and %q in:\n%s", tc.args, code, tc.want, errs)
		}
		if strings.Contains(out+errs, secret) {
			t.Errorf("tailcause %v printed a secret:\n%s%s", tc.args, out, errs)
		}
	}
}

// TestQueryOverTLS serves the query API with --tls-cert and --tls-key (the
// token from --token-file) on the real ClickHouse, then with --tls-client-ca:
// HTTPS answers, plaintext and (with a client CA) a client without a
// certificate are refused.
func TestQueryOverTLS(t *testing.T) {
	chAddr := testkit.ClickHouse(t)
	db := testkit.FreshDatabase(t, chAddr)
	dir := t.TempDir()
	ca := testkit.NewCA(t)
	srv := ca.IssueFiles(t, dir, "query", "query", "127.0.0.1")
	const token = "query-tls-token-0123456789"
	tokenFile := writeSecret(t, dir, "token", token)
	clientCert, clientKey := ca.Issue(t, "analyst")
	pair, err := tls.X509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}

	for _, mutual := range []bool{false, true} {
		t.Run(map[bool]string{false: "server certificate", true: "mutual TLS"}[mutual], func(t *testing.T) {
			listen := freeTestAddr(t)
			args := []string{"query", "--clickhouse", chAddr, "--database", db, "--listen", listen, "--metrics-addr", "",
				"--tls-cert", srv.Cert, "--tls-key", srv.Key, "--token-file", tokenFile}
			clientTLS := &tls.Config{RootCAs: ca.Pool()}
			if mutual {
				args = append(args, "--tls-client-ca", srv.CA)
				clientTLS.Certificates = []tls.Certificate{pair}
			}
			ctx, cancel := context.WithCancel(context.Background())
			var out string
			done := make(chan int, 1)
			go func() {
				c, o := runSecureCmd(ctx, nil, args...)
				out = o
				done <- c
			}()
			defer func() {
				cancel()
				if c := <-done; c != 0 {
					t.Errorf("query exited %d:\n%s", c, out)
				}
			}()
			hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS}}
			defer hc.CloseIdleConnections()
			get := func(c *http.Client, url string) (int, error) {
				req, err := http.NewRequest(http.MethodGet, url, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := c.Do(req)
				if err != nil {
					return 0, err
				}
				resp.Body.Close()
				return resp.StatusCode, nil
			}
			incidents := "https://" + listen + "/v1/incidents?from=2026-11-30T09:00:00Z&to=2026-11-30T10:00:00Z"
			for deadline := time.Now().Add(60 * time.Second); ; {
				code, err := get(hc, incidents)
				if err == nil && code == http.StatusOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("GET /v1/incidents over TLS: %d %v", code, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			plain := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
			defer plain.CloseIdleConnections()
			if code, err := get(plain, "http://"+listen+"/v1/incidents"); err == nil && code != http.StatusBadRequest {
				t.Errorf("plain HTTP to the TLS listener: %d, want 400 or a refused connection", code)
			}
			if mutual {
				noCert := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
				defer noCert.CloseIdleConnections()
				if code, err := get(noCert, incidents); err == nil {
					t.Errorf("a client without a certificate got %d", code)
				}
			}
		})
	}
}
