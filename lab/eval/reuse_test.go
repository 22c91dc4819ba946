package eval

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/testkit"
)

// TestEvalReuse runs one case through the real pipeline with Keep, asks its
// kept database again with Reuse (the same answer, the truth simulated
// again), and checks that a database of another case or none is refused.
func TestEvalReuse(t *testing.T) {
	addr := testkit.ClickHouse(t)
	cfg := chstore.DefaultConfig()
	cfg.Addr, cfg.Database = addr, testkit.FreshDatabase(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	job := []Job{{3, HealthyBefore}} // gpu.memory_bandwidth on one GPU (a smoke job)
	opts := Options{Store: cfg, Duration: smokeDuration, Parallel: 1, Keep: true}
	kept, err := EvaluateJobs(ctx, opts, job)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st, err := chstore.Open(context.Background(), chstore.Config{Addr: addr, Database: cfg.Database + "_eval_3_healthy_before"})
		if err == nil {
			DropDatabase(st)
			st.Close()
		}
	})
	first := kept[0]
	if first.Error != "" || len(first.Ranking) == 0 {
		t.Fatalf("the kept run: error %q, ranking %v", first.Error, first.Ranking)
	}
	opts.Keep, opts.Reuse = false, true
	again, err := EvaluateJobs(ctx, opts, job)
	if err != nil {
		t.Fatal(err)
	}
	r := again[0]
	if r.Error != "" {
		t.Fatalf("reuse: %s", r.Error)
	}
	if !slices.Equal(r.Ranking, first.Ranking) || r.Hit != first.Hit || r.Cause != first.Cause || r.Requests != first.Requests {
		t.Errorf("reuse answered %v (%+v, %s, %d requests), the run %v (%+v, %s, %d)", r.Ranking, r.Hit, r.Cause, r.Requests, first.Ranking, first.Hit, first.Cause, first.Requests)
	}
	// The database survives a Reuse run without Keep.
	if again, err = EvaluateJobs(ctx, opts, job); err != nil || again[0].Error != "" {
		t.Fatalf("a second reuse: %v %s", err, again[0].Error)
	}
	// Another duration simulates other requests: refused, not scored.
	other := opts
	other.Duration = smokeDuration + 2*time.Minute
	bad, err := EvaluateJobs(ctx, other, job)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(bad[0].Error, "not this case's run") {
		t.Errorf("reuse with another duration: error %q, want a refusal", bad[0].Error)
	}
	// A seed never kept has no database.
	none, err := EvaluateJobs(ctx, opts, []Job{{5, HealthyBefore}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(none[0].Error, "kept by an earlier --keep run") {
		t.Errorf("reuse of a database never kept: error %q", none[0].Error)
	}
}
