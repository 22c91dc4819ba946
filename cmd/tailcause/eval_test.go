package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tailcause/tailcause/causal"
	"github.com/tailcause/tailcause/internal/testkit"
)

// TestConfounderEndToEnd runs a confounded fault-lab scenario through Kafka,
// the enricher and ClickHouse, and ranks it: prompts got longer, KV usage
// rose with them, and there is no KV fault. The backdoor-adjusted ranking
// must name the workload shift, not the KV cache; the two comparison
// methods are computed on the same rows.
func TestConfounderEndToEnd(t *testing.T) {
	addr := testkit.ClickHouse(t)
	prefix := testkit.FreshDatabase(t, addr)
	sf := storeFlags{addr: addr, database: prefix, user: "default"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := evalOne(ctx, testEnv(t), sf, "long_prompts_kv_decoy", 1, 20*time.Minute, 0.05, false)
	if r.Error != "" {
		t.Fatal(r.Error)
	}
	t.Logf("fired %v; rankings %v", r.Fired, r.Rankings)
	if !slices.Contains(r.Fired, "llama-3.1-8b") {
		t.Fatalf("no incident for the target model: fired %v", r.Fired)
	}
	main := r.Rankings[methodMain]
	if len(main) == 0 || main[0] != string(causal.CauseLongPrompts) {
		t.Errorf("top culprit %v, want %s", main, causal.CauseLongPrompts)
	}
	if len(main) > 0 && main[0] == string(causal.CauseKVPreemption) {
		t.Errorf("the KV decoy outranked the cause: %v", main)
	}
	for _, m := range []string{causal.MethodUnadjusted, causal.MethodRobustZ} {
		if len(r.Rankings[m]) == 0 {
			t.Errorf("no %s ranking computed on the same rows", m)
		}
	}
}
