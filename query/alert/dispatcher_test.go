package alert

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// fakeStore is for tests that never reach the store: every call panics.
type fakeStore struct{ Store }

// clock is a manual clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// receiverLog is a webhook receiver whose behaviour the test scripts: it
// answers the n-th request with script[n] (the last entry repeats).
type receiverLog struct {
	mu        sync.Mutex
	secret    []byte
	now       func() time.Time
	script    []string // "500", "503", "400", "timeout", "200"
	requests  int
	delivered map[string]int // delivery id → 2xx answers
	attempts  []string       // X-Tailcause-Attempt values, in order
	bodies    map[string][]byte
	badSig    int
}

func newReceiver(t *testing.T, secret string, now func() time.Time, script ...string) (*receiverLog, *httptest.Server) {
	r := &receiverLog{secret: []byte(secret), now: now, script: script, delivered: map[string]int{}, bodies: map[string][]byte{}}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		step := r.script[min(r.requests, len(r.script)-1)]
		r.requests++
		if len(r.secret) > 0 {
			if err := Verify(r.secret, req.Header.Get(HeaderSignature), body, r.now(), 5*time.Minute); err != nil {
				r.badSig++
			}
		}
		r.attempts = append(r.attempts, req.Header.Get(HeaderAttempt))
		r.mu.Unlock()
		switch step {
		case "timeout":
			select {
			case <-time.After(2 * time.Second):
			case <-req.Context().Done():
			}
			return
		case "200":
			r.mu.Lock()
			r.delivered[req.Header.Get(HeaderDelivery)]++
			r.bodies[req.Header.Get(HeaderDelivery)] = body
			r.mu.Unlock()
			w.WriteHeader(http.StatusOK)
		default:
			code, _ := strconv.Atoi(step)
			if code == 503 {
				w.Header().Set("Retry-After", "1")
			}
			w.WriteHeader(code)
		}
	}))
	t.Cleanup(hs.Close)
	return r, hs
}

func (r *receiverLog) snapshot() (map[string]int, int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.delivered {
		out[k] = v
	}
	return out, r.requests, r.badSig
}

func testConfig(receivers ...Receiver) Config {
	c := DefaultConfig()
	c.Receivers = receivers
	c.InitialBackoff = Duration(time.Second)
	c.MaxBackoff = Duration(8 * time.Second)
	c.Concurrency = 2
	c.ClaimSettle = Duration(200 * time.Millisecond) // every scan with due rows waits it
	return c
}

func newTestDispatcher(t *testing.T, st Store, cfg Config, clk *clock, seed uint64) *Dispatcher {
	t.Helper()
	d, err := NewDispatcher(st, cfg, Options{
		Now:       clk.Now,
		Rand:      rand.New(rand.NewPCG(seed, seed+1)),
		Getenv:    func(k string) string { return map[string]string{"HOOK_SECRET": "s3cret"}[k] },
		ReportURL: func(id string) string { return "https://tc.example.com/incidents/" + id + "/report" },
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// drain runs scans, advancing the clock past every backoff, until nothing
// is due or rounds run out.
func drain(t *testing.T, d *Dispatcher, clk *clock, rounds int) {
	t.Helper()
	for i := 0; i < rounds; i++ {
		n, err := deliver(t, d)
		if err != nil {
			t.Fatalf("deliver due: %v", err)
		}
		if n == 0 {
			clk.Advance(10 * time.Second) // past the longest backoff (8s)
			if n, err = deliver(t, d); err != nil {
				t.Fatalf("deliver due: %v", err)
			} else if n == 0 {
				return
			}
		}
	}
	t.Fatalf("still delivering after %d rounds", rounds)
}

func states(t *testing.T, st *chstore.Store) map[string]string {
	t.Helper()
	rows, err := st.Conn().Query(context.Background(), `SELECT delivery_id, receiver, argMax(state, attempted_ns), count() FROM alert_attempts GROUP BY delivery_id, receiver`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, rcv, state string
		var n uint64
		if err := rows.Scan(&id, &rcv, &state, &n); err != nil {
			t.Fatal(err)
		}
		out[id+"@"+rcv] = state + "/" + strconv.FormatUint(n, 10)
	}
	return out
}

// TestDeliveryThroughOutages: a receiver that fails with 500s, then times
// out, then recovers gets every event, once per delivery id, with valid
// signatures; a second (Slack) receiver that works gets them too.
func TestDeliveryThroughOutages(t *testing.T) {
	st := chstoretest.Fresh(t)
	clk := &clock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	flaky, flakyHS := newReceiver(t, "s3cret", clk.Now, "500", "500", "500", "timeout", "timeout", "200")
	slack, slackHS := newReceiver(t, "", clk.Now, "200")
	cfg := testConfig(
		Receiver{Name: "pager", URL: flakyHS.URL, SecretEnv: "HOOK_SECRET", Timeout: Duration(300 * time.Millisecond)},
		Receiver{Name: "chat", URL: slackHS.URL, Format: FormatSlack},
	)
	d := newTestDispatcher(t, ClickHouse(st), cfg, clk, 1)
	ctx := context.Background()
	events := []Event{
		{IncidentID: "inc-a", Version: 1, Kind: EventOpened, Payload: testPayload("inc-a", "kv_cache.preemption", "node-2")},
		{IncidentID: "inc-b", Version: 1, Kind: EventOpened, Payload: testPayload("inc-b", "gpu.thermal_throttle", "node-1")},
		{IncidentID: "inc-a", Version: 4, Kind: EventTopCulpritChanged, Payload: testPayload("inc-a", "queue.saturation", "node-2")},
	}
	for _, ev := range events {
		for rep := 0; rep < 3; rep++ { // repeated enqueues write once
			n, err := d.Enqueue(ctx, ev)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 2, false: 0}[rep == 0]; n != want {
				t.Errorf("enqueue %s (repeat %d): %d rows, want %d", ev.DeliveryID(), rep, n, want)
			}
		}
	}
	drain(t, d, clk, 50)

	delivered, requests, badSig := flaky.snapshot()
	want := map[string]int{"inc-a:1:opened": 1, "inc-b:1:opened": 1, "inc-a:4:top_culprit_changed": 1}
	if len(delivered) != 3 {
		t.Errorf("pager got %v, want each of %v once", delivered, want)
	}
	for id := range want {
		if delivered[id] != 1 {
			t.Errorf("pager: %s delivered %d times, want once", id, delivered[id])
		}
	}
	if badSig != 0 {
		t.Errorf("%d of %d requests had a signature that does not verify", badSig, requests)
	}
	if requests != 5+3 {
		t.Errorf("pager saw %d requests, want 5 failures then 3 deliveries", requests)
	}
	sd, _, _ := slack.snapshot()
	for id := range want {
		if sd[id] != 1 {
			t.Errorf("chat: %s delivered %d times, want once", id, sd[id])
		}
	}
	var msg struct {
		Blocks []any `json:"blocks"`
	}
	if err := json.Unmarshal(slack.bodies["inc-a:1:opened"], &msg); err != nil || len(msg.Blocks) == 0 {
		t.Errorf("slack body %s: want blocks", slack.bodies["inc-a:1:opened"])
	}
	var generic map[string]any
	if err := json.Unmarshal(flaky.bodies["inc-b:1:opened"], &generic); err != nil || generic["event"] != "opened" || generic["incident_id"] != "inc-b" ||
		generic["report_url"] != "https://tc.example.com/incidents/inc-b/report" {
		t.Errorf("generic body %v", generic)
	}
	// The newest attempt of every delivery says delivered; the pager's
	// attempt counter went up.
	s := states(t, st)
	for id := range want {
		if got := s[id+"@chat"]; got != "delivered/1" {
			t.Errorf("%s@chat: %s, want delivered after 1 attempt", id, got)
		}
		if got := s[id+"@pager"]; got[:9] != "delivered" {
			t.Errorf("%s@pager: %s, want delivered", id, got)
		}
	}
	sort.Strings(flaky.attempts)
	if last := flaky.attempts[len(flaky.attempts)-1]; last < "2" {
		t.Errorf("attempt headers %v: retries must count up", flaky.attempts)
	}
	// Nothing is due any more.
	clk.Advance(time.Hour)
	if n, err := deliver(t, d); err != nil || n != 0 {
		t.Errorf("after delivery: %d due (%v), want 0", n, err)
	}
}

// TestDispatcherRestart: what one dispatcher left pending (enqueued and
// never tried, or failed and waiting for a retry) a new dispatcher on the
// same database delivers.
func TestDispatcherRestart(t *testing.T) {
	st := chstoretest.Fresh(t)
	clk := &clock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	down, downHS := newReceiver(t, "s3cret", clk.Now, "503")
	_ = down
	cfg := testConfig(Receiver{Name: "pager", URL: downHS.URL, SecretEnv: "HOOK_SECRET"})
	ctx := context.Background()
	first := newTestDispatcher(t, ClickHouse(st), cfg, clk, 7)
	if _, err := first.Enqueue(ctx, Event{IncidentID: "inc-r", Version: 1, Kind: EventOpened, Payload: testPayload("inc-r", "kv_cache.preemption", "node-2")}); err != nil {
		t.Fatal(err)
	}
	if n, err := deliver(t, first); err != nil || n != 1 {
		t.Fatalf("first attempt: %d (%v)", n, err)
	}
	if _, err := first.Enqueue(ctx, Event{IncidentID: "inc-s", Version: 2, Kind: EventResolved, Payload: testPayload("inc-s", "gpu.power_cap", "node-4")}); err != nil {
		t.Fatal(err)
	}
	// The first dispatcher goes away; the receiver comes back at another
	// address (a new config) under the same receiver name.
	up, upHS := newReceiver(t, "s3cret", clk.Now, "200")
	cfg.Receivers[0].URL = upHS.URL
	second := newTestDispatcher(t, ClickHouse(st), cfg, clk, 8)
	drain(t, second, clk, 10)
	got, _, badSig := up.snapshot()
	if got["inc-r:1:opened"] != 1 || got["inc-s:2:resolved"] != 1 || len(got) != 2 || badSig != 0 {
		t.Errorf("after restart: %v (bad signatures %d), want inc-r:1:opened and inc-s:2:resolved once each", got, badSig)
	}
	if s := states(t, st); s["inc-r:1:opened@pager"] != "delivered/2" || s["inc-s:2:resolved@pager"] != "delivered/1" {
		t.Errorf("attempt states %v", s)
	}
}

// TestPermanentFailureAndGiveUp: a 4xx is not retried; a receiver that
// keeps failing is given up after max_attempts; both are recorded failed.
func TestPermanentFailureAndGiveUp(t *testing.T) {
	st := chstoretest.Fresh(t)
	clk := &clock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	bad, badHS := newReceiver(t, "", clk.Now, "400")
	dead, deadHS := newReceiver(t, "", clk.Now, "500")
	cfg := testConfig(Receiver{Name: "bad", URL: badHS.URL}, Receiver{Name: "dead", URL: deadHS.URL})
	cfg.MaxAttempts = 3
	d := newTestDispatcher(t, ClickHouse(st), cfg, clk, 3)
	if _, err := d.Enqueue(context.Background(), Event{IncidentID: "inc-p", Version: 1, Kind: EventOpened, Payload: testPayload("inc-p", "gpu.xid_error", "node-9")}); err != nil {
		t.Fatal(err)
	}
	drain(t, d, clk, 20)
	_, nb, _ := bad.snapshot()
	_, nd, _ := dead.snapshot()
	if nb != 1 || nd != 3 {
		t.Errorf("requests: bad %d (want 1), dead %d (want max_attempts 3)", nb, nd)
	}
	s := states(t, st)
	if s["inc-p:1:opened@bad"] != "failed/1" || s["inc-p:1:opened@dead"] != "failed/3" {
		t.Errorf("states %v", s)
	}
}

// TestGrouping: one incident pages once per event.
func TestGrouping(t *testing.T) {
	st := chstoretest.Fresh(t)
	clk := &clock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	cfg := testConfig(Receiver{Name: "pager", URL: "http://127.0.0.1:1/"})
	d := newTestDispatcher(t, ClickHouse(st), cfg, clk, 1)
	ctx := context.Background()
	p := func(cause, host string) []byte { return testPayload("inc-g", cause, host) }
	for _, c := range []struct {
		ev   Event
		want int
	}{
		{Event{"inc-g", 1, EventOpened, p("kv_cache.preemption", "node-2")}, 1},
		{Event{"inc-g", 2, EventOpened, p("kv_cache.preemption", "node-2")}, 0},              // opened pages once
		{Event{"inc-g", 3, EventTopCulpritChanged, p("kv_cache.preemption", "node-2")}, 0},   // same top culprit
		{Event{"inc-g", 4, EventTopCulpritChanged, p("queue.saturation", "node-2")}, 1},      // new top culprit
		{Event{"inc-g", 5, EventTopCulpritChanged, p("queue.saturation", "node-2")}, 0},      // unchanged since v4
		{Event{"inc-g", 6, EventTopCulpritChanged, p("queue.saturation", "node-3")}, 1},      // other entity
		{Event{"inc-g", 7, EventResolved, p("queue.saturation", "node-3")}, 1},               //
		{Event{"inc-g", 8, EventResolved, p("queue.saturation", "node-3")}, 0},               // resolved pages once
		{Event{"inc-g", 4, EventTopCulpritChanged, p("queue.saturation", "node-2")}, 0},      // same delivery id again
		{Event{"inc-h", 1, EventOpened, testPayload("inc-h", "gpu.power_cap", "node-5")}, 1}, // another incident
	} {
		n, err := d.Enqueue(ctx, c.ev)
		if err != nil {
			t.Fatal(err)
		}
		if n != c.want {
			t.Errorf("enqueue %s: %d rows, want %d", c.ev.DeliveryID(), n, c.want)
		}
	}
	if _, err := d.Enqueue(ctx, Event{"inc-x", 1, "paged", p("a", "b")}); err == nil {
		t.Error("unknown event kind accepted")
	}
	if _, err := d.Enqueue(ctx, Event{"inc-x", 1, EventOpened, []byte("not json")}); err == nil {
		t.Error("invalid payload accepted")
	}
}

// TestRun: the loop delivers what Enqueue adds, promptly, and stops with
// its context.
func TestRun(t *testing.T) {
	st := chstoretest.Fresh(t)
	rcv, hs := newReceiver(t, "", time.Now, "200")
	cfg := testConfig(Receiver{Name: "pager", URL: hs.URL})
	cfg.PollInterval = Duration(time.Minute) // only Enqueue's wake-up can make it prompt
	d, err := NewDispatcher(ClickHouse(st), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	time.Sleep(200 * time.Millisecond) // the first scan finds nothing
	if _, err := d.Enqueue(ctx, Event{IncidentID: "inc-run", Version: 1, Kind: EventOpened, Payload: testPayload("inc-run", "kv_cache.preemption", "node-2")}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if got, _, _ := rcv.snapshot(); got["inc-run:1:opened"] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Run did not deliver within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
}

func TestBackoff(t *testing.T) {
	d, err := NewDispatcher(fakeStore{}, testConfig(), Options{Rand: rand.New(rand.NewPCG(1, 2))})
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 8; n++ {
		b := min(time.Second<<(n-1), 8*time.Second)
		for i := 0; i < 50; i++ {
			if w := d.backoff(n); w < b/2 || w > b {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n, w, b/2, b)
			}
		}
	}
	// Seeded: the same draws.
	d2, _ := NewDispatcher(fakeStore{}, testConfig(), Options{Rand: rand.New(rand.NewPCG(1, 2))})
	d3, _ := NewDispatcher(fakeStore{}, testConfig(), Options{Rand: rand.New(rand.NewPCG(1, 2))})
	for n := 1; n < 5; n++ {
		if a, b := d2.backoff(n), d3.backoff(n); a != b {
			t.Fatalf("seeded backoff differs: %v vs %v", a, b)
		}
	}
}
