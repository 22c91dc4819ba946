package obs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/testkit"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	bad := Config{Addr: "nope", CheckTimeout: 0, CheckInterval: -1}
	err := bad.Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{"addr", "check timeout", "check interval", "read header timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if _, err := New(DefaultConfig(), nil, []Check{{Name: "x"}}, nil); err == nil {
		t.Error("check without Run accepted")
	}
	ok := Check{Name: "x", Run: func(context.Context) error { return nil }}
	if _, err := New(DefaultConfig(), nil, []Check{ok, ok}, nil); err == nil {
		t.Error("duplicate check accepted")
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// counters mimics a role's counter struct (enrich.Counters).
type counters struct {
	SpanRecords, Requests atomic.Int64
	InsertRetries         atomic.Uint64
	Pending               int
	GPUSeries             int
	Ratio                 float64
	name                  string
	Label                 string
}

var testFields = map[string]Field{
	"SpanRecords": {Help: "Span records read."},
	"Pending":     {Help: "Requests waiting.", Gauge: true},
	"GPUSeries":   {Help: "GPU series held.", Gauge: true},
	"Ratio":       {Help: "A ratio.", Gauge: true},
}

func TestServerLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t)
	var healthy atomic.Bool
	healthy.Store(true)
	var c counters
	c.SpanRecords.Store(5)
	c.InsertRetries.Store(2)
	c.Pending = 3
	reg := NewRegistry()
	reg.MustRegister(NewFuncCollector("tailcause_enrich", func() []Value { return StructValues(&c, testFields) }))

	cfg := DefaultConfig()
	cfg.Addr, cfg.CheckInterval, cfg.CheckTimeout = "127.0.0.1:0", 0, 200*time.Millisecond
	var logged bytes.Buffer
	s, err := New(cfg, reg, []Check{
		{Name: "dep", Run: func(context.Context) error {
			if !healthy.Load() {
				return errors.New("dial tcp 10.1.2.3:9000: connection refused") // internals
			}
			return nil
		}},
		{Name: "slow", Run: func(ctx context.Context) error {
			if healthy.Load() {
				return nil
			}
			time.Sleep(time.Second) // ignores ctx on purpose: runCheck must not wait
			return ctx.Err()
		}},
	}, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err == nil {
		t.Error("second Start succeeded")
	}
	base := "http://" + s.Addr().String()

	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 200 || body != "[+]dep ok\n[+]slow ok\nready\n" {
		t.Errorf("/readyz: %d %q", code, body)
	}
	code, body := get(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		"tailcause_enrich_span_records_total 5",
		"tailcause_enrich_requests_total 0",
		"tailcause_enrich_insert_retries_total 2",
		"# TYPE tailcause_enrich_pending gauge",
		"tailcause_enrich_pending 3",
		"tailcause_enrich_gpu_series 0",
		"go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "label") || strings.Contains(body, "_name") {
		t.Errorf("/metrics exposes non-numeric fields:\n%s", body)
	}

	healthy.Store(false)
	start := time.Now()
	code, body = get(t, base+"/readyz")
	// Which check failed, and no more: the error's address is for the log.
	if code != http.StatusServiceUnavailable || body != "[-]dep failed\n[-]slow failed: no answer within the check timeout\nnot ready\n" {
		t.Errorf("/readyz while down: %d %q", code, body)
	}
	if !strings.Contains(logged.String(), "10.1.2.3:9000: connection refused") {
		t.Errorf("the failed check's error is not logged: %q", logged.String())
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("/readyz took %s with a 200 ms check timeout", d)
	}
	// /healthz does not depend on the checks.
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz while a dependency is down: %d", code)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	healthy.Store(true)
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if r := s.Ready(ctx); r.OK {
		t.Error("ready after Shutdown")
	}
	time.Sleep(1100 * time.Millisecond) // let the abandoned slow check end before goleak looks
}

func TestReadinessReuse(t *testing.T) {
	var runs atomic.Int32
	cfg := DefaultConfig()
	cfg.CheckInterval = time.Minute
	s, err := New(cfg, nil, []Check{{Name: "n", Run: func(context.Context) error { runs.Add(1); return nil }}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	for range 3 {
		if !s.Ready(context.Background()).OK {
			t.Fatal("not ready")
		}
	}
	now = now.Add(2 * time.Minute)
	s.Ready(context.Background())
	if runs.Load() != 2 {
		t.Errorf("checks ran %d times, want 2 (reused within CheckInterval)", runs.Load())
	}
	// Shutdown without Start is fine.
	if err := s.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestFuncCollectorClash(t *testing.T) {
	reg := prometheus.NewRegistry()
	mk := func() prometheus.Collector {
		return NewFuncCollector("x", func() []Value { return []Value{{Name: "a", Kind: Gauge, Value: 1}} })
	}
	reg.MustRegister(mk())
	if err := reg.Register(mk()); err == nil {
		t.Error("a clashing collector registered")
	}
	if fams, err := reg.Gather(); err != nil || len(fams) != 1 || fams[0].GetName() != "x_a" {
		t.Errorf("gathered %v, %v", fams, err)
	}
}

// TestStructValuesHelp: the HELP text is the one the fields give, and a
// field without one gets no Go name as its HELP (it is left empty).
func TestStructValuesHelp(t *testing.T) {
	var c counters
	got := map[string]Value{}
	for _, v := range StructValues(&c, testFields) {
		got[v.Name] = v
	}
	if v := got["span_records"]; v.Help != "Span records read." || v.Kind != Counter {
		t.Errorf("span_records = %+v", v)
	}
	if v := got["pending"]; v.Help != "Requests waiting." || v.Kind != Gauge {
		t.Errorf("pending = %+v", v)
	}
	if v := got["insert_retries"]; v.Help != "" || v.Kind != Counter {
		t.Errorf("insert_retries (no Field) = %+v, want a counter without help", v)
	}
}

// TestServerWaitEndsOnServeFailure: Wait returns nil once ctx ends, and
// the listener's failure when the server stops serving on its own, so a
// run group stops the role.
func TestServerWaitEndsOnServeFailure(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	s, err := New(cfg, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(context.Background()); err == nil {
		t.Error("Wait before Start returned nil")
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Wait(ctx); err != nil {
		t.Errorf("Wait after ctx ended: %v", err)
	}
	s.ln.Close() // the listener fails under the server
	err = s.Wait(context.Background())
	if err == nil || !strings.Contains(err.Error(), "obs: serve on 127.0.0.1:") {
		t.Errorf("Wait after the listener failed = %v, want the serve error", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown after the failure: %v", err)
	}
	if err := s.Wait(context.Background()); err == nil {
		t.Error("Wait after Shutdown forgot the failure")
	}
}

func TestStructValuesPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic for a non-struct")
		}
	}()
	StructValues(3, nil)
}

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"SpanRecords": "span_records", "GPUSeries": "gpu_series", "InsertRetries": "insert_retries",
		"HTTPServerID": "http_server_id", "Commits": "commits", "P99Ms": "p99_ms", "x": "x",
	} {
		if got := SnakeCase(in); got != want {
			t.Errorf("SnakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestChecksRealServices runs the check constructors against the dev
// ClickHouse and Kafka.
func TestChecksRealServices(t *testing.T) {
	chAddr, kafkaAddr := testkit.ClickHouse(t), testkit.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	conn := testkit.Connect(t, chAddr, "default")
	if err := ClickHouseCheck(conn).Run(ctx); err != nil {
		t.Errorf("clickhouse check: %v", err)
	}
	if err := ClickHouseCheck(pingFunc(func(context.Context) error { return errors.New("refused") })).Run(ctx); err == nil {
		t.Error("failing pinger passed")
	}

	topic := testkit.FreshTopic(t, kafkaAddr, 2)
	if err := KafkaCheck([]string{kafkaAddr}, kafkax.Security{}).Run(ctx); err != nil {
		t.Errorf("kafka check: %v", err)
	}
	if err := KafkaCheck([]string{kafkaAddr}, kafkax.Security{}, topic).Run(ctx); err != nil {
		t.Errorf("kafka check with topic: %v", err)
	}
	if err := KafkaCheck([]string{kafkaAddr}, kafkax.Security{}, topic, topic+"-absent").Run(ctx); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("kafka check with a missing topic: %v", err)
	}
	if err := KafkaCheck(nil, kafkax.Security{}).Run(ctx); err == nil {
		t.Error("kafka check without brokers passed")
	}
	short, cancel2 := context.WithTimeout(ctx, 3*time.Second)
	defer cancel2()
	if err := KafkaCheck([]string{"127.0.0.1:1"}, kafkax.Security{}).Run(short); err == nil {
		t.Error("kafka check against a closed port passed")
	}
}

type pingFunc func(context.Context) error

func (f pingFunc) Ping(ctx context.Context) error { return f(ctx) }
