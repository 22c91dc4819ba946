package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// flagBlocks runs `tailcause <cmd> -h` under an empty environment and
// returns each flag's block of the listing (its line and its usage),
// keyed by the flag's name.
func flagBlocks(t *testing.T, cmd string) map[string]string {
	t.Helper()
	var out bytes.Buffer
	e := &env{stdout: io.Discard, stderr: &out, log: slog.New(slog.DiscardHandler), getenv: func(string) string { return "" }}
	_ = commands()[cmd].run(context.Background(), e, []string{"-h"})
	blocks := map[string]string{}
	var name string
	for _, line := range strings.Split(out.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "  -"); ok {
			name, _, _ = strings.Cut(rest, " ")
		}
		if name != "" {
			blocks[name] += line + "\n"
		}
	}
	for k, b := range blocks {
		blocks[k] = strings.TrimRight(b, "\n")
	}
	if len(blocks) == 0 {
		t.Fatalf("tailcause %s -h listed no flags:\n%s", cmd, out.String())
	}
	return blocks
}

// TestAllHasTheFlagsOfItsRoles: `all` combines ingest and enrich, so it
// has every flag of both, with the same default and help (it registers
// them through the same functions); and every command that reaches Kafka
// has the same --kafka default.
func TestAllHasTheFlagsOfItsRoles(t *testing.T) {
	all := flagBlocks(t, "all")
	for _, role := range []string{"ingest", "enrich"} {
		for name, block := range flagBlocks(t, role) {
			if got, ok := all[name]; !ok {
				t.Errorf("all lacks %s's --%s", role, name)
			} else if got != block {
				t.Errorf("--%s differs between all and %s:\n%s\nvs\n%s", name, role, got, block)
			}
		}
	}
	want := flagBlocks(t, "ingest")["kafka"]
	for _, cmd := range []string{"enrich", "all", "topics"} {
		if got := flagBlocks(t, cmd)["kafka"]; got != want {
			t.Errorf("%s --kafka:\n%s\nwant (as ingest):\n%s", cmd, got, want)
		}
	}
}

// TestDerivedDefaultsAgree: a setting another one derives from is taken
// alike by every command that has it: `all --max-wait 3m` used to fail
// validation (the metric readers' lead was derived in enrich's main only)
// while `enrich --max-wait 3m` ran. Both must get past validation to the
// store (unreachable here: the run ends at the deadline, not with exit 2).
func TestDerivedDefaultsAgree(t *testing.T) {
	for _, args := range [][]string{
		{"enrich", "--max-wait", "3m"},
		{"all", "--embedded-kafka", "--insecure-no-auth", "--max-wait", "3m"},
		{"enrich", "--max-wait", "30s"},
		{"all", "--embedded-kafka", "--insecure-no-auth", "--max-wait", "30s"},
		{"all", "--embedded-kafka", "--insecure-no-auth", "--max-message-bytes", "4000000"},
	} {
		code, _, errs, _ := runEnv(t, unreachable, 1500*time.Millisecond, args...)
		if code == 2 || !strings.Contains(errs, "waiting for ClickHouse") {
			t.Errorf("tailcause %s: exit %d, did not get past validation:\n%s", strings.Join(args, " "), code, errs)
		}
	}
}
