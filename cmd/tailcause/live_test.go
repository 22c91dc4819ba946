package main

// The live benchmark of the whole path, in real time: the fault lab paced by
// the wall clock → OTLP/HTTP → `tailcause all --embedded-kafka` (ingest +
// enrich) → ClickHouse → `tailcause causal` (the scheduled detector, default
// settings) → `tailcause query` (its alert dispatcher) → a local webhook
// receiver. It measures the time from a fault's onset to the first webhook,
// whether that webhook names the fault, and the pages after it.
//
//	TAILCAUSE_TEST_CLICKHOUSE=127.0.0.1:9000 go test -run '^$' -bench LiveDetection -benchtime 1x -timeout 20m ./cmd/tailcause/
//
// Knobs (environment): TAILCAUSE_LIVE_SEED (1), TAILCAUSE_LIVE_ONSET (4m),
// TAILCAUSE_LIVE_DURATION (9m), TAILCAUSE_LIVE_RATE (13 requests/s),
// TAILCAUSE_LIVE_KEEP=1 keeps the database (it is dropped otherwise),
// TAILCAUSE_LIVE_LOGS=dir keeps the roles' logs there.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/lab/faultlab"
	"github.com/tailcause/tailcause/lab/faultlab/sink"
	"github.com/tailcause/tailcause/lab/faultlab/sink/sinktest"
	"github.com/tailcause/tailcause/query/alert"
)

// liveConfig is one live run.
type liveConfig struct {
	clickhouse string
	seed       uint64
	onset      time.Duration // fault onset after the start (0: no fault)
	duration   time.Duration // simulated = wall time of the run
	rate       float64       // requests/s of the model (two pods)
	drain      time.Duration // after the lab ends, how long to keep listening
	keep       bool          // keep the database
	logDir     string        // where the roles' logs go
	progress   io.Writer
	every      time.Duration // progress period
}

// liveHook is one webhook as the receiver saw it.
type liveHook struct {
	at       time.Time
	delivery string
	event    string
	incident string
	version  uint64
	status   string
	breach   string
	cause    string
	entity   map[string]string
	verified bool
}

// culprit is the top culprit in the bench's words: "cause pod=… gpu=…".
func (h liveHook) culprit() string {
	if h.cause == "" {
		return "(none)"
	}
	var parts []string
	for _, k := range []string{"model", "host", "pod", "gpu"} {
		if v := h.entity[k]; v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	return h.cause + " " + strings.Join(parts, ",")
}

// liveResult is what a run measured.
type liveResult struct {
	database   string
	start      time.Time
	onset      time.Time
	faultCause string
	faultPod   string
	requests   int64
	rate       float64 // simulated requests/s
	rowsSeen   int64   // requests in ClickHouse at the end
	hooks      []liveHook
	// The join's delay: enriched_at − end of every request row (enriched_at
	// has a resolution of one second): median, 90th percentile, max.
	joinDelayS [3]float64
	lagBehind  time.Duration // worst pacing lateness once on time
}

func (r *liveResult) right(h liveHook) bool {
	return h.cause == r.faultCause && h.entity["pod"] == r.faultPod
}

// figures: the first page at or after onset (a resolution is no page of
// the fault: it does not count as the detection), the first page naming
// the fault, the webhooks before the onset (false), and the pages after
// the first (same top culprit or another; resolutions apart).
type liveFigures struct {
	first                 *liveHook
	detect                time.Duration
	right                 bool
	detectRight           time.Duration // onset to the first page naming the fault (-1: none)
	early                 int           // webhooks before the onset
	sameAfter, otherAfter int           // pages after the first, same culprit / another
	resolved              int           // resolutions after the onset
}

func (r *liveResult) figures() liveFigures {
	f := liveFigures{detectRight: -1}
	for i := range r.hooks {
		h := &r.hooks[i]
		switch {
		case r.onset.IsZero() || h.at.Before(r.onset):
			f.early++
			continue
		case h.event == string(alert.EventResolved):
			f.resolved++
			continue
		case f.first == nil:
			f.first = h
			f.detect = h.at.Sub(r.onset)
			f.right = r.right(*h)
		case h.culprit() == f.first.culprit():
			f.sameAfter++
		default:
			f.otherAfter++
		}
		if f.detectRight < 0 && r.right(*h) {
			f.detectRight = h.at.Sub(r.onset)
		}
	}
	return f
}

func (r *liveResult) print(w io.Writer) {
	f := r.figures()
	fmt.Fprintf(w, "\nlive detection — database %s, %d requests simulated (%.1f/s), %d rows in ClickHouse\n", r.database, r.requests, r.rate, r.rowsSeen)
	if !r.onset.IsZero() {
		fmt.Fprintf(w, "  fault: %s on pod %s at %s (+%.0f s)\n", r.faultCause, r.faultPod, r.onset.Format(time.TimeOnly), r.onset.Sub(r.start).Seconds())
	}
	for _, h := range r.hooks {
		mark := ""
		if !r.onset.IsZero() {
			mark = fmt.Sprintf("%+6.1fs from onset", h.at.Sub(r.onset).Seconds())
		}
		fmt.Fprintf(w, "  webhook %s  %-19s %s v%d %-8s breach %-28s top %s (signature ok: %v)\n",
			mark, h.event, h.incident, h.version, h.status, h.breach, h.culprit(), h.verified)
	}
	fmt.Fprintf(w, "  join delay (written − request end, ±1 s): median %.0f s, p90 %.0f s, max %.0f s; lab pacing at worst %.2f s late\n",
		r.joinDelayS[0], r.joinDelayS[1], r.joinDelayS[2], r.lagBehind.Seconds())
	switch {
	case r.onset.IsZero():
		fmt.Fprintf(w, "  RESULT: no fault; %d webhooks\n", f.early)
	case f.first == nil:
		fmt.Fprintf(w, "  RESULT: no webhook after the onset (%d before it)\n", f.early)
	default:
		rightAt := "never"
		if f.detectRight >= 0 {
			rightAt = fmt.Sprintf("%.1f s after onset", f.detectRight.Seconds())
		}
		fmt.Fprintf(w, "  RESULT: first webhook %.1f s after onset; top culprit %s (%s); right culprit first paged %s; re-pages after the first: %d with the same top culprit, %d with another; %d resolved after the onset; %d webhooks before the onset\n",
			f.detect.Seconds(), f.first.culprit(), map[bool]string{true: "right", false: "WRONG"}[f.right], rightAt, f.sameAfter, f.otherAfter, f.resolved, f.early)
	}
}

// liveScenario: one model on two pods of one H100 host (one engine per
// GPU), a KV-cache fault on the second pod from onset to the end.
func liveScenario(c liveConfig) (*faultlab.Scenario, error) {
	faults := "[]"
	if c.onset > 0 {
		faults = fmt.Sprintf(`[{"cause": "kv_cache.preemption", "target": {"pod": "llama-3-1-8b-1"}, "onset": %q, "duration": %q, "magnitude": 0.955}]`,
			c.onset.String(), (c.duration - c.onset).String())
	}
	doc := fmt.Sprintf(`{
  "name": "live_kv_two_pods",
  "description": "live benchmark: llama-3.1-8b on two pods of one H100 host, one pod loses 95.5%% of its KV-cache blocks",
  "fleet": {
    "hosts": [{"name": "node-1", "gpu": "H100", "gpus": 2}],
    "models": [{"name": "llama-3.1-8b", "hosts": ["node-1"], "engines": 2, "tp": 1, "rate": %g, "max_batched_tokens": 2048,
      "workload": [{"trace": "azure-conv", "share": 0.7}, {"trace": "azure-code", "share": 0.3}]}]
  },
  "faults": %s
}`, c.rate, faults)
	return faultlab.ParseScenario("live.json", []byte(doc))
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// role is one subcommand running in this process, as its own binary would.
type role struct {
	name string
	done chan error
	log  *os.File
}

func startRole(ctx context.Context, dir, name string, getenv func(string) string, args ...string) (*role, error) {
	f, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	e := &env{stdout: f, stderr: f, log: slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo})), getenv: getenv}
	cmd, ok := commands()[name]
	if !ok {
		f.Close()
		return nil, fmt.Errorf("no command %q", name)
	}
	r := &role{name: name, done: make(chan error, 1), log: f}
	go func() { r.done <- cmd.run(ctx, e, args) }()
	return r, nil
}

func waitTCP(ctx context.Context, addr string, r *role) error {
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case err := <-r.done:
			return fmt.Errorf("%s exited before listening on %s: %v (see %s)", r.name, addr, err, r.log.Name())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// runLive runs the whole path once, in real time.
func runLive(ctx context.Context, c liveConfig) (*liveResult, error) {
	say := func(format string, a ...any) {
		fmt.Fprintf(c.progress, "[live %s] %s\n", time.Now().Format(time.TimeOnly), fmt.Sprintf(format, a...))
	}
	sc, err := liveScenario(c)
	if err != nil {
		return nil, err
	}
	db := fmt.Sprintf("tailcause_live_%d", time.Now().UnixNano())
	res := &liveResult{database: db}
	secret, ingestToken, queryToken := randomHex(16), randomHex(16), randomHex(16)
	getenv := func(k string) string {
		if k == "TAILCAUSE_LIVE_WEBHOOK_SECRET" {
			return secret
		}
		return ""
	}

	// The webhook receiver.
	var mu sync.Mutex
	var hooks []liveHook
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var doc struct {
			Event      string `json:"event"`
			IncidentID string `json:"incident_id"`
			Version    uint64 `json:"incident_version"`
			Status     string `json:"status"`
			Breach     *struct {
				Level  string            `json:"level"`
				Entity map[string]string `json:"entity"`
			} `json:"breach"`
			Culprits []struct {
				Cause  string            `json:"cause"`
				Entity map[string]string `json:"entity"`
			} `json:"culprits"`
		}
		if err := json.Unmarshal(body, &doc); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h := liveHook{at: at, delivery: r.Header.Get("X-Tailcause-Delivery"), event: doc.Event, incident: doc.IncidentID, version: doc.Version, status: doc.Status,
			verified: alert.Verify([]byte(secret), r.Header.Get("X-Tailcause-Signature"), body, at, 5*time.Minute) == nil}
		if doc.Breach != nil {
			h.breach = doc.Breach.Level
			if p := doc.Breach.Entity["pod"]; p != "" {
				h.breach += " pod=" + p
			}
		}
		if len(doc.Culprits) > 0 {
			h.cause, h.entity = doc.Culprits[0].Cause, doc.Culprits[0].Entity
		}
		mu.Lock()
		dup := false
		for _, o := range hooks {
			dup = dup || o.delivery == h.delivery
		}
		if !dup { // at least once: a retried delivery is one page
			hooks = append(hooks, h)
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		say("WEBHOOK %s %s v%d: top %s (signature ok: %v)", h.event, h.incident, h.version, h.culprit(), h.verified)
	}))
	defer recv.Close()
	hooksCfg := filepath.Join(c.logDir, "webhooks.json")
	if err := os.WriteFile(hooksCfg, []byte(fmt.Sprintf(`{"receivers": [{"name": "live-bench", "url": %q, "secret_env": "TAILCAUSE_LIVE_WEBHOOK_SECRET"}]}`, recv.URL+"/hook")), 0o600); err != nil {
		return nil, err
	}

	// The roles, each started as its binary would be (flags only where a
	// default would collide: listen addresses, the database, the secrets).
	grpcAddr, err1 := freeAddr()
	httpAddr, err2 := freeAddr()
	queryAddr, err3 := freeAddr()
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	rctx, stopRoles := context.WithCancel(ctx)
	var roles []*role
	var st *chstore.Store
	// Cleanup, whatever happened: stop the roles and wait for them, then drop
	// the database this run created (unless kept).
	defer func() {
		stopRoles()
		for _, r := range roles {
			if err := <-r.done; err != nil {
				say("%s: %v", r.name, err)
			}
			r.log.Close()
		}
		if st == nil {
			return
		}
		if !c.keep {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := st.Conn().Exec(dctx, "DROP DATABASE IF EXISTS `"+db+"`"); err != nil {
				say("drop database %s: %v", db, err)
			}
		}
		st.Close()
	}()
	store := []string{"--clickhouse", c.clickhouse, "--database", db}
	all, err := startRole(rctx, c.logDir, "all", getenv, append(store, "--embedded-kafka", "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--token", ingestToken, "--metrics-addr", "")...)
	if err != nil {
		return nil, err
	}
	roles = append(roles, all)
	if err := waitTCP(ctx, httpAddr, all); err != nil {
		return nil, err
	}
	causalRole, err := startRole(rctx, c.logDir, "causal", getenv, append(store, "--metrics-addr", "")...)
	if err != nil {
		return nil, err
	}
	roles = append(roles, causalRole)
	queryRole, err := startRole(rctx, c.logDir, "query", getenv, append(store, "--listen", queryAddr, "--token", queryToken, "--webhooks", hooksCfg, "--metrics-addr", "")...)
	if err != nil {
		return nil, err
	}
	roles = append(roles, queryRole)
	if err := waitTCP(ctx, queryAddr, queryRole); err != nil {
		return nil, err
	}
	say("roles up: all (OTLP/HTTP %s, embedded Kafka), causal (defaults), query %s → webhooks %s; database %s; logs in %s",
		httpAddr, queryAddr, recv.URL, db, c.logDir)

	// A connection of our own for progress, and to drop the database.
	scfg := chstore.DefaultConfig()
	scfg.Addr, scfg.Database = c.clickhouse, db
	if st, err = chstore.Open(ctx, scfg); err != nil {
		return nil, err
	}

	// The lab, paced by the wall clock from now.
	hs, err := sink.NewHTTP("http://"+httpAddr, &http.Client{Timeout: 30 * time.Second, Transport: bearer{ingestToken, http.DefaultTransport}})
	if err != nil {
		return nil, err
	}
	paced := sinktest.NewPaced(hs)
	cfg := faultlab.DefaultConfig()
	cfg.Scenario, cfg.Seed, cfg.Duration = sc, c.seed, c.duration
	res.start = time.Now().UTC()
	cfg.Start = res.start
	if c.onset > 0 {
		res.onset, res.faultCause, res.faultPod = res.start.Add(c.onset), "kv_cache.preemption", "llama-3-1-8b-1"
	}
	say("fault lab: %s simulated in real time from %s, seed %d, %g requests/s on 2 pods; fault %s on pod %s at +%s",
		c.duration, res.start.Format(time.TimeOnly), c.seed, c.rate, res.faultCause, res.faultPod, c.onset)
	type labDone struct {
		truth *faultlab.Truth
		err   error
	}
	labc := make(chan labDone, 1)
	lctx, stopLab := context.WithCancel(ctx)
	defer stopLab()
	go func() {
		t, err := faultlab.Run(lctx, cfg, paced)
		labc <- labDone{t, err}
	}()

	tick := time.NewTicker(c.every)
	defer tick.Stop()
	var drainUntil time.Time
	for {
		select {
		case d := <-labc:
			if d.err != nil {
				return nil, d.err
			}
			res.requests = d.truth.Stats.Requests
			res.rate = float64(d.truth.Stats.Requests) / c.duration.Seconds()
			if len(d.truth.Faults) > 0 {
				f := d.truth.Faults[0]
				res.onset, res.faultCause, res.faultPod = f.Onset, f.Cause, f.Entity.Pod
			}
			res.lagBehind = paced.Stats().Worst
			drainUntil = time.Now().Add(c.drain)
			say("fault lab done: %d requests (%.1f/s); listening %s more", res.requests, res.rate, c.drain)
			labc = nil
		case <-tick.C:
			now := time.Now()
			var n uint64
			var newest uint64
			if err := st.Conn().QueryRow(ctx, "SELECT count(), max(end_ns) FROM requests").Scan(&n, &newest); err != nil {
				say("progress query: %v", err)
				continue
			}
			res.rowsSeen = int64(n)
			age := time.Duration(0)
			if newest > 0 {
				age = now.Sub(time.Unix(0, int64(newest)))
			}
			mu.Lock()
			pages := len(hooks)
			mu.Unlock()
			line := fmt.Sprintf("+%4.0fs  sim at +%4.0fs  %6d requests in ClickHouse (newest ends %4.1fs ago)  %d webhooks",
				now.Sub(res.start).Seconds(), paced.Stats().Last.Sub(res.start).Seconds(), n, age.Seconds(), pages)
			if inc := openIncidents(ctx, st); inc != "" {
				line += "  incidents: " + inc
			}
			say("%s", line)
			if !drainUntil.IsZero() && now.After(drainUntil) {
				var q []float64
				var mx float64
				if err := st.Conn().QueryRow(ctx, `SELECT quantiles(0.5, 0.9)(d), max(d) FROM
					(SELECT toFloat64(toUnixTimestamp(enriched_at)) - end_ns / 1e9 AS d FROM requests)`).Scan(&q, &mx); err != nil {
					return nil, fmt.Errorf("join delay: %w", err)
				}
				res.joinDelayS = [3]float64{q[0], q[1], mx}
				stopRoles()
				mu.Lock()
				res.hooks = append([]liveHook(nil), hooks...)
				mu.Unlock()
				return res, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// openIncidents is "id vN status top" for each incident so far.
func openIncidents(ctx context.Context, st *chstore.Store) string {
	rows, err := st.Conn().Query(ctx, `SELECT incident_id, max(version), argMax(status, version), argMax(top_cause, version), argMax(top_entity, version)
		FROM incidents GROUP BY incident_id ORDER BY incident_id`)
	if err != nil {
		return ""
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, status, cause, entity string
		var v uint64
		if rows.Scan(&id, &v, &status, &cause, &entity) == nil {
			out = append(out, fmt.Sprintf("%s v%d %s %s %s", id, v, status, cause, entity))
		}
	}
	return strings.Join(out, "; ")
}

func envDuration(k string, d time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return d
}

// BenchmarkLiveDetection runs the whole path in real time (9 minutes by
// default: 4 healthy, then a KV-cache fault on one of two pods) and
// reports the time from the fault's onset to the first webhook, whether
// its top culprit is the fault (cause and pod), and the pages after it.
func BenchmarkLiveDetection(b *testing.B) {
	addr := os.Getenv("TAILCAUSE_TEST_CLICKHOUSE")
	if addr == "" {
		b.Skip("live detection needs a ClickHouse: set TAILCAUSE_TEST_CLICKHOUSE (e.g. eval \"$(deploy/dev/services.sh up)\"); it runs 9 minutes in real time")
	}
	if f := flag.Lookup("test.bench"); f == nil || !strings.Contains(f.Value.String(), "Live") {
		b.Skip("live detection runs 9 minutes in real time: name it to run it (-bench LiveDetection -benchtime 1x)")
	}
	c := liveConfig{
		clickhouse: addr, seed: 1, rate: 13,
		onset: envDuration("TAILCAUSE_LIVE_ONSET", 4*time.Minute), duration: envDuration("TAILCAUSE_LIVE_DURATION", 9*time.Minute),
		drain: 15 * time.Second, keep: os.Getenv("TAILCAUSE_LIVE_KEEP") == "1", progress: os.Stderr, every: 15 * time.Second,
	}
	if s, err := strconv.ParseUint(os.Getenv("TAILCAUSE_LIVE_SEED"), 10, 64); err == nil {
		c.seed = s
	}
	if r, err := strconv.ParseFloat(os.Getenv("TAILCAUSE_LIVE_RATE"), 64); err == nil && r > 0 {
		c.rate = r
	}
	c.logDir = os.Getenv("TAILCAUSE_LIVE_LOGS")
	if c.logDir == "" {
		c.logDir = b.TempDir()
	} else if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		res, err := runLive(context.Background(), c)
		if err != nil {
			b.Fatal(err)
		}
		res.print(os.Stderr)
		f := res.figures()
		if f.first != nil {
			b.ReportMetric(f.detect.Seconds(), "s-to-first-webhook")
			b.ReportMetric(map[bool]float64{true: 1, false: 0}[f.right], "first-right")
			b.ReportMetric(float64(f.sameAfter), "repages-same-culprit")
			b.ReportMetric(float64(f.otherAfter), "pages-other-culprit")
		}
		if f.detectRight >= 0 {
			b.ReportMetric(f.detectRight.Seconds(), "s-to-right-webhook")
		}
		b.ReportMetric(float64(f.early), "webhooks-before-onset")
		b.ReportMetric(res.rate, "requests/s")
	}
}

// TestLivePathSmoke is the live path for 40 s of a healthy fleet (about a
// minute of wall time): the roles start as binaries would, the paced lab's
// requests reach ClickHouse in real time, and nothing pages.
func TestLivePathSmoke(t *testing.T) {
	addr := os.Getenv("TAILCAUSE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("needs a ClickHouse: set TAILCAUSE_TEST_CLICKHOUSE (eval \"$(deploy/dev/services.sh up)\")")
	}
	if testing.Short() {
		t.Skip("real time: about a minute")
	}
	res, err := runLive(context.Background(), liveConfig{clickhouse: addr, seed: 1, rate: 13, duration: 40 * time.Second,
		drain: 12 * time.Second, logDir: t.TempDir(), progress: io.Discard, every: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	res.print(testWriter{t})
	// The last requests are written once the enricher's idle flush (5 s)
	// found the stream over.
	if res.requests < 200 || res.rowsSeen < res.requests*95/100 {
		t.Errorf("%d requests simulated, %d in ClickHouse 12 s after the end", res.requests, res.rowsSeen)
	}
	// Live, a request waits for the next scrape of each of its series: the
	// GPU's comes every 30 s (dcgm-exporter's default, the lab's).
	if res.joinDelayS[2] > 45 {
		t.Errorf("a request was written %.0f s after it ended: the live path is not keeping up", res.joinDelayS[2])
	}
	if len(res.hooks) != 0 {
		t.Errorf("%d webhooks on a healthy fleet", len(res.hooks))
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestLiveFigures: the figures of a run whose detector paged falsely
// before the onset (resolved after it), then paged a wrong culprit on the
// right pod and changed to the right one (the seed-1 run of a58d744).
func TestLiveFigures(t *testing.T) {
	onset := time.Date(2026, 12, 1, 10, 14, 8, 0, time.UTC)
	pod := map[string]string{"model": "llama-3.1-8b", "host": "node-1", "pod": "llama-3-1-8b-1"}
	at := func(s float64) time.Time { return onset.Add(time.Duration(s * float64(time.Second))) }
	r := &liveResult{onset: onset, faultCause: "kv_cache.preemption", faultPod: "llama-3-1-8b-1", hooks: []liveHook{
		{at: at(-70.1), event: "opened", cause: "workload.long_outputs", entity: map[string]string{"model": "llama-3.1-8b"}},
		{at: at(20), event: "resolved", cause: "workload.long_outputs", entity: map[string]string{"model": "llama-3.1-8b"}},
		{at: at(55), event: "opened", cause: "prefix_cache.miss", entity: pod},
		{at: at(130), event: "top_culprit_changed", cause: "kv_cache.preemption", entity: pod},
		{at: at(150), event: "opened", cause: "kv_cache.preemption", entity: pod},
	}}
	f := r.figures()
	if f.first == nil || f.detect != 55*time.Second || f.right || f.detectRight != 130*time.Second {
		t.Fatalf("first %+v after %v (right %v), right one after %v", f.first, f.detect, f.right, f.detectRight)
	}
	if f.early != 1 || f.resolved != 1 || f.otherAfter != 2 || f.sameAfter != 0 {
		t.Errorf("early %d resolved %d other %d same %d", f.early, f.resolved, f.otherAfter, f.sameAfter)
	}
	r.hooks = r.hooks[3:]
	if f := r.figures(); !f.right || f.sameAfter != 1 || f.detect != 130*time.Second {
		t.Errorf("from the right page: %+v", f)
	}
}
