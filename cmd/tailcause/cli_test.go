package main

import (
	"strings"
	"testing"
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
		{[]string{"migrate", "--print", "18.16"}, 0, "CREATE TABLE IF NOT EXISTS requests"},
		{[]string{"migrate", "--print", "24.8"}, 0, "LowCardinality(String)"},
		{[]string{"migrate", "--print", "eighteen"}, 2, "parse server version"},
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
}
