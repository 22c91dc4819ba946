package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/testkit"
	"github.com/tailcause/tailcause/lab/faultlab"
)

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb, log: slog.New(slog.NewTextHandler(io.Discard, nil)), getenv: func(string) string { return "" }}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	code = run(ctx, e, args)
	return code, out.String(), errb.String()
}

// TestDemoAndRank runs the one-command demo as CI would and checks its
// printed top culprit against the scenario's ground truth, then asks
// `tailcause rank` about the same store: the v1 JSON of the breach, and
// status ok (exit 0) for a window without one.
func TestDemoAndRank(t *testing.T) {
	addr := testkit.ClickHouse(t)
	db := testkit.FreshDatabase(t, addr)
	code, out, errs := runCmd(t, "demo", "--clickhouse", addr, "--database", db, "--listen", "127.0.0.1:0", "--hold=false")
	t.Logf("demo output:\n%s", out)
	if code != 0 {
		t.Fatalf("demo exited %d: %s", code, errs)
	}
	for _, want := range []string{"top culprit matches", "kv_cache.preemption", "webhook delivered", "signature verified: true", "report: http://"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}

	start := faultlab.DefaultStart()
	end := start.Add(14 * time.Minute) // the fault runs 40%..70% of 20 minutes
	code, out, errs = runCmd(t, "rank", "--clickhouse", addr, "--database", db, "--from", start.Format(time.RFC3339),
		"--to", end.Format(time.RFC3339), "--scope", "model=llama-3.1-8b", "--format", "json")
	if code != 0 {
		t.Fatalf("rank exited %d: %s", code, errs)
	}
	var doc struct {
		Status   string `json:"status"`
		Culprits []struct {
			Rank  int    `json:"rank"`
			Cause string `json:"cause"`
		} `json:"culprits"`
		Method struct{ Estimator string } `json:"method"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("rank output is not JSON: %v\n%s", err, out)
	}
	if doc.Status != "firing" || len(doc.Culprits) == 0 || doc.Culprits[0].Cause != "kv_cache.preemption" || doc.Method.Estimator != "backdoor-ols-hc3" {
		t.Errorf("rank: %+v", doc)
	}
	// The fleet-wide question (no --scope): one v1 document per breach, a
	// JSON array when several; the most severe names the faulty pod and
	// says where the tail broke.
	code, out, errs = runCmd(t, "rank", "--clickhouse", addr, "--database", db, "--from", start.Format(time.RFC3339),
		"--to", start.Add(20*time.Minute).Format(time.RFC3339))
	if code != 0 {
		t.Fatalf("fleet-wide rank exited %d: %s", code, errs)
	}
	type fleetDoc struct {
		Status string `json:"status"`
		Breach *struct {
			Level  string            `json:"level"`
			Entity map[string]string `json:"entity"`
		} `json:"breach"`
		Culprits []struct {
			Cause  string            `json:"cause"`
			Entity map[string]string `json:"entity"`
		} `json:"culprits"`
	}
	var docs []fleetDoc
	if strings.HasPrefix(strings.TrimSpace(out), "[") {
		if err := json.Unmarshal([]byte(out), &docs); err != nil || len(docs) < 2 {
			t.Fatalf("fleet-wide rank: an array must hold several documents (%v):\n%s", err, out)
		}
	} else {
		var d fleetDoc
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("fleet-wide rank output is not JSON: %v\n%s", err, out)
		}
		docs = append(docs, d)
	}
	top := docs[0]
	if top.Status != "firing" || top.Breach == nil || len(top.Culprits) == 0 || top.Culprits[0].Cause != "kv_cache.preemption" ||
		top.Culprits[0].Entity["pod"] == "" || top.Culprits[0].Entity["model"] != "llama-3.1-8b" {
		t.Errorf("fleet-wide rank, most severe breach: %+v", top)
	}
	// The healthy first minutes: no breach, status ok, no culprits, exit 0.
	code, out, errs = runCmd(t, "rank", "--clickhouse", addr, "--database", db, "--from", start.Format(time.RFC3339),
		"--to", start.Add(7*time.Minute).Format(time.RFC3339), "--scope", "model=llama-3.1-8b")
	if code != 0 || !strings.Contains(out, `"status": "ok"`) || !strings.Contains(out, `"culprits": []`) {
		t.Errorf("rank of a healthy window: exit %d, %s %s", code, out, errs)
	}
	// The same healthy minutes asked fleet-wide: one status-ok document.
	code, out, errs = runCmd(t, "rank", "--clickhouse", addr, "--database", db, "--from", start.Format(time.RFC3339),
		"--to", start.Add(7*time.Minute).Format(time.RFC3339))
	if code != 0 || !strings.HasPrefix(strings.TrimSpace(out), "{") || !strings.Contains(out, `"status": "ok"`) || !strings.Contains(out, `"culprits": []`) {
		t.Errorf("fleet-wide rank of a healthy window: exit %d, %s %s", code, out, errs)
	}
	// Bad input: a clear error and exit status 2.
	if code, _, errs := runCmd(t, "rank", "--clickhouse", addr, "--from", "yesterday", "--to", "today"); code != 2 || !strings.Contains(errs, "from") {
		t.Errorf("rank with bad times: exit %d, %s", code, errs)
	}
}
