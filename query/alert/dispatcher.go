package alert

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Options carries what main injects; nil fields take defaults.
type Options struct {
	Logger *slog.Logger
	Now    func() time.Time // default time.Now
	// Rand draws the backoff jitter; default a PCG seeded from Now. Tests
	// pass a seeded source.
	Rand *rand.Rand
	// Getenv resolves receivers' SecretEnv (main passes os.Getenv).
	Getenv func(string) string
	// Client sends the requests; its redirects are never followed (a
	// redirected webhook is a configuration error). Default: a new client.
	Client *http.Client
	// ReportURL makes the report link of an incident; nil sends none.
	ReportURL func(incidentID string) string
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Owner names this dispatcher in its claims (alert_claims.claim_id);
	// default: host name, process id and a random suffix. Dispatchers
	// sharing a database must have different owners.
	Owner string
}

// Dispatcher enqueues incident events into the outbox and delivers them.
// Run delivers until its context ends; Enqueue may be called at any time,
// also while Run is not running (the rows wait in ClickHouse).
type Dispatcher struct {
	db        Store
	cfg       Config
	log       *slog.Logger
	now       func() time.Time
	client    *http.Client
	reportURL func(string) string
	receivers map[string]receiver
	order     []string

	randMu sync.Mutex
	rand   *rand.Rand

	enqMu sync.Mutex    // serialises Enqueue's read-then-insert
	wake  chan struct{} // Enqueue → Run, capacity 1
	m     *metrics

	owner string
	// deliverMu serialises DeliverDue; it guards what follows.
	deliverMu sync.Mutex
	claimSeq  uint64
	// unrecorded holds the attempt rows of a scan whose write failed: the
	// attempts happened (a POST may have been delivered) and must not be
	// made again. While it is not empty no new attempt is made; its write
	// is retried at recordNext, backing off.
	unrecorded  [][]any
	recordNext  time.Time
	recordTries int
	// slowScan: the last scan gave its claims up as too slow (claim).
	slowScan atomic.Bool
}

type receiver struct {
	Receiver
	secret []byte
	events map[EventKind]bool // nil: all
}

// NewDispatcher checks the config, resolves the receivers' secrets and
// returns a dispatcher over db (migrated with 0003_alerts.sql).
func NewDispatcher(db Store, cfg Config, opts Options) (*Dispatcher, error) {
	if db == nil {
		return nil, errors.New("new alert dispatcher: nil store")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Dispatcher{db: db, cfg: cfg, log: opts.Logger, now: opts.Now, rand: opts.Rand, reportURL: opts.ReportURL,
		receivers: map[string]receiver{}, wake: make(chan struct{}, 1), owner: opts.Owner}
	if d.owner == "" {
		d.owner = defaultOwner()
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.now == nil {
		d.now = time.Now
	}
	if d.rand == nil {
		seed := uint64(d.now().UnixNano())
		d.rand = rand.New(rand.NewPCG(seed, seed>>1|1))
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	base := opts.Client
	if base == nil {
		base = &http.Client{}
	}
	c := *base
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	d.client = &c
	for _, r := range cfg.Receivers {
		rc := receiver{Receiver: r}
		if r.SecretEnv != "" {
			s := getenv(r.SecretEnv)
			if s == "" {
				return nil, fmt.Errorf("new alert dispatcher: receiver %q: environment variable %s (its secret) is empty", r.Name, r.SecretEnv)
			}
			rc.secret = []byte(s)
		}
		if len(r.Events) > 0 {
			rc.events = map[EventKind]bool{}
			for _, e := range r.Events {
				rc.events[e] = true
			}
		}
		d.receivers[r.Name] = rc
		d.order = append(d.order, r.Name)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	d.m = m
	return d, nil
}

// Enqueue writes ev to the outbox, one row per receiver that takes its
// kind, before any delivery is tried; it returns how many rows it wrote.
// It is idempotent: an event already in the outbox (same delivery id and
// receiver), or one grouped with an earlier event of the incident (see
// grouped), writes nothing. An error means nothing may have been written:
// call again.
func (d *Dispatcher) Enqueue(ctx context.Context, ev Event) (int, error) {
	if err := ev.validate(); err != nil {
		return 0, fmt.Errorf("enqueue %s: %w", ev.DeliveryID(), err)
	}
	d.enqMu.Lock()
	defer d.enqMu.Unlock()
	have, err := d.db.outboxReceivers(ctx, ev.DeliveryID())
	if err != nil {
		return 0, fmt.Errorf("enqueue %s: %w", ev.DeliveryID(), err)
	}
	if len(have) == 0 {
		dup, reason, err := grouped(ctx, d.db, ev)
		if err != nil {
			return 0, fmt.Errorf("enqueue %s: %w", ev.DeliveryID(), err)
		}
		if dup {
			d.m.skipped.WithLabelValues(reason).Inc()
			return 0, nil
		}
	}
	now := d.now().UTC()
	var rows [][]any
	for _, name := range d.order {
		r := d.receivers[name]
		if have[name] || (r.events != nil && !r.events[ev.Kind]) {
			continue
		}
		rows = append(rows, []any{ev.DeliveryID(), name, ev.IncidentID, ev.Version, string(ev.Kind), string(ev.Payload),
			uint64(now.UnixNano()), now.Truncate(time.Second)})
	}
	if len(rows) == 0 {
		return 0, nil
	}
	if err := d.db.insertOutbox(ctx, rows); err != nil {
		return 0, fmt.Errorf("enqueue %s: %w", ev.DeliveryID(), err)
	}
	d.m.enqueued.WithLabelValues(string(ev.Kind)).Add(float64(len(rows)))
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return len(rows), nil
}

// Run delivers due outbox rows until ctx ends, scanning every
// PollInterval and whenever Enqueue adds rows. A ClickHouse failure is
// logged and retried at the next scan. It returns nil when ctx ends.
func (d *Dispatcher) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-d.wake:
		}
		n, err := d.DeliverDue(ctx)
		wait := time.Duration(d.cfg.PollInterval)
		switch {
		case err != nil && ctx.Err() == nil:
			// ClickHouse failing: back off (PollInterval doubling to
			// MaxBackoff), not a warning and a scan every PollInterval.
			failures++
			for i := 1; i < failures && wait < time.Duration(d.cfg.MaxBackoff); i++ {
				wait *= 2
			}
			wait = min(wait, max(time.Duration(d.cfg.MaxBackoff), time.Duration(d.cfg.PollInterval)))
			d.log.Warn("alert dispatch scan failed", "err", err, "failures", failures, "next_in", wait)
		case err == nil:
			failures = 0
			if n == d.cfg.Batch {
				wait = 0 // a full batch: more are probably due
			}
			if d.slowScan.Load() {
				wait = min(wait, time.Duration(d.cfg.ClaimSettle)) // claim again soon
			}
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(wait)
	}
}

// DeliverDue runs one scan: it claims the due deliveries (at most Batch;
// see claim.go), attempts those it won, Concurrency at a time, records
// each attempt, and returns how many it attempted.
//
// When the attempt rows cannot be written, the attempts are kept in memory
// and no new attempt is made until they are: a delivered POST is not sent
// again because its record is missing (the dispatcher used to re-send it at
// every scan, every 2 s for 24 h, while ClickHouse took reads but refused
// writes). The write is retried with backoff (InitialBackoff doubling to
// MaxBackoff); meanwhile DeliverDue returns the write's error at each retry
// and does nothing in between.
func (d *Dispatcher) DeliverDue(ctx context.Context) (int, error) {
	d.deliverMu.Lock()
	defer d.deliverMu.Unlock()
	d.slowScan.Store(false)
	now := d.now()
	if len(d.unrecorded) > 0 {
		if now.Before(d.recordNext) {
			return 0, nil
		}
		if err := d.record(ctx, d.unrecorded); err != nil {
			d.recordTries++
			d.recordNext = now.Add(d.recordBackoff(d.recordTries))
			return 0, fmt.Errorf("record %d delivery attempts (held since their write failed; no new attempt until it succeeds): %w", len(d.unrecorded), err)
		}
		d.unrecorded, d.recordTries = nil, 0
		d.m.unrecorded.Set(0)
	}
	list, err := d.db.due(ctx, now, now.Add(-outboxLookback(time.Duration(d.cfg.MaxAge))), d.cfg.Batch)
	if err != nil {
		return 0, err
	}
	if len(list) == 0 {
		return 0, nil
	}
	docs, err := d.db.payloads(ctx, deliveryIDs(list))
	if err != nil {
		return 0, err
	}
	list, claimID, claimed, err := d.claim(ctx, list)
	if err != nil || len(list) == 0 {
		return 0, err
	}
	results := make([][]any, len(list))
	sem := make(chan struct{}, d.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, p := range list {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i] = d.attempt(ctx, p, docs[p.deliveryID], claimed)
		}()
	}
	wg.Wait()
	var rows [][]any
	var skipped []pending
	for i, r := range results {
		if r != nil {
			rows = append(rows, r)
		} else {
			skipped = append(skipped, list[i])
		}
	}
	d.release(ctx, claimID, skipped)
	if len(rows) == 0 {
		return 0, nil
	}
	if err := d.record(ctx, rows); err != nil {
		d.unrecorded, d.recordTries = rows, 1
		d.recordNext = d.now().Add(d.recordBackoff(1))
		d.m.unrecorded.Set(float64(len(rows)))
		return len(rows), fmt.Errorf("record %d delivery attempts (held in memory, retried with backoff): %w", len(rows), err)
	}
	return len(rows), nil
}

// record writes attempt rows, even when ctx has ended (so a delivery that
// happened is not repeated needlessly), bounded by recordTimeout.
func (d *Dispatcher) record(ctx context.Context, rows [][]any) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if err := d.db.insertAttempts(rctx, rows); err != nil {
		d.m.recordFailures.Inc()
		return err
	}
	return nil
}

// recordBackoff is the wait after the n-th failed write of attempt rows:
// InitialBackoff doubling to MaxBackoff (no jitter: one writer).
func (d *Dispatcher) recordBackoff(n int) time.Duration {
	b := time.Duration(d.cfg.InitialBackoff)
	for i := 1; i < n && b < time.Duration(d.cfg.MaxBackoff); i++ {
		b *= 2
	}
	return min(b, time.Duration(d.cfg.MaxBackoff))
}

// attempt delivers one (delivery, receiver) and returns its attempt row,
// or nil when nothing was sent and nothing is to be recorded: ctx ended
// mid-flight, or the claim made at claimed (monotonic) has no room left for
// the receiver's timeout and the recording before its lease runs out. The
// caller releases the claims of those.
func (d *Dispatcher) attempt(ctx context.Context, p pending, doc []byte, claimed time.Time) []any {
	if r, ok := d.receivers[p.receiver]; ok && time.Since(claimed)+time.Duration(r.Timeout)+recordTimeout >= d.cfg.lease() {
		return nil
	}
	start := d.now()
	n := uint32(p.attempts + 1)
	row := func(state string, code int, errText string, next time.Time) []any {
		d.m.attempts.WithLabelValues(p.receiver, state).Inc()
		var nextNs uint64
		if !next.IsZero() {
			nextNs = uint64(next.UnixNano())
		}
		if len(errText) > 500 {
			errText = errText[:500]
		}
		return []any{p.deliveryID, p.receiver, n, state, uint16(code), errText,
			float64(d.now().Sub(start)) / float64(time.Millisecond), uint64(start.UnixNano()), start.UTC().Truncate(time.Second), nextNs}
	}
	r, ok := d.receivers[p.receiver]
	if !ok {
		return row(StateFailed, 0, "receiver is no longer configured", time.Time{})
	}
	if doc == nil {
		return row(StateFailed, 0, "outbox payload missing", time.Time{})
	}
	if age := start.Sub(time.Unix(0, int64(p.createdNs))); age > time.Duration(d.cfg.MaxAge) {
		return row(StateFailed, 0, fmt.Sprintf("given up: still undelivered %v after it was enqueued (max_age %v)", age.Round(time.Second), time.Duration(d.cfg.MaxAge)), time.Time{})
	}
	ev := Event{IncidentID: p.incidentID, Version: p.version, Kind: p.event, Payload: doc}
	var link string
	if d.reportURL != nil {
		link = d.reportURL(p.incidentID)
	}
	b, err := body(r.Format, ev, link)
	if err != nil {
		return row(StateFailed, 0, err.Error(), time.Time{})
	}
	code, retryAfter, err := d.send(ctx, r, ev, n, b)
	if ctx.Err() != nil {
		return nil
	}
	switch {
	case err == nil && code >= 200 && code < 300:
		return row(StateDelivered, code, "", time.Time{})
	case err == nil && !retriable(code):
		return row(StateFailed, code, fmt.Sprintf("permanent failure: HTTP %d", code), time.Time{})
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	} else {
		msg = fmt.Sprintf("HTTP %d", code)
	}
	if int(n) >= d.cfg.MaxAttempts {
		return row(StateFailed, code, fmt.Sprintf("given up after %d attempts: %s", n, msg), time.Time{})
	}
	wait := d.backoff(int(n))
	if retryAfter > wait {
		wait = min(retryAfter, time.Duration(d.cfg.MaxBackoff))
	}
	return row(StateRetry, code, msg, d.now().Add(wait))
}

// retriable: server errors, timeouts, rate limits; other statuses are the
// request's or the configuration's fault and will not change by retrying.
func retriable(code int) bool {
	return code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code == http.StatusTooEarly
}

// backoff is the wait after the n-th failed attempt: InitialBackoff·2^(n-1)
// capped at MaxBackoff, drawn uniformly from [b/2, b) ("equal jitter").
func (d *Dispatcher) backoff(n int) time.Duration {
	b := time.Duration(d.cfg.InitialBackoff)
	for i := 1; i < n && b < time.Duration(d.cfg.MaxBackoff); i++ {
		b *= 2
	}
	b = min(b, time.Duration(d.cfg.MaxBackoff))
	half := b / 2
	d.randMu.Lock()
	j := time.Duration(d.rand.Int64N(int64(half) + 1))
	d.randMu.Unlock()
	return half + j
}

// send POSTs one delivery; it returns the status and the Retry-After wait.
func (d *Dispatcher) send(ctx context.Context, r receiver, ev Event, attempt uint32, b []byte) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(r.Timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(b))
	if err != nil {
		return 0, 0, fmt.Errorf("build request to %s: %w", r.Name, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "tailcause-alert/1")
	req.Header.Set(HeaderDelivery, ev.DeliveryID())
	req.Header.Set(HeaderEvent, string(ev.Kind))
	req.Header.Set(HeaderAttempt, strconv.FormatUint(uint64(attempt), 10))
	if r.secret != nil {
		req.Header.Set(HeaderSignature, Sign(r.secret, d.now(), b))
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("post to %s: %w", r.Name, redact(err, r.URL))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	var ra time.Duration
	if v := resp.Header.Get("Retry-After"); v != "" {
		if s, err := strconv.Atoi(v); err == nil && s > 0 {
			ra = time.Duration(s) * time.Second
		}
	}
	return resp.StatusCode, ra, nil
}

// redact keeps webhook URLs (whose paths are often secrets, as in Slack's)
// out of recorded errors.
func redact(err error, u string) error {
	return errors.New(strings.ReplaceAll(err.Error(), u, "<receiver url>"))
}

type metrics struct {
	enqueued       *prometheus.CounterVec
	skipped        *prometheus.CounterVec
	attempts       *prometheus.CounterVec
	claims         *prometheus.CounterVec
	recordFailures prometheus.Counter
	unrecorded     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		enqueued: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tailcause", Subsystem: "alert", Name: "enqueued_total",
			Help: "Outbox rows written, by event."}, []string{"event"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tailcause", Subsystem: "alert", Name: "grouped_total",
			Help: "Events not enqueued because an earlier event of the incident covers them, by reason."}, []string{"reason"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tailcause", Subsystem: "alert", Name: "attempts_total",
			Help: "Delivery attempts by receiver and resulting state (delivered, retry, failed)."}, []string{"receiver", "state"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tailcause", Subsystem: "alert", Name: "claims_total",
			Help: "Claims on due deliveries by result: won (attempted here), lost (another dispatcher's), slow (the claim insert took half the settle time: not acted on), released."}, []string{"result"}),
		recordFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tailcause", Subsystem: "alert", Name: "record_failures_total",
			Help: "Failed writes of delivery attempt rows (retried with backoff; no new attempt is made meanwhile)."}),
		unrecorded: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "tailcause", Subsystem: "alert", Name: "unrecorded_attempts",
			Help: "Delivery attempts made but not yet recorded in ClickHouse (held in memory, never re-sent by this dispatcher)."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.enqueued, m.skipped, m.attempts, m.claims, m.recordFailures, m.unrecorded} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register alert metrics: %w", err)
			}
		}
	}
	return m, nil
}

// defaultOwner names a dispatcher uniquely enough: host, process, random.
func defaultOwner() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = crand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
