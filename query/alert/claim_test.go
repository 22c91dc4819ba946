package alert

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// metricValue reads a counter or gauge.
func metricValue(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// deliver runs one scan, again (up to 5 times) when it attempted nothing
// because its claim inserts were too slow to act on (a loaded machine), so
// that a test sees the scan it meant.
func deliver(t *testing.T, d *Dispatcher) (int, error) {
	t.Helper()
	for try := 0; ; try++ {
		n, err := d.DeliverDue(context.Background())
		if n > 0 || err != nil || !d.slowScan.Load() || try == 4 {
			return n, err
		}
	}
}

// attemptCounts counts the attempt rows per delivery@receiver.
func attemptCounts(t *testing.T, st *chstore.Store) map[string]uint64 {
	t.Helper()
	rows, err := st.Conn().Query(context.Background(), `SELECT delivery_id, receiver, count() FROM alert_attempts GROUP BY delivery_id, receiver`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]uint64{}
	for rows.Next() {
		var id, rcv string
		var n uint64
		if err := rows.Scan(&id, &rcv, &n); err != nil {
			t.Fatal(err)
		}
		out[id+"@"+rcv] = n
	}
	return out
}

// TestTwoDispatchersDeliverOnce: two dispatchers on one database (two
// `query` replicas) scan at the same moments; every (event, receiver) is
// delivered exactly once and attempted once. Without claims each replica
// sent every event.
func TestTwoDispatchersDeliverOnce(t *testing.T) {
	st := chstoretest.Fresh(t)
	ctx := context.Background()
	clk := &clock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	pager, pagerHS := newReceiver(t, "s3cret", clk.Now, "200")
	chat, chatHS := newReceiver(t, "", clk.Now, "200")
	cfg := testConfig(
		Receiver{Name: "pager", URL: pagerHS.URL, SecretEnv: "HOOK_SECRET"},
		Receiver{Name: "chat", URL: chatHS.URL, Format: FormatSlack},
	)
	cfg.Batch = 16 // several scans, so the replicas race on each
	ds := [2]*Dispatcher{newTestDispatcher(t, ClickHouse(st), cfg, clk, 1), newTestDispatcher(t, ClickHouse(st), cfg, clk, 2)}
	const events = 40
	want := map[string]bool{}
	for i := range events {
		id := fmt.Sprintf("inc-%02d", i)
		ev := Event{IncidentID: id, Version: 1, Kind: EventOpened, Payload: testPayload(id, "kv_cache.preemption", "node-2")}
		for _, d := range ds { // both replicas' watchers enqueue every event
			if _, err := d.Enqueue(ctx, ev); err != nil {
				t.Fatal(err)
			}
		}
		want[ev.DeliveryID()] = true
	}
	for round := 0; ; round++ {
		if round == 20 {
			t.Fatal("still delivering after 20 rounds")
		}
		var wg sync.WaitGroup
		var n [2]int
		var errs [2]error
		start := make(chan struct{})
		for i, d := range ds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				n[i], errs[i] = d.DeliverDue(ctx)
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n[0]+n[1] == 0 && !ds[0].slowScan.Load() && !ds[1].slowScan.Load() {
			break
		}
	}
	for name, r := range map[string]*receiverLog{"pager": pager, "chat": chat} {
		got, requests, badSig := r.snapshot()
		for id := range want {
			if got[id] != 1 {
				t.Errorf("%s: %s delivered %d times, want once", name, id, got[id])
			}
		}
		if requests != events || badSig != 0 {
			t.Errorf("%s: %d requests (%d badly signed), want %d", name, requests, badSig, events)
		}
	}
	for k, n := range attemptCounts(t, st) {
		if n != 1 {
			t.Errorf("%s: %d attempt rows, want 1", k, n)
		}
	}
	var won, lost float64
	for _, d := range ds {
		won += metricValue(t, d.m.claims.WithLabelValues("won"))
		lost += metricValue(t, d.m.claims.WithLabelValues("lost"))
	}
	if won != 2*events || lost == 0 {
		t.Errorf("claims won %v (want %d), lost %v (want > 0: the replicas raced)", won, 2*events, lost)
	}
}

// TestClaimOfDeadDispatcher: a live claim of a dispatcher that died
// mid-delivery holds its attempt until it expires; an expired or released
// one holds nothing.
func TestClaimOfDeadDispatcher(t *testing.T) {
	st := chstoretest.Fresh(t)
	ctx := context.Background()
	clk := &clock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	rcv, hs := newReceiver(t, "", clk.Now, "200")
	d := newTestDispatcher(t, ClickHouse(st), testConfig(Receiver{Name: "pager", URL: hs.URL}), clk, 1)
	for _, id := range []string{"inc-live", "inc-expired", "inc-released"} {
		if _, err := d.Enqueue(ctx, Event{IncidentID: id, Version: 1, Kind: EventOpened, Payload: testPayload(id, "gpu.xid_error", "node-3")}); err != nil {
			t.Fatal(err)
		}
	}
	hour := uint64(time.Hour)
	for _, q := range []string{
		// claimed now by the server's clock, for an hour
		`INSERT INTO alert_claims (delivery_id, receiver, attempt, claim_id, lease_ns) VALUES ('inc-live:1:opened', 'pager', 1, 'dead/1', ` + fmt.Sprint(hour) + `)`,
		// claimed two hours ago for an hour
		`INSERT INTO alert_claims (delivery_id, receiver, attempt, claim_id, lease_ns, claimed_ns) VALUES ('inc-expired:1:opened', 'pager', 1, 'dead/2', ` + fmt.Sprint(hour) + `, toUnixTimestamp64Nano(now64(9)) - ` + fmt.Sprint(2*hour) + `)`,
		// claimed now and released
		`INSERT INTO alert_claims (delivery_id, receiver, attempt, claim_id, lease_ns) VALUES ('inc-released:1:opened', 'pager', 1, 'dead/3', ` + fmt.Sprint(hour) + `)`,
		`INSERT INTO alert_claims (delivery_id, receiver, attempt, claim_id, lease_ns) VALUES ('inc-released:1:opened', 'pager', 1, 'dead/3', 0)`,
	} {
		if err := st.Conn().Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := deliver(t, d); err != nil || n != 2 {
		t.Fatalf("deliver due: %d (%v), want 2 (the expired and the released claim's)", n, err)
	}
	got, requests, _ := rcv.snapshot()
	if got["inc-expired:1:opened"] != 1 || got["inc-released:1:opened"] != 1 || got["inc-live:1:opened"] != 0 || requests != 2 {
		t.Errorf("delivered %v in %d requests; want inc-expired and inc-released once, inc-live not (its claim is live)", got, requests)
	}
}

// TestWriteFailureAfterDelivery: ClickHouse takes reads but refuses writes
// (a CHECK constraint that fails every row) right after a POST was
// delivered. The dispatcher used to send the webhook again at every scan
// (every 2 s for 24 h); now it holds the attempt, retries its write with
// backoff and sends nothing more; a restarted replica cannot claim and
// sends nothing either; once writes pass, the held attempt is recorded and
// the event was delivered once.
func TestWriteFailureAfterDelivery(t *testing.T) {
	st := chstoretest.Fresh(t)
	ctx := context.Background()
	clk := &clock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	rcv, hs := newReceiver(t, "", clk.Now, "200")
	cfg := testConfig(Receiver{Name: "pager", URL: hs.URL})
	d := newTestDispatcher(t, ClickHouse(st), cfg, clk, 1)
	if _, err := d.Enqueue(ctx, Event{IncidentID: "inc-w", Version: 1, Kind: EventOpened, Payload: testPayload("inc-w", "kv_cache.preemption", "node-2")}); err != nil {
		t.Fatal(err)
	}
	refuse := func(table string, on bool) {
		t.Helper()
		q := "ALTER TABLE " + table + " ADD CONSTRAINT refuse_writes CHECK 0"
		if !on {
			q = "ALTER TABLE " + table + " DROP CONSTRAINT refuse_writes"
		}
		if err := st.Conn().Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	refuse("alert_attempts", true)
	if _, err := deliver(t, d); err == nil || !strings.Contains(err.Error(), "record") {
		t.Fatalf("deliver due with attempts refused: %v, want the record error", err)
	}
	if got, requests, _ := rcv.snapshot(); got["inc-w:1:opened"] != 1 || requests != 1 {
		t.Fatalf("first scan: %v in %d requests, want one delivery", got, requests)
	}
	if v := metricValue(t, d.m.unrecorded); v != 1 {
		t.Errorf("unrecorded attempts %v, want 1", v)
	}
	// 100 s of scans every 2 s.
	for range 50 {
		clk.Advance(2 * time.Second)
		_, _ = d.DeliverDue(ctx)
	}
	if _, requests, _ := rcv.snapshot(); requests != 1 {
		t.Errorf("while writes fail: %d requests, want still 1", requests)
	}
	// No new attempt while the held one is unrecorded: not even a claim
	// (within its lease the first claim would stop a re-send; past it,
	// nothing else would).
	if c := metricValue(t, d.m.claims.WithLabelValues("won")) + metricValue(t, d.m.claims.WithLabelValues("lost")); c != 1 {
		t.Errorf("%v claims settled while the attempt was held, want only the first", c)
	}
	// Retried with backoff (1 s doubling to 8 s), not at every scan.
	if f := metricValue(t, d.m.recordFailures); f < 3 || f > 20 {
		t.Errorf("%v failed writes of the held attempt in 50 scans, want a backed-off few (3..20)", f)
	}
	// All writes refused; a restarted replica (no memory of the POST)
	// cannot claim, so it sends nothing.
	refuse("alert_claims", true)
	again := newTestDispatcher(t, ClickHouse(st), cfg, clk, 2)
	for range 5 {
		clk.Advance(2 * time.Second)
		if _, err := again.DeliverDue(ctx); err == nil || !strings.Contains(err.Error(), "claim") {
			t.Errorf("a replica scanning with claims refused: %v, want the claim error", err)
		}
	}
	if _, requests, _ := rcv.snapshot(); requests != 1 {
		t.Errorf("restarted replica while writes fail: %d requests, want still 1", requests)
	}
	refuse("alert_claims", false)
	refuse("alert_attempts", false)
	clk.Advance(10 * time.Second) // past the longest record backoff
	if _, err := deliver(t, d); err != nil {
		t.Fatalf("after writes pass again: %v", err)
	}
	if s := states(t, st); s["inc-w:1:opened@pager"] != "delivered/1" {
		t.Errorf("attempt states %v, want inc-w delivered after 1 attempt", s)
	}
	if v := metricValue(t, d.m.unrecorded); v != 0 {
		t.Errorf("unrecorded attempts %v after the write, want 0", v)
	}
	for _, x := range []*Dispatcher{d, again} {
		if n, err := deliver(t, x); err != nil || n != 0 {
			t.Errorf("after recovery: %d due (%v), want 0", n, err)
		}
	}
	if _, requests, _ := rcv.snapshot(); requests != 1 {
		t.Errorf("in all: %d requests, want 1", requests)
	}
}

// slowClaims is the real store with its first n claim inserts delayed.
type slowClaims struct {
	Store
	mu    sync.Mutex
	n     int
	delay time.Duration
}

func (s *slowClaims) insertClaims(ctx context.Context, rows [][]any) error {
	s.mu.Lock()
	slow := s.n > 0
	if slow {
		s.n--
	}
	s.mu.Unlock()
	err := s.Store.insertClaims(ctx, rows)
	if slow {
		time.Sleep(s.delay) // acknowledged late: as an insert that took this long
	}
	return err
}

// TestSlowClaimNotActedOn: a claim whose insert took half the settle time
// or more may have been missed by a competitor: it is released, not acted
// on, and the scan claims again.
func TestSlowClaimNotActedOn(t *testing.T) {
	real := chstoretest.Fresh(t)
	st := &slowClaims{Store: ClickHouse(real), n: 1}
	ctx := context.Background()
	clk := &clock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	rcv, hs := newReceiver(t, "", clk.Now, "200")
	cfg := testConfig(Receiver{Name: "pager", URL: hs.URL})
	st.delay = time.Duration(cfg.ClaimSettle) // twice the threshold
	d := newTestDispatcher(t, st, cfg, clk, 1)
	if _, err := d.Enqueue(ctx, Event{IncidentID: "inc-s", Version: 1, Kind: EventOpened, Payload: testPayload("inc-s", "gpu.xid_error", "node-3")}); err != nil {
		t.Fatal(err)
	}
	if n, err := d.DeliverDue(ctx); err != nil || n != 1 {
		t.Fatalf("deliver due: %d (%v), want the second claim to deliver", n, err)
	}
	if got, requests, _ := rcv.snapshot(); got["inc-s:1:opened"] != 1 || requests != 1 {
		t.Errorf("delivered %v in %d requests, want once", got, requests)
	}
	if v := metricValue(t, d.m.claims.WithLabelValues("slow")); v != 1 {
		t.Errorf("slow claims %v, want 1", v)
	}
	var claims, released uint64
	if err := real.Conn().QueryRow(ctx, "SELECT uniqExact(claim_id), countIf(lease_ns = 0) FROM alert_claims").Scan(&claims, &released); err != nil {
		t.Fatal(err)
	}
	if claims != 2 || released != 1 {
		t.Errorf("%d claim ids, %d releases; want 2 claims, the slow one released", claims, released)
	}
}
