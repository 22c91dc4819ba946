package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tailcause/tailcause/internal/obs"
	"github.com/tailcause/tailcause/query"
	"github.com/tailcause/tailcause/query/alert"
)

// cmdQuery serves the HTTP API and report pages, and runs the webhook
// dispatcher (with the incident watcher) when --webhooks names a config.
func cmdQuery(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("query", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var sf storeFlags
	sf.register(fs, e)
	sf.registerNoMigrate(fs)
	cfg := query.DefaultConfig()
	listen := fs.String("listen", "127.0.0.1:8080", "HTTP listen address")
	fs.StringVar(&cfg.Token, "token", "", "bearer token of the API, at least 16 bytes (default env TAILCAUSE_QUERY_TOKEN; prefer the env: flags show in ps)")
	envToken := e.getenv("TAILCAUSE_QUERY_TOKEN") // never a flag default: defaults are printed
	tokenFile := fs.String("token-file", e.getenv("TAILCAUSE_QUERY_TOKEN_FILE"), "file holding the bearer token (env TAILCAUSE_QUERY_TOKEN_FILE)")
	var lt listenTLSFlags
	lt.register(fs, e, "the API listener (--listen)")
	fs.BoolVar(&cfg.AllowNoAuth, "no-auth", false, "serve without authentication (local demos only)")
	fs.StringVar(&cfg.BaseURL, "base-url", e.getenv("TAILCAUSE_QUERY_BASE_URL"), "external URL of this server, for report links in alerts (env TAILCAUSE_QUERY_BASE_URL)")
	fs.DurationVar(&cfg.MaxRange, "max-range", cfg.MaxRange, "longest time range of request-level queries")
	fs.DurationVar(&cfg.QueryTimeout, "query-timeout", cfg.QueryTimeout, "bound on the ClickHouse queries of one API request")
	webhooks := fs.String("webhooks", "", "webhook receivers config (JSON, see deploy/config/webhooks.example.json); empty sends no alerts")
	watch := fs.Duration("watch-every", time.Second, "with --webhooks: how often to scan the incidents table for events (0 disables the watcher)")
	var of obsFlags // /metrics where the pods are annotated to be scraped, besides the API's bearer-protected one
	of.register(fs, e)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	var err error
	if cfg.Token, err = tokenFrom(cfg.Token, envToken, "TAILCAUSE_QUERY_TOKEN", *tokenFile); err != nil {
		return err
	}
	listenTLS, err := lt.config()
	if err != nil {
		return err
	}
	scheme := "http://"
	if listenTLS != nil {
		scheme = "https://"
	}
	if cfg.BaseURL == "" && *listen != "" {
		if host, port, err := net.SplitHostPort(*listen); err == nil {
			if host == "" || host == "0.0.0.0" || host == "::" {
				host = "127.0.0.1"
			}
			cfg.BaseURL = scheme + net.JoinHostPort(host, port)
		}
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var wcfg *alert.Config
	if *webhooks != "" {
		c, err := alert.LoadConfig(*webhooks)
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		wcfg = &c
	}

	st, err := sf.open(ctx, e, schemaMigrate)
	if err != nil {
		return err
	}
	defer st.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := query.New(query.ClickHouse(st), cfg, query.Options{Logger: e.log, Registerer: reg, Gatherer: reg})
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	obsSrv, err := of.start(ctx, e, reg, obs.ClickHouseCheck(st))
	if err != nil {
		return err
	}
	defer obsSrv.stop()
	var parts []component
	if wcfg != nil {
		d, err := alert.NewDispatcher(alert.ClickHouse(st), *wcfg, alert.Options{Logger: e.log, Getenv: e.getenv, ReportURL: srv.ReportURL, Registerer: reg})
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		parts = append(parts, component{"alert dispatcher", d.Run})
		if *watch > 0 {
			parts = append(parts, component{"incident watcher", alert.NewWatcher(d, *watch, 24*time.Hour).Run})
		}
	}
	hs := srv.HTTPServer(*listen)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	serve := hs.Serve
	if listenTLS != nil {
		hs.TLSConfig = listenTLS
		serve = func(l net.Listener) error { return hs.ServeTLS(l, "", "") }
	}
	g := newComponents(ctx)
	for _, c := range parts {
		g.add(c.name, c.run)
	}
	if wcfg != nil {
		e.log.Info("alert dispatcher running", "receivers", len(wcfg.Receivers))
	}
	g.add("query API", func(ctx context.Context) error { return serveHTTP(ctx, e, hs, ln, serve) })
	g.add("observability server", obsSrv.run)
	e.log.Info("query API listening", "addr", ln.Addr().String(), "database", st.Database(), "auth", cfg.Token != "", "tls", listenTLS != nil)
	return g.wait()
}

// serveHTTP serves hs on ln until ctx ends (then shuts it down, waiting up
// to 10 s for open requests) or serving fails.
func serveHTTP(ctx context.Context, e *env, hs *http.Server, ln net.Listener, serve func(net.Listener) error) error {
	errc := make(chan error, 1)
	go func() { errc <- serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		e.log.Warn("http shutdown", "err", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve http: %w", err)
	}
	return nil
}
