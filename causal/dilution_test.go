package causal

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// promptShiftOn reads the prompt and prefix-cache token counters in
// engine_samples. Longer prompts at the same cached tokens per request make
// the whole fall of the hit ratio, a cache that stops hitting none of it,
// both their log-ratios' shares (dilutedShare); the prompt tokens per second
// rise by the arrivals and by the tokens per request, and loadShare is the
// latter's part.
func TestPromptShift(t *testing.T) {
	tests := []struct {
		name                    string
		prompts, hits, arrivals float64 // the window's factors on the baseline's
		diluted, load           float64 // NaN: the ratio did not fall, the load did not rise
	}{
		{"longer prompts", 1.2, 1, 1, 1, 1},
		{"cache stopped hitting", 1, 0.5, 1, 0, math.NaN()},
		{"both", 1.2, 0.8, 1, math.Log(1.2) / (math.Log(1.2) - math.Log(0.8)), 1},
		{"longer prompts, shared prefixes", 1.2, 1.3, 1, math.NaN(), 1},
		{"longer prompts and more arrivals", 1.2, 1, 1.5, 1, math.Log(1.2) / math.Log(1.8)},
		{"more arrivals", 1, 1, 1.5, math.NaN(), 0},
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
				p, h, n := 1.0, 1.0, 20.0
				if off >= 30*time.Minute {
					p, h, n = tc.prompts, tc.hits, 20*tc.arrivals
				}
				// Two pods of the model on one host, scraped at the same
				// instant (the table's sorting key has no pod).
				for _, pod := range []string{"vllm-0", "vllm-1"} {
					for _, m := range []struct {
						name  string
						delta float64
					}{{prefixHitsMetric, n * 2000 * h}, {prefixQueriesMetric, n * 4000 * p}, {promptTokensMetric, n * 4000 * p}, {requestDoneMetric, n}} {
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
			ps, err := r.promptShiftOn(Entity{Model: "llama-3-8b"})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				what      string
				got, want float64
			}{{"diluted share", ps.dilutedShare(), tc.diluted}, {"load share", ps.loadShare(), tc.load}} {
				if math.IsNaN(c.want) != math.IsNaN(c.got) || !math.IsNaN(c.got) && math.Abs(c.got-c.want) > 1e-6 {
					t.Errorf("%s %v, want %v (%+v)", c.what, c.got, c.want, ps)
				}
			}
		})
	}
}
