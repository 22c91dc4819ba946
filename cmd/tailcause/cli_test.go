package main

import (
	"flag"
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
