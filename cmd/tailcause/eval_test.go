package main

import (
	"context"
	"testing"
	"time"

	"github.com/tailcause/tailcause/causal"
	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/testkit"
	"github.com/tailcause/tailcause/lab/eval"
	"github.com/tailcause/tailcause/lab/faultlab"
	"github.com/tailcause/tailcause/schemas"
)

// TestConfounderEndToEnd runs a confounded fault-lab scenario through Kafka,
// the enricher and ClickHouse, and asks the fleet-wide question over the
// whole run: prompts got longer, KV usage rose with them, and there is no
// KV fault. The backdoor-adjusted ranking must name the workload shift on
// its model, not the KV cache; the two comparison methods are computed on
// the same rows.
func TestConfounderEndToEnd(t *testing.T) {
	addr := testkit.ClickHouse(t)
	cfg := chstore.DefaultConfig()
	cfg.Addr, cfg.Database = addr, testkit.FreshDatabase(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := eval.FreshStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sc, err := faultlab.LoadScenario("long_prompts_kv_decoy")
	if err != nil {
		t.Fatal(err)
	}
	lc := faultlab.DefaultConfig()
	lc.Scenario, lc.Seed, lc.Duration, lc.StepSpanShare = sc, 1, 20*time.Minute, 0.05
	truth, err := runLab(ctx, testEnv(t), st, lc, nil)
	if err != nil {
		t.Fatal(err)
	}
	an, err := causal.NewAnalyzer(causal.StoreDB(st), causal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	sw, err := an.Sweep(ctx, causal.SweepRequest{SLO: causal.SLO{Signal: "e2e_latency", Quantile: 0.99}, Window: causal.Interval{Start: truth.Start, End: truth.End}})
	if err != nil {
		t.Fatal(err)
	}
	ranked := eval.Flatten(sw.Breaches)
	var names []string
	for _, c := range ranked {
		names = append(names, eval.CulpritString(c))
	}
	t.Logf("%d breaches; ranking %v", len(sw.Breaches), names)
	if len(ranked) == 0 {
		t.Fatal("no culprit for a workload shift on llama-3.1-8b")
	}
	if h := eval.NewScorer(truth).Score(ranked, truth.Faults); !h.At(1) {
		t.Errorf("top culprit %s, want workload.long_prompts on model llama-3.1-8b: %s", names[0], h.Why)
	}
	if ranked[0].Cause == schemas.CauseKVPreemption {
		t.Errorf("the KV decoy outranked the cause: %v", names)
	}
	cmp, err := an.CompareRankings(ctx, sw.Breaches[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{causal.MethodUnadjusted, causal.MethodRobustZ} {
		if len(cmp[m]) == 0 {
			t.Errorf("no %s ranking computed on the same rows", m)
		}
	}
}
