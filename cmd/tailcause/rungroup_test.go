package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/testkit"
)

// TestComponentsStopTogether: the first part to fail stops the others —
// here a real HTTP server, shut down and its port freed — and the command
// gets that part's error by name; a part that ends without an error while
// nobody asked it to is a failure too; when the command's own context
// ends, every part stops and nothing is an error.
func TestComponentsStopTogether(t *testing.T) {
	e := &env{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler), getenv: func(string) string { return "" }}
	serving := func(t *testing.T) (component, string) {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hs := &http.Server{Handler: http.NotFoundHandler()}
		return component{"query API", func(ctx context.Context) error { return serveHTTP(ctx, e, hs, ln, hs.Serve) }}, ln.Addr().String()
	}
	portFree := func(t *testing.T, addr string) {
		t.Helper()
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s still taken after the group ended: %v", addr, err)
			return
		}
		l.Close()
	}
	run := func(ctx context.Context, parts ...component) error {
		g := newComponents(ctx)
		for _, c := range parts {
			g.add(c.name, c.run)
		}
		return g.wait()
	}

	api, addr := serving(t)
	boom := errors.New("scan outbox: code 60: table alert_outbox does not exist")
	err := run(context.Background(), api, component{"alert dispatcher", func(ctx context.Context) error {
		if code, _ := httpGet(t, "http://"+addr+"/"); code != http.StatusNotFound {
			t.Errorf("the API did not serve before the failure: %d", code)
		}
		return boom
	}})
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "alert dispatcher: ") {
		t.Errorf("group error = %v, want the dispatcher's, named", err)
	}
	portFree(t, addr)

	api, addr = serving(t)
	err = run(context.Background(), api, component{"incident watcher", func(context.Context) error { return nil }})
	if err == nil || err.Error() != "incident watcher stopped unexpectedly" {
		t.Errorf("group error = %v, want the watcher named as stopped", err)
	}
	portFree(t, addr)

	api, addr = serving(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if err := run(ctx, api, component{"causal scheduler", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }}); err != nil {
		t.Errorf("group error after the context ended = %v, want nil", err)
	}
	portFree(t, addr)
}

// TestComponentFailureEndsCommand runs `tailcause causal` on a database
// whose incidents table is gone: the scheduler fails when it loads the
// open incidents, and the process ends at once with exit status 1 and an
// error naming the component, its observability listener shut down (the
// port is free), instead of serving /metrics and /readyz with nothing
// behind them.
func TestComponentFailureEndsCommand(t *testing.T) {
	chAddr := testkit.ClickHouse(t)
	db := testkit.FreshDatabase(t, chAddr)
	if code, _, errs, _ := runEnv(t, unreachable, time.Minute, "migrate", "--clickhouse", chAddr, "--database", db); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, errs)
	}
	conn := testkit.Connect(t, chAddr, db)
	if err := conn.Exec(context.Background(), "RENAME TABLE incidents TO incidents_gone"); err != nil {
		t.Fatal(err)
	}
	metricsAddr := freePort(t)
	var stderr bytes.Buffer
	e := &env{stdout: io.Discard, stderr: &stderr, log: slog.New(slog.NewTextHandler(&stderr, nil)), getenv: func(string) string { return "" }}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := run(ctx, e, []string{"causal", "--clickhouse", chAddr, "--database", db, "--metrics-addr", metricsAddr, "--interval", "200ms", "--scope", "model=llama"})
	if ctx.Err() != nil {
		t.Fatalf("causal ran until the test's deadline instead of stopping: %s", stderr.String())
	}
	if code != 1 || !strings.Contains(stderr.String(), "tailcause causal: causal scheduler: load open incidents: ") {
		t.Errorf("exit %d (want 1), stderr lacks the named failure:\n%s", code, stderr.String())
	}
	l, err := net.Listen("tcp", metricsAddr)
	if err != nil {
		t.Errorf("the observability listener %s is still open: %v", metricsAddr, err)
	} else {
		l.Close()
	}
}
