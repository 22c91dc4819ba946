package eval

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/causal/incident"
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
	// The detector replays over the kept run too, seeing only what had
	// ended by each round (replayView).
	det := opts
	det.Detector = true
	det.DetectorConfig = incident.DefaultLifecycleConfig()
	det.DetectorConfig.Interval = time.Minute
	if again, err = EvaluateJobs(ctx, det, job); err != nil || again[0].Error != "" {
		t.Fatalf("a reuse with the detector: %v %s", err, again[0].Error)
	}
	if d := again[0].Detector; d == nil || d.Evaluations == 0 || d.Errors > 0 {
		t.Errorf("the replayed detector: %+v", d)
	}
	checkReplayView(t, ctx, chstore.Config{Addr: addr, Database: cfg.Database + "_eval_3_healthy_before"})
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

// checkReplayView checks, on a kept run's database, that the replay's view
// holds exactly the requests that ended by each round's clock less the
// delay, and grows with it.
func checkReplayView(t *testing.T, ctx context.Context, cfg chstore.Config) {
	t.Helper()
	st, err := chstore.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	count := func(q string) int64 {
		t.Helper()
		var n uint64
		if err := st.Conn().QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return int64(n)
	}
	var lo, hi int64
	if err := st.Conn().QueryRow(ctx, "SELECT toInt64(min(end_ns)), toInt64(max(end_ns)) FROM requests").Scan(&lo, &hi); err != nil {
		t.Fatal(err)
	}
	// An incident of an earlier replay, whether or not this one opened any:
	// a new view empties the incident tables.
	if err := st.Conn().Exec(ctx, "INSERT INTO incidents (incident_id, version) VALUES ('inc-earlier-replay', 1)"); err != nil {
		t.Fatal(err)
	}
	const delay = 10 * time.Second
	v, err := newReplayView(ctx, st, "requests", delay)
	if err != nil {
		t.Fatal(err)
	}
	if n := count("SELECT count() FROM " + replayTable); n != 0 {
		t.Fatalf("a new view holds %d requests", n)
	}
	for _, f := range []float64{0.3, 0.3, 0.7, 1.2} {
		now := time.Unix(0, lo+int64(f*float64(hi-lo))).Add(delay)
		if err := v.show(ctx, now); err != nil {
			t.Fatal(err)
		}
		want := count(fmt.Sprintf("SELECT count() FROM requests WHERE end_ns <= %d", now.Add(-delay).UnixNano()))
		if got := count("SELECT count() FROM " + replayTable); got != want || want == 0 {
			t.Errorf("at %.1f of the run the view holds %d requests, want %d (those ended %v before)", f, got, want, delay)
		}
	}
	if n := count("SELECT count() FROM incidents"); n != 0 {
		t.Errorf("a new view left %d incidents of an earlier replay", n)
	}
}
