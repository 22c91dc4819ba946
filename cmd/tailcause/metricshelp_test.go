package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/causal"
	"github.com/tailcause/tailcause/causal/incident"
	"github.com/tailcause/tailcause/enrich"
	"github.com/tailcause/tailcause/ingest"
	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/obs"
	"github.com/tailcause/tailcause/internal/testkit"
)

// goNameHelp is a HELP text that is a Go name rather than a sentence: an
// identifier or a path of them (Stats.Pending, span_records).
var goNameHelp = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$|[A-Z][A-Za-z0-9]*\.[A-Z][A-Za-z0-9]*`)

// TestSelfMetricsHelp registers every self-metric of every role, as main
// does (enrich's counters and join state, ingest's, causal's, the query
// Go and process collectors; the query API's and the alert dispatcher's
// are read from a running query, TestQueryMetricsHelp), and
// checks that each has a HELP text written for a person: not empty, not a
// Go field name such as "Stats.Pending".
func TestSelfMetricsHelp(t *testing.T) {
	reg := obs.NewRegistry()
	p, err := enrich.New(enrich.DefaultConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(enrichCollectors(p)...)
	prod, err := kafkax.NewProducer(kafkax.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ic := ingest.DefaultConfig()
	ic.Token = "t0ken-0123456789"
	if _, err := ingest.New(ic, prod, reg, nil); err != nil {
		t.Fatal(err)
	}
	an, err := causal.NewAnalyzer(causal.StoreDB(nil), causal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	lc, err := incident.NewLifecycle(an, causal.StoreDB(nil), incident.DefaultLifecycleConfig())
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(causalCollectors(lc)...)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range fams {
		seen[checkHelp(t, f.GetName(), f.GetHelp())] = true
	}
	for _, want := range []string{"enrich", "join", "ingest", "causal", "go", "process"} {
		if !seen[want] {
			t.Errorf("no %s metric gathered: the test no longer covers that part", want)
		}
	}
}

// checkHelp reports a HELP text that is not a description, and returns
// the part the metric belongs to (enrich for tailcause_enrich_*, go for
// go_*).
func checkHelp(t *testing.T, name, help string) string {
	t.Helper()
	if !strings.Contains(strings.TrimSpace(help), " ") || goNameHelp.MatchString(help) {
		t.Errorf("%s: HELP %q is not a description", name, help)
	}
	part := strings.SplitN(name, "_", 3)
	if part[0] == "tailcause" && len(part) > 1 {
		return part[1]
	}
	return part[0]
}

// TestQueryMetricsHelp reads /metrics of `tailcause query --webhooks` (the
// API's and the alert dispatcher's metrics need the store) and checks
// every HELP line as TestSelfMetricsHelp does.
func TestQueryMetricsHelp(t *testing.T) {
	chAddr := testkit.ClickHouse(t)
	db := testkit.FreshDatabase(t, chAddr)
	metricsAddr, listen := freePort(t), freePort(t)
	var stderr bytes.Buffer
	getenv := func(k string) string {
		if k == "TAILCAUSE_WEBHOOK_SECRET_ONCALL" {
			return "s3cret-0123456789abcdef"
		}
		return ""
	}
	e := &env{stdout: io.Discard, stderr: &stderr, log: slog.New(slog.NewTextHandler(&stderr, nil)), getenv: getenv}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, e, []string{"query", "--no-auth", "--clickhouse", chAddr, "--database", db, "--listen", listen,
			"--metrics-addr", metricsAddr, "--webhooks", "../../deploy/config/webhooks.example.json", "--watch-every", "0"})
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("tailcause query exited %d: %s", code, stderr.String())
		}
	}()
	var body string
	for deadline := time.Now().Add(60 * time.Second); ; {
		httpGet(t, "http://"+listen+"/openapi.json") // the API's request metrics exist once it served one
		code, b := httpGet(t, "http://"+metricsAddr+"/metrics")
		if code == http.StatusOK && strings.Contains(b, "# HELP tailcause_query_") {
			body = b
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /metrics: %d\n%s", code, stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, help, _ := strings.Cut(rest, " ")
			seen[checkHelp(t, name, help)] = true
		}
	}
	for _, want := range []string{"query", "alert"} {
		if !seen[want] {
			t.Errorf("no tailcause_%s_* metric on /metrics:\n%s", want, grepLines(body, "# HELP"))
		}
	}
}
