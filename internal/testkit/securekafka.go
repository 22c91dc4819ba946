package testkit

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SecureKafka is a secured single-node Kafka 4.x broker that
// deploy/dev/kafka.sh started (KAFKA_SECURE=1) for one test: a listener
// that requires TLS with a client certificate, and one with SASL over TLS
// (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), its certificates from a CA
// generated for it.
type SecureKafka struct {
	// SSL is the host:port of the listener that wants a client certificate
	// (ClientCert, ClientKey).
	SSL string
	// SASLSSL is the host:port of the SASL_SSL listener.
	SASLSSL string
	// Dir holds the generated files.
	Dir string
}

// CA is the PEM file of the CA that signed the broker's certificate.
func (k SecureKafka) CA() string { return filepath.Join(k.Dir, "ca.crt") }

// ClientCert and ClientKey are a client certificate the SSL listener accepts.
func (k SecureKafka) ClientCert() string { return filepath.Join(k.Dir, "client.crt") }
func (k SecureKafka) ClientKey() string  { return filepath.Join(k.Dir, "client.key") }

// User is the SASL user of mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)
// and the file holding its password.
func (k SecureKafka) User(mechanism string) (user, passwordFile string) {
	switch mechanism {
	case "PLAIN":
		return "tailcause-plain", filepath.Join(k.Dir, "plain.password")
	case "SCRAM-SHA-256":
		return "tailcause-scram256", filepath.Join(k.Dir, "scram-sha-256.password")
	case "SCRAM-SHA-512":
		return "tailcause-scram512", filepath.Join(k.Dir, "scram-sha-512.password")
	}
	panic("testkit: unknown SASL mechanism " + mechanism)
}

// Password reads the password of mechanism's user.
func (k SecureKafka) Password(t testing.TB, mechanism string) string {
	t.Helper()
	_, f := k.User(mechanism)
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatalf("read the %s password: %v", mechanism, err)
	}
	return strings.TrimSpace(string(b))
}

// StartSecureKafka starts a secured broker in a temporary directory on free
// ports and stops it when the test ends. It needs what deploy/dev/kafka.sh
// needs (a JDK, Maven or the jar cache, openssl); without them the test is
// skipped, except under CI, where it fails. Starting takes 20–30 s on two
// cores, so a package should start one and share it between its tests.
func StartSecureKafka(t testing.TB) SecureKafka {
	t.Helper()
	for _, tool := range []string{"java", "javac", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			msg := fmt.Sprintf("the secure Kafka broker needs %s (deploy/dev/kafka.sh; .ci/run installs it)", tool)
			if os.Getenv("CI") != "" {
				t.Fatal("CI must not skip integration tests: " + msg)
			}
			t.Skip(msg)
		}
	}
	// The script's path is resolved now: the cleanup must not depend on
	// the working directory still existing.
	root, err := RepoRoot()
	if err != nil {
		t.Fatalf("secure kafka: %v", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		t.Fatalf("secure kafka: %v", err)
	}
	dir := t.TempDir()
	env := []string{
		"KAFKA_SECURE=1",
		"TAILCAUSE_DEV_DIR=" + dir,
		"KAFKA_SSL_PORT=" + strconv.Itoa(ports[0]),
		"KAFKA_SASL_SSL_PORT=" + strconv.Itoa(ports[1]),
		"KAFKA_CONTROLLER_PORT=" + strconv.Itoa(ports[2]),
		"KAFKA_HEAP_OPTS=-Xms128m -Xmx384m",
	}
	t.Cleanup(func() {
		if _, err := runScriptOut(root, "deploy/dev/kafka.sh", env, "stop"); err != nil {
			t.Errorf("stop the secure Kafka broker: %v", err)
		}
	})
	out, err := runScriptOut(root, "deploy/dev/kafka.sh", env, "start")
	if err != nil {
		t.Fatalf("start the secure Kafka broker: %v", err)
	}
	var k SecureKafka
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name, value, _ := strings.Cut(sc.Text(), "=")
		switch name {
		case "TAILCAUSE_KAFKA_SSL":
			k.SSL = value
		case "TAILCAUSE_KAFKA_SASL_SSL":
			k.SASLSSL = value
		case "TAILCAUSE_KAFKA_TLS_DIR":
			k.Dir = value
		}
	}
	if k.SSL == "" || k.SASLSSL == "" || k.Dir == "" {
		t.Fatalf("deploy/dev/kafka.sh start (secure) printed no addresses: %q", out)
	}
	return k
}

// freePorts returns n ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// runScriptOut runs a script of the repository at root and returns its
// stdout (stderr goes into the error).
func runScriptOut(root, script string, env []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, script)}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", script, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}
