package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tailcause/tailcause/causal"
	"github.com/tailcause/tailcause/causal/incident"
	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/lab/eval"
	"github.com/tailcause/tailcause/lab/faultlab"
	"github.com/tailcause/tailcause/query"
	"github.com/tailcause/tailcause/query/alert"
)

// cmdDemo is the whole story in one command: ClickHouse, an in-process
// Kafka broker, the fault lab running a fault scenario through the real
// pipeline, the incident and its ranked culprits, the webhook delivered to
// a local receiver, and the report page.
func cmdDemo(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var sf storeFlags
	sf.register(fs, e)
	scenario := fs.String("scenario", "kv_cache_preemption", "fault-lab scenario (tailcause sim --list)")
	seed := fs.Uint64("seed", 1, "simulation seed")
	duration := fs.Duration("duration", 20*time.Minute, "simulated time")
	listen := fs.String("listen", "127.0.0.1:8080", "where the report page is served")
	hold := fs.Bool("hold", isTerminal(e.stdout), "keep serving the report until interrupted (default when run in a terminal)")
	fs.Lookup("database").DefValue = "tailcause_demo"
	if err := fs.Lookup("database").Value.Set("tailcause_demo"); err != nil {
		return err
	}
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	t0 := time.Now()
	say := func(step int, format string, a ...any) {
		fmt.Fprintf(e.stdout, "[%d/6 %5.1fs] %s\n", step, time.Since(t0).Seconds(), fmt.Sprintf(format, a...))
	}

	if *duration <= 0 {
		return fmt.Errorf("%w: --duration %v: want a positive simulated time, e.g. 20m", errUsage, *duration)
	}
	sc, err := faultlab.LoadScenario(*scenario)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	st, err := sf.open(ctx, e, schemaConnect)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := resetDatabase(ctx, st); err != nil {
		return err
	}
	if _, err := st.Migrate(ctx, nil); err != nil {
		return err
	}
	say(1, "ClickHouse %s at %s, database %s (fresh)", st.Version(), sf.addr, st.Database())

	say(2, "fault lab: scenario %q, seed %d, %s simulated — %s", sc.Name, *seed, *duration, sc.Description)
	cfg := faultlab.DefaultConfig()
	cfg.Scenario, cfg.Seed, cfg.Duration = sc, *seed, *duration
	var prog io.Writer = e.stderr
	truth, err := runLab(ctx, e, st, cfg, prog)
	if err != nil {
		return err
	}
	say(3, "pipeline: %d requests and %d metric points through in-process Kafka → enrich → ClickHouse",
		truth.Stats.Requests, truth.Stats.MetricPoints)

	an, err := causal.NewAnalyzer(causal.StoreDB(st), causal.DefaultConfig())
	if err != nil {
		return err
	}
	// The on-call question, fleet-wide: why was the tail bad over the run,
	// and where? The window is the whole run, chosen without the truth.
	window := causal.Interval{Start: truth.Start, End: truth.End}
	sw, err := an.Sweep(ctx, causal.SweepRequest{SLO: causal.SLO{Signal: "e2e_latency", Quantile: 0.99}, Window: window})
	if err != nil {
		return err
	}
	say(4, "rank %s..%s, fleet-wide (%d scopes): %d breach(es)", window.Start.Format(time.RFC3339), window.End.Format(time.RFC3339), len(sw.Scopes), len(sw.Breaches))
	for i, b := range sw.Breaches {
		where := "the scope's P99"
		if w := b.Incident.Breach; w != nil && w.Level != causal.LevelScope {
			where = w.Level + " " + causal.EntityString(w.Entity) + " against its peers"
		}
		fmt.Fprintf(e.stdout, "      breach %d: %s, %s: P99 %.0f ms against a baseline of %.0f ms\n", i+1, causal.ScopeString(b.Incident.SLO.Scope), where, b.Incident.ObservedP99MS, b.Incident.BaselineP99MS)
	}
	verdict := groundTruthVerdict(sw.Breaches, truth)
	if len(sw.Breaches) == 0 {
		fmt.Fprintln(e.stdout, verdict)
		return errors.New("demo: no incident fired for a fault scenario")
	}
	in := sw.Breaches[0].Incident
	printCulprits(e.stdout, in)
	fmt.Fprintln(e.stdout, verdict)
	now := time.Now().UTC()
	if err := incident.Write(ctx, causal.StoreDB(st), incident.Record{Incident: in, Version: 1, State: incident.StateFiring, OpenedAt: now, UpdatedAt: now}); err != nil {
		return err
	}
	payload, err := json.Marshal(in)
	if err != nil {
		return err
	}

	// The report server (no auth: a local demo) and a local webhook receiver.
	qcfg := query.DefaultConfig()
	qcfg.AllowNoAuth = true
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("listen for the report page: %w", err)
		}
	}
	qcfg.BaseURL = "http://" + ln.Addr().String()
	srv, err := query.New(query.ClickHouse(st), qcfg, query.Options{Logger: e.log})
	if err != nil {
		return err
	}
	hs := srv.HTTPServer(ln.Addr().String())
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()

	delivered, recvURL, stopRecv, err := webhookReceiver()
	if err != nil {
		return err
	}
	defer stopRecv()
	secret := randomHex(16)
	acfg := alert.DefaultConfig()
	acfg.Receivers = []alert.Receiver{{Name: "demo-receiver", URL: recvURL, SecretEnv: "TAILCAUSE_DEMO_WEBHOOK_SECRET"}}
	getenv := func(k string) string {
		if k == "TAILCAUSE_DEMO_WEBHOOK_SECRET" {
			return secret
		}
		return e.getenv(k)
	}
	d, err := alert.NewDispatcher(alert.ClickHouse(st), acfg, alert.Options{Logger: e.log, Getenv: getenv, ReportURL: srv.ReportURL})
	if err != nil {
		return err
	}
	if _, err := d.Enqueue(ctx, alert.Event{IncidentID: in.IncidentID, Version: 1, Kind: alert.EventOpened, Payload: payload}); err != nil {
		return err
	}
	var got webhookDelivery
	deadline := time.Now().Add(30 * time.Second)
	for got.body == nil {
		if _, err := d.DeliverDue(ctx); err != nil {
			return err
		}
		select {
		case got = <-delivered:
		case <-time.After(500 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("demo: the webhook was not delivered within 30 s")
		}
	}
	sigOK := alert.Verify([]byte(secret), got.signature, got.body, time.Now(), 5*time.Minute) == nil
	say(5, "webhook delivered to %s (delivery %s, signature verified: %v)", recvURL, got.delivery, sigOK)
	if !sigOK {
		return errors.New("demo: webhook signature did not verify")
	}
	say(6, "report: %s", srv.ReportURL(in.IncidentID))
	fmt.Fprintf(e.stdout, "done in %.0f s.", time.Since(t0).Seconds())
	if strings.HasPrefix(verdict, "MISMATCH") {
		fmt.Fprintln(e.stdout)
		return errors.New("demo: the top culprit does not match the scenario's ground truth")
	}
	if !*hold {
		fmt.Fprintln(e.stdout, " (run with --hold to keep the report page up)")
		return nil
	}
	fmt.Fprintln(e.stdout, " Serving the report until interrupted (Ctrl-C).")
	<-ctx.Done()
	return nil
}

// resetDatabase drops the demo's tables so every demo starts clean.
func resetDatabase(ctx context.Context, st *chstore.Store) error {
	rows, err := st.Conn().Query(ctx, "SELECT name FROM system.tables WHERE database = currentDatabase()")
	if err != nil {
		return fmt.Errorf("list demo tables: %w", err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		names = append(names, n)
	}
	rows.Close()
	for _, n := range names {
		if err := st.Conn().Exec(ctx, "DROP TABLE IF EXISTS `"+n+"`"); err != nil {
			return fmt.Errorf("drop demo table %s: %w", n, err)
		}
	}
	return nil
}

func printCulprits(w io.Writer, in causal.Incident) {
	if len(in.Culprits) == 0 {
		fmt.Fprintln(w, "        (no culprits)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "        rank\tcause\tentity\teffect ms\tattributable\tcounterfactual P99 ms\thealth")
	for _, c := range in.Culprits {
		fmt.Fprintf(tw, "        %d\t%s\t%s\t%.0f [%.0f, %.0f]\t%.2f\t%.0f\t%.2f\n", c.Rank, c.Cause, causal.EntityString(c.Entity),
			c.EffectMS, c.CI95MS[0], c.CI95MS[1], c.AttributableFraction, c.CounterfactualP99MS, c.Health)
	}
	tw.Flush()
	if ev := in.Culprits[0].Evidence; len(ev) > 0 {
		fmt.Fprintf(w, "        evidence: %s\n", strings.Join(ev, "; "))
	}
}

// groundTruthVerdict compares the fleet-wide answer's top culprit (the
// most severe breach's) with the scenario's truth, with the eval's strict
// scorer.
func groundTruthVerdict(breaches []*causal.Analysis, truth *faultlab.Truth) string {
	if len(truth.Faults) == 0 {
		if len(breaches) == 0 {
			return "ground truth: no fault — and no incident: OK"
		}
		return "MISMATCH: ground truth has no fault, but an incident fired"
	}
	f := truth.Faults[0]
	want := fmt.Sprintf("%s on %s", f.Cause, entityText(f.Entity))
	ranked := eval.Flatten(breaches)
	if len(ranked) == 0 {
		return "MISMATCH: ground truth is " + want + ", but no culprit was ranked"
	}
	c := ranked[0]
	if string(c.Cause) != f.Cause {
		return fmt.Sprintf("MISMATCH: ground truth is %s, top culprit is %s", want, c.Cause)
	}
	if ok, why := eval.NewScorer(truth).Match(c, f); !ok {
		return "MISMATCH: ground truth is " + want + "; the top culprit has its cause but not its entity (" + causal.EntityString(c.Entity) + ": " + why + ")"
	}
	return "ground truth: " + want + " — top culprit matches (cause and entity)"
}

func entityText(en faultlab.Entity) string {
	var parts []string
	for _, kv := range [][2]string{{"host", en.Host}, {"gpu", en.GPU}, {"pod", en.Pod}, {"model", en.Model}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	return strings.Join(parts, ",")
}

type webhookDelivery struct {
	body                []byte
	signature, delivery string
}

// webhookReceiver is the local receiver the demo pages.
func webhookReceiver() (<-chan webhookDelivery, string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, fmt.Errorf("listen for the webhook receiver: %w", err)
	}
	ch := make(chan webhookDelivery, 4)
	var once sync.Once
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		once.Do(func() {
			ch <- webhookDelivery{body: b, signature: r.Header.Get("X-Tailcause-Signature"), delivery: r.Header.Get("X-Tailcause-Delivery")}
		})
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = srv.Serve(ln) }()
	return ch, "http://" + ln.Addr().String() + "/hook", func() { srv.Close() }, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
