package causal

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// dilutedShare reads the prefix cache's token counters in engine_samples:
// longer prompts at the same cached tokens per request make the whole fall
// of the hit ratio; a cache that stops hitting, none of it; both, their
// log-ratios' shares.
func TestDilutedShare(t *testing.T) {
	tests := []struct {
		name          string
		prompts, hits float64 // the window's per-request factors on the baseline's
		want          float64 // NaN: the ratio did not fall
	}{
		{"longer prompts", 1.2, 1, 1},
		{"cache stopped hitting", 1, 0.5, 0},
		{"both", 1.2, 0.8, math.Log(1.2) / (math.Log(1.2) - math.Log(0.8))},
		{"longer prompts, shared prefixes", 1.2, 1.3, math.NaN()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			st := chstoretest.Fresh(t)
			batch, err := st.Conn().PrepareBatch(ctx, "INSERT INTO engine_samples (host, pod, model, engine, metric, time_ns, time, value, delta, rate_per_s)")
			if err != nil {
				t.Fatal(err)
			}
			for off := 10 * time.Second; off < time.Hour; off += 10 * time.Second {
				at := synthStart.Add(off)
				p, h := 1.0, 1.0
				if off >= 30*time.Minute {
					p, h = tc.prompts, tc.hits
				}
				// Two pods of the model on one host, scraped at the same
				// instant (the table's sorting key has no pod).
				for _, pod := range []string{"vllm-0", "vllm-1"} {
					for _, m := range []struct {
						name  string
						delta float64
					}{{prefixHitsMetric, 20 * 2000 * h}, {prefixQueriesMetric, 20 * 4000 * p}, {requestDoneMetric, 20}} {
						if err := batch.Append("node-1", pod, "llama-3-8b", "0", m.name, uint64(at.UnixNano()), at.Truncate(time.Second), 0.0, m.delta, m.delta/10); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			if err := batch.Send(); err != nil {
				t.Fatal(err)
			}
			a, err := NewAnalyzer(StoreDB(st), DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			r, err := a.newRun(ctx, Request{SLO: SLO{Scope: llama}, Window: window(30*time.Minute, time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			base := window(0, 30*time.Minute)
			r.win, r.base = window(30*time.Minute, time.Hour), &base
			got, err := r.dilutedShare(Entity{Model: "llama-3-8b"})
			if err != nil {
				t.Fatal(err)
			}
			if math.IsNaN(tc.want) != math.IsNaN(got) || !math.IsNaN(got) && math.Abs(got-tc.want) > 1e-6 {
				t.Errorf("share %v, want %v (notes %q)", got, tc.want, r.notes)
			}
		})
	}
}
