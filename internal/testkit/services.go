package testkit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Environment variables that carry the service addresses to tests.
const (
	EnvClickHouse = "TAILCAUSE_TEST_CLICKHOUSE"
	EnvKafka      = "TAILCAUSE_TEST_KAFKA"
)

// ClickHouse returns the host:port of the test ClickHouse server's native
// protocol, or skips the test (fails it under CI) when none is configured.
func ClickHouse(t testing.TB) string {
	t.Helper()
	return service(t, EnvClickHouse, "deploy/dev/clickhouse.sh start")
}

// Kafka returns the host:port of the test Kafka broker, or skips the test
// (fails it under CI) when none is configured.
func Kafka(t testing.TB) string {
	t.Helper()
	return service(t, EnvKafka, "deploy/dev/kafka.sh start")
}

func service(t testing.TB, env, script string) string {
	t.Helper()
	if addr := os.Getenv(env); addr != "" {
		return addr
	}
	msg := fmt.Sprintf("%s is not set: run `eval \"$(deploy/dev/services.sh up)\"` (or %s and export %s=host:port) to run this test",
		env, script, env)
	if os.Getenv("CI") != "" {
		t.Fatal("CI must not skip integration tests: " + msg)
	}
	t.Skip(msg)
	return ""
}

// EnvFaults, when non-empty, lets tests stop and restart the shared
// services. `make test` sets it only in a separate pass that runs the tests
// named *Fault* one package at a time (-p 1): in the main pass, packages run
// in parallel against the same servers, and a restart would break the tests
// of other packages.
const EnvFaults = "TAILCAUSE_TEST_FAULTS"

// faultTest skips t unless fault tests are enabled, and insists on the
// naming rule that gets the test into the fault pass.
func faultTest(t testing.TB) {
	t.Helper()
	if !strings.Contains(t.Name(), "Fault") {
		t.Fatalf("%s stops or restarts a shared service: its name must contain \"Fault\" so that `make test` runs it in the serial fault pass", t.Name())
	}
	if os.Getenv(EnvFaults) == "" {
		t.Skipf("fault test: set %s=1 (make test does, in its serial pass) to stop and restart the shared services", EnvFaults)
	}
}

// StopClickHouse stops the test ClickHouse server (its data is kept). A
// cleanup starts it again if the test did not, so a failing fault test does
// not take the server away from the tests after it. Only for fault tests
// (see EnvFaults).
func StopClickHouse(t testing.TB) {
	t.Helper()
	faultTest(t)
	addr := ClickHouse(t)
	env := portEnv("CH_TCP_PORT", addr)
	t.Cleanup(func() {
		if err := runScript("deploy/dev/clickhouse.sh", env, "start"); err != nil {
			t.Errorf("restart ClickHouse after the test: %v", err)
		}
	})
	if err := runScript("deploy/dev/clickhouse.sh", env, "stop"); err != nil {
		t.Fatalf("stop ClickHouse: %v", err)
	}
}

// StartClickHouse starts the test ClickHouse server (a no-op when it runs)
// and returns once it answers queries. Only for fault tests.
func StartClickHouse(t testing.TB) {
	t.Helper()
	faultTest(t)
	addr := ClickHouse(t)
	if err := runScript("deploy/dev/clickhouse.sh", portEnv("CH_TCP_PORT", addr), "start"); err != nil {
		t.Fatalf("start ClickHouse: %v", err)
	}
}

// RestartKafka stops the test broker (SIGTERM, a controlled shutdown) and
// starts it again on the same data; it returns once the broker is ready.
// Only for fault tests.
func RestartKafka(t testing.TB) {
	t.Helper()
	faultTest(t)
	addr := Kafka(t)
	if err := runScript("deploy/dev/kafka.sh", portEnv("KAFKA_PORT", addr), "restart"); err != nil {
		t.Fatalf("restart Kafka: %v", err)
	}
}

// portEnv makes the scripts act on the server the test uses: the port in
// addr, unless the caller's environment already names one.
func portEnv(name, addr string) []string {
	if os.Getenv(name) != "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	return []string{name + "=" + port}
}

// runScript runs a deploy/dev script from the repository root, with a
// bound on its run time so that a hung service cannot hang the test binary.
func runScript(script string, env []string, args ...string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, script)}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", script, strings.Join(args, " "), err, out.String())
	}
	return nil
}

// RepoRoot returns the directory of the module's go.mod, found by walking up
// from the working directory (go test runs in the package directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("find repository root: %w", err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// uniqueName returns prefix_<test name>_<random>, made of [a-z0-9_] only, so
// it is a valid ClickHouse identifier and Kafka topic name without quoting.
func uniqueName(t testing.TB, prefix string) string {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteByte('_')
	for _, r := range strings.ToLower(t.Name()) {
		if b.Len() >= 48 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatalf("random name suffix: %v", err)
	}
	b.WriteByte('_')
	b.WriteString(hex.EncodeToString(rnd[:]))
	return b.String()
}
