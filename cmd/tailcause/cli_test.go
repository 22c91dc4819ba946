package main

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestCLI: exit statuses and the commands that need no service.
func TestCLI(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string // in stdout or stderr
	}{
		{nil, 2, "usage: tailcause <command>"},
		{[]string{"help"}, 0, "commands:"},
		{[]string{"nonsense"}, 2, `unknown command "nonsense"`},
		{[]string{"version"}, 0, "tailcause "},
		{[]string{"migrate", "--print"}, 0, "CREATE TABLE IF NOT EXISTS requests"},
		{[]string{"migrate", "--print"}, 0, "ORDER BY (model, service, start_time, uid)\nTTL start_time + INTERVAL 30 DAY;"},
		{[]string{"migrate", "--print", "--ttl", "90d"}, 0, "TTL start_time + INTERVAL 90 DAY;"},
		{[]string{"migrate", "--print", "--ttl", "36h"}, 0, "TTL time + INTERVAL 36 HOUR;"},
		{[]string{"migrate", "--print", "--ttl", "ten"}, 2, `ttl "ten"`},
		{[]string{"migrate", "--print", "--ttl", "-1d"}, 2, "want 0 (none)"},
		{[]string{"enrich", "--no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"rank", "--from", "2026-01-01T00:00:00Z"}, 2, "--from and --to are required"},
		{[]string{"sim", "--list"}, 0, "kv_cache_preemption"},
		{[]string{"sim", "--scenario", "no_such_scenario", "--out", "-"}, 1, "no_such_scenario"},
		{[]string{"all", "positional"}, 2, "unexpected arguments"},
	} {
		code, out, errs := runCmd(t, tc.args...)
		if code != tc.code || !strings.Contains(out+errs, tc.out) {
			t.Errorf("tailcause %v: exit %d (want %d), output lacks %q:\n%s%s", tc.args, code, tc.code, tc.out, out, errs)
		}
	}
	// --ttl 0: no TTL on any table.
	if code, out, errs := runCmd(t, "migrate", "--print", "--ttl", "0"); code != 0 || strings.Contains(out, "\nTTL ") || !strings.Contains(out, "CREATE TABLE IF NOT EXISTS requests") {
		t.Errorf("migrate --print --ttl 0: exit %d, a TTL rendered or no DDL:\n%s%s", code, out, errs)
	}
}

// TestTTLFlagDefaults: 30 days, except for the commands that write the
// fault lab's past-dated data into databases of their own (none).
func TestTTLFlagDefaults(t *testing.T) {
	e := &env{getenv: func(string) string { return "" }}
	for cmd, want := range map[string]time.Duration{"enrich": 30 * 24 * time.Hour, "all": 30 * 24 * time.Hour, "rank": 30 * 24 * time.Hour, "eval": 0, "demo": 0} {
		fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
		var sf storeFlags
		sf.register(fs, e)
		if got := sf.config().TTL; got != want {
			t.Errorf("%s: default TTL %v, want %v", cmd, got, want)
		}
	}
}

// runEnv runs the binary's main logic with the given environment and a
// deadline, and says how long it took.
func runEnv(t *testing.T, getenv func(string) string, timeout time.Duration, args ...string) (code int, stdout, stderr string, took time.Duration) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb, log: slog.New(slog.NewTextHandler(&errb, nil)), getenv: getenv}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	t0 := time.Now()
	code = run(ctx, e, args)
	return code, out.String(), errb.String(), time.Since(t0)
}

// unreachable points every service at an address where nothing listens: a
// subcommand that connected before checking its flags would wait on it
// (the store retries for 60 s).
func unreachable(k string) string {
	switch k {
	case "TAILCAUSE_CLICKHOUSE", "TAILCAUSE_KAFKA":
		return "127.0.0.1:1"
	}
	return ""
}

// TestCLIFailsFast: a flag mistake ends in under a second with exit status
// 2 and an error naming the flag and the value, before anything connects.
func TestCLIFailsFast(t *testing.T) {
	win := []string{"--from", "2026-11-30T09:00:00Z", "--to", "2026-11-30T10:00:00Z"}
	rank := func(extra ...string) []string { return append(append([]string{"rank"}, win...), extra...) }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rank", "--from", "2026-11-30T10:00:00Z", "--to", "2026-11-30T09:00:00Z"}, "--to 2026-11-30T09:00:00Z is not after --from 2026-11-30T10:00:00Z"},
		{[]string{"rank", "--from", "2026-11-30T10:00:00Z", "--to", "2026-11-30T10:00:00Z"}, "is not after --from"},
		{rank("--baseline-from", "2026-11-30T08:00:00Z", "--baseline-to", "2026-11-30T07:00:00Z"), "--baseline-to 2026-11-30T07:00:00Z is not after --baseline-from"},
		{[]string{"rank", "--from", "yesterday", "--to", "2026-11-30T10:00:00Z"}, `--from "yesterday": want RFC 3339`},
		{rank("--quantile", "7"), "--quantile 7: want a quantile strictly between 0 and 1"},
		{rank("--baseline-from", "2026-11-30T09:30:00Z", "--baseline-to", "2026-11-30T10:30:00Z"), "overlap the window"},
		{[]string{"causal", "--once", "--quantile", "7"}, "--quantile 7"},
		{[]string{"causal", "--once", "--slo-ms", "-5"}, "--slo-ms -5"},
		{rank("--sweep-parallel", "0"), "--sweep-parallel 0: want 1 to 64 at once"},
		{[]string{"causal", "--once", "--sweep-parallel", "65"}, "--sweep-parallel 65"},
		{[]string{"causal", "--once", "--max-scopes", "0"}, "--max-scopes 0: want at least 1 scope"},
		{[]string{"causal", "--interval", "-1m"}, "--interval -1m0s: must not be negative"},
		{rank("--signal", "latency"), `--signal "latency": want e2e_latency, ttft or tpot`},
		{[]string{"causal", "--scope-by", "modle"}, `--scope-by "modle": want one of`},
		{rank("--clickhouse", "localhost"), `--clickhouse "localhost": want host:port`},
		{rank("--clickhouse", "localhost:ninety"), `port "ninety"`},
		{[]string{"causal", "--clickhouse", "localhost"}, `--clickhouse "localhost"`},
		{[]string{"enrich", "--clickhouse", "localhost"}, `--clickhouse "localhost"`},
		{[]string{"all", "--embedded-kafka", "--clickhouse", ":9000"}, `--clickhouse ":9000": want host:port (no host)`},
		{[]string{"migrate", "--clickhouse", "localhost"}, `--clickhouse "localhost"`},
		{[]string{"query", "--no-auth", "--clickhouse", "ch.example.com"}, `--clickhouse "ch.example.com"`},
		{[]string{"eval", "--clickhouse", "localhost"}, `--clickhouse "localhost"`},
		{[]string{"demo", "--clickhouse", "localhost"}, `--clickhouse "localhost"`},
		{[]string{"rank", "--database", "a;b", "--from", "2026-11-30T09:00:00Z", "--to", "2026-11-30T10:00:00Z"}, `database "a;b"`},
		{[]string{"enrich", "--kafka", "kafka-0"}, `--kafka "kafka-0": broker "kafka-0": want host:port`},
		{[]string{"ingest", "--kafka", "kafka-0:9092,kafka-1"}, `broker "kafka-1"`},
		{[]string{"topics", "--kafka", "kafka-0"}, `--kafka "kafka-0"`},
		{[]string{"ingest", "--grpc-addr", "4317"}, `--grpc-addr "4317": want host:port`},
		{[]string{"query", "--no-auth", "--listen", "127.0.0.1:99999"}, `port "99999"`},
		{[]string{"enrich", "--metrics-addr", "9464"}, `--metrics-addr "9464"`},
		{[]string{"enrich", "--batch-wait", "5x"}, `invalid value "5x" for flag -batch-wait`},
		{[]string{"enrich", "--max-wait", "-2m"}, "--max-wait -2m0s: must not be negative"},
		{[]string{"enrich", "--max-event-age", "ten"}, `max event age "ten"`},
		{[]string{"enrich", "--batch-rows", "0"}, "batch rows"},
		{[]string{"query", "--watch-every", "1fortnight"}, `invalid value "1fortnight" for flag -watch-every`},
		{[]string{"sim", "--duration", "-1h"}, "--duration -1h0m0s: must not be negative"},
		{[]string{"all", "--embedded-kafka", "--idle-flush", "0s"}, "idle flush"},
		{[]string{"version", "extra"}, "unexpected arguments"},
		{[]string{"ingest"}, "no bearer token: set TAILCAUSE_INGEST_TOKEN (or --token), or pass --insecure-no-auth"},
		{[]string{"all", "--embedded-kafka"}, "no bearer token"},
		{[]string{"ingest", "--insecure-no-auth", "--token", "t0ken-0123456789"}, "--insecure-no-auth with a bearer token set"},
		{[]string{"eval", "--runs", "-1"}, "--runs -1: want at least 1"},
		{[]string{"eval", "--runs", "0"}, "--runs 0: want at least 1"},
		{[]string{"eval", "--parallel", "0"}, "--parallel 0: want at least 1"},
		{[]string{"demo", "--duration", "0s"}, "--duration 0s: want a positive simulated time"},
		{[]string{"topics", "--timeout", "0s"}, "--timeout 0s: must be positive"},
		{[]string{"migrate", "--print", "--check"}, "--print and --check: pick one"},
		{[]string{"eval", "--min-effect", "-1"}, "--min-effect -1: want a P99 ratio of at least 1"},
		{[]string{"eval", "--router", "sticky"}, `--router "sticky": want one of [round-robin random least-loaded] or mixed`},
		{rank("--scope", "model="), `scope "model=": model has no value`},
		{[]string{"causal", "--scope", "model=llama,host="}, "host has no value"},
		{[]string{"enrich", "--no-migrate=maybe"}, `invalid boolean value "maybe" for -no-migrate`},
		{[]string{"query", "--no-auth", "--metrics-addr", "9464"}, `--metrics-addr "9464"`},
	} {
		code, _, errs, took := runEnv(t, unreachable, 5*time.Second, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) || took > time.Second || strings.Contains(errs, "waiting for ClickHouse") {
			t.Errorf("tailcause %s: exit %d in %s (want 2 in under 1s), stderr lacks %q:\n%s", strings.Join(tc.args, " "), code, took.Round(time.Millisecond), tc.want, errs)
		}
	}
}

// secretEnv gives every secret the binary may read from the environment
// (a token, a password, a webhook secret, a DSN with a password: any name
// with TOKEN, PASSWORD, SECRET or DSN but not a _FILE path) a recognisable
// value, and points the services where nothing listens.
func secretEnv(k string) string {
	switch {
	case k == "TAILCAUSE_CLICKHOUSE" || k == "TAILCAUSE_KAFKA":
		return "127.0.0.1:1"
	case strings.HasSuffix(k, "_FILE"):
		return ""
	case strings.Contains(k, "DSN"):
		return "clickhouse://tailcause:s3cret-dsn@127.0.0.1:1/tailcause"
	case strings.Contains(k, "TOKEN") || strings.Contains(k, "PASSWORD") || strings.Contains(k, "SECRET"):
		return "s3cret-" + k
	}
	return ""
}

// TestHelp: every subcommand has help on stdout — synopsis, description,
// its flags, examples and the environment variables it reads — from
// `tailcause help <cmd>` and `tailcause <cmd> --help`, and none of it shows
// a value from the environment (a token).
func TestHelp(t *testing.T) {
	for name := range commands() {
		if _, ok := helpDocs[name]; !ok {
			t.Errorf("%s has no helpDocs entry", name)
		}
		for _, args := range [][]string{{"help", name}, {name, "--help"}, {name, "-h"}} {
			code, out, errs, took := runEnv(t, secretEnv, 5*time.Second, args...)
			if code != 0 || errs != "" || took > time.Second {
				t.Errorf("tailcause %s: exit %d in %s, stderr %q", strings.Join(args, " "), code, took, errs)
			}
			for _, want := range []string{"Usage:\n  tailcause " + name, "\nExamples:\n  ", "\nEnvironment:\n"} {
				if !strings.Contains(out, want) {
					t.Errorf("tailcause %s: no %q in\n%s", strings.Join(args, " "), want, out)
				}
			}
			if strings.Contains(out, "s3cret") || strings.Contains(out, "127.0.0.1:1\"") {
				t.Errorf("tailcause %s shows a value from the environment:\n%s", strings.Join(args, " "), out)
			}
			_, envPart, _ := strings.Cut(out, "\nEnvironment:\n")
			for _, line := range strings.Split(strings.TrimSpace(envPart), "\n") {
				if f := strings.Fields(line); len(f) < 2 && line != "none" {
					t.Errorf("tailcause %s: environment line %q has no description (envDocs)", strings.Join(args, " "), line)
				}
			}
		}
	}
	// Flags and environment of a store role and a Kafka role.
	_, out, _, _ := runEnv(t, secretEnv, 5*time.Second, "help", "enrich")
	for _, want := range []string{"-clickhouse", "-kafka", "-max-event-age", "TAILCAUSE_CLICKHOUSE_PASSWORD", "TAILCAUSE_KAFKA "} {
		if !strings.Contains(out, want) {
			t.Errorf("help enrich lacks %q:\n%s", want, out)
		}
	}
	_, out, _, _ = runEnv(t, secretEnv, 5*time.Second, "help", "ingest")
	if !strings.Contains(out, "TAILCAUSE_INGEST_TOKEN") {
		t.Errorf("help ingest does not name TAILCAUSE_INGEST_TOKEN:\n%s", out)
	}
	for _, args := range [][]string{{"help", "nonsense"}, {"help", "rank", "extra"}} {
		if code, _, errs, _ := runEnv(t, secretEnv, 5*time.Second, args...); code != 2 || !strings.Contains(errs, "unknown command") {
			t.Errorf("tailcause %v: exit %d, %q", args, code, errs)
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		if code, out, errs, _ := runEnv(t, secretEnv, 5*time.Second, args...); code != 0 || errs != "" || !strings.Contains(out, "tailcause help <command>") {
			t.Errorf("tailcause %v: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
}

// TestNoSecretInErrors: a flag mistake in a role whose token or password
// comes from the environment prints no flag defaults, so no secret.
func TestNoSecretInErrors(t *testing.T) {
	for _, args := range [][]string{
		{"all", "--no-such-flag"}, {"ingest", "--tokn", "x"}, {"query", "--bogus"}, {"query", "--clickhouse", "localhost"},
		{"enrich", "--batch-wait", "soon"}, {"rank", "--quantile", "2"}, {"all", "--embedded-kafka", "--grpc-addr", "4317"},
	} {
		code, out, errs, _ := runEnv(t, secretEnv, 5*time.Second, args...)
		if code != 2 || strings.Contains(out+errs, "s3cret") || strings.Contains(errs, "-clickhouse-user string") {
			t.Errorf("tailcause %v: exit %d, output shows a secret or the flag list:\n%s%s", args, code, out, errs)
		}
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		code, out, errs, _ := runEnv(t, secretEnv, time.Second, args...)
		if code != 0 || errs != "" || !strings.HasPrefix(out, "tailcause "+version+" (go") {
			t.Errorf("tailcause %v: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
}
