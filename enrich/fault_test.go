package enrich

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/internal/otlpfixture"
	"github.com/tailcause/tailcause/internal/testkit"
)

// faultSetup is a fresh database and fresh topics on the real services.
func faultSetup(t *testing.T) (*chstore.Store, Config) {
	t.Helper()
	addr := testkit.Kafka(t)
	st := chstoretest.Fresh(t)
	brokers := []string{addr}
	cfg := testConfig(brokers, testkit.FreshTopic(t, addr, 3), testkit.FreshTopic(t, addr, 2), testkit.FreshTopic(t, addr, 1))
	cfg.RetryMax = time.Second
	return st, cfg
}

const half = otlpfixture.Requests / 2

func firstHalf(t *testing.T, cfg Config) {
	t.Helper()
	produceMetrics(t, cfg.Brokers, cfg.MetricsTopic)
	produceTraces(t, cfg.Brokers, cfg.SpansTopic, otlpfixture.TracesFor(0, half, false))
}

func secondHalf(t *testing.T, cfg Config) {
	t.Helper()
	produceTraces(t, cfg.Brokers, cfg.SpansTopic, otlpfixture.TracesFor(half, otlpfixture.Requests, true))
}

func rows(t *testing.T, st *chstore.Store, final bool) uint64 {
	t.Helper()
	if final {
		return count(t, st, "SELECT count() FROM requests FINAL")
	}
	return count(t, st, "SELECT count() FROM requests")
}

// TestFaultClickHouseOutage stops ClickHouse for 30 s mid-stream: the
// enricher retries, nothing is committed meanwhile, and once ClickHouse is
// back every request lands exactly once.
func TestFaultClickHouseOutage(t *testing.T) {
	st, cfg := faultSetup(t)
	_, stop := runPipelines(t, 1, cfg, st)
	firstHalf(t, cfg)
	waitFor(t, "the first half", 90*time.Second, func() bool { return rows(t, st, false) >= half })
	testkit.StopClickHouse(t)
	secondHalf(t, cfg)
	time.Sleep(30 * time.Second)
	testkit.StartClickHouse(t)
	want := uint64(otlpfixture.Requests + 1)
	waitFor(t, "every request after the outage", 120*time.Second, func() bool { return rows(t, st, true) >= want })
	time.Sleep(time.Second)
	stop()
	if n := rows(t, st, false); n != want {
		t.Errorf("rows = %d, want %d: no loss, no duplicates", n, want)
	}
	otlpfixture.CheckRows(t, st.Conn())
}

// TestFaultKafkaRestart restarts the broker mid-stream: the consumers and
// the producer reconnect and the pipeline resumes.
func TestFaultKafkaRestart(t *testing.T) {
	st, cfg := faultSetup(t)
	_, stop := runPipelines(t, 1, cfg, st)
	firstHalf(t, cfg)
	waitFor(t, "the first half", 90*time.Second, func() bool { return rows(t, st, false) >= half })
	testkit.RestartKafka(t)
	secondHalf(t, cfg)
	want := uint64(otlpfixture.Requests + 1)
	waitFor(t, "every request after the restart", 180*time.Second, func() bool { return rows(t, st, true) >= want })
	stop()
	if n := rows(t, st, true); n != want {
		t.Errorf("rows = %d, want %d", n, want)
	}
	otlpfixture.CheckRows(t, st.Conn())
}

const childEnv = "TAILCAUSE_ENRICH_CHILD"

// TestEnricherChild is not a test: it is the enricher process that
// TestFaultEnricherSIGKILL starts and kills. It runs only when that test
// sets the environment variable carrying its configuration.
func TestEnricherChild(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		t.Skip("helper process of TestFaultEnricherSIGKILL; runs only when started by it")
	}
	f := strings.Split(spec, "|")
	chCfg := chstore.DefaultConfig()
	chCfg.Addr, chCfg.Database = f[0], f[1]
	ctx := context.Background()
	st, err := chstore.Open(ctx, chCfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig([]string{f[2]}, f[3], f[4], f[5])
	p, err := New(cfg, st, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(ctx); err != nil { // until killed
		t.Fatal(err)
	}
}

func startChild(t *testing.T, spec string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestEnricherChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+spec)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
	})
	return cmd
}

// TestFaultEnricherSIGKILL kills the enricher with SIGKILL mid-stream and
// starts a new one: records since the last commit are read again, and
// because rows are deterministic and keyed, the table holds every request
// once (FINAL) — at least once, never lost.
func TestFaultEnricherSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts subprocesses")
	}
	st, cfg := faultSetup(t)
	spec := strings.Join([]string{testkit.ClickHouse(t), st.Database(), cfg.Brokers[0], cfg.SpansTopic, cfg.MetricsTopic, cfg.DeadLetterTopic}, "|")
	child := startChild(t, spec)
	firstHalf(t, cfg)
	waitFor(t, "the first half", 90*time.Second, func() bool { return rows(t, st, false) >= half })
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = child.Process.Wait()
	secondHalf(t, cfg)
	startChild(t, spec)
	want := uint64(otlpfixture.Requests + 1)
	waitFor(t, "every request after the restart", 120*time.Second, func() bool { return rows(t, st, true) >= want })
	if n := rows(t, st, true); n != want {
		t.Errorf("rows (FINAL) = %d, want %d", n, want)
	}
	if n := count(t, st, "SELECT uniqExact(uid) FROM requests"); n != want {
		t.Errorf("distinct uids = %d, want %d", n, want)
	}
	otlpfixture.CheckRows(t, st.Conn())
}
