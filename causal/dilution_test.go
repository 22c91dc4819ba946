package causal

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/schemas"
)

// promptShiftOn reads the prompt and prefix-cache token counters in
// engine_samples. Longer prompts at the same cached tokens per request make
// the whole fall of the hit ratio, a cache that stops hitting none of it,
// both their log-ratios' shares (dilutedShare); the prompt tokens per second
// rise by the arrivals and by the tokens per request, and loadShare is the
// latter's part. A prefix-miss culprit whose fall is mostly dilution is a
// symptom of the prompts (judgeDilution).
func TestPromptShift(t *testing.T) {
	tests := []struct {
		name                    string
		prompts, hits, arrivals float64 // the window's factors on the baseline's
		requeried               float64 // queried tokens' factor besides the prompts' (recompute); 0: 1
		diluted, load           float64 // NaN: the ratio did not fall, the load did not rise
		symptom                 bool    // judgeDilution
	}{
		{"longer prompts", 1.2, 1, 1, 0, 1, 1, true},
		{"cache stopped hitting", 1, 0.5, 1, 0, 0, math.NaN(), false},
		{"both", 1.2, 0.8, 1, 0, math.Log(1.2) / (math.Log(1.2) - math.Log(0.8)), 1, false},
		{"longer prompts, shared prefixes", 1.2, 1.3, 1, 0, math.NaN(), 1, false},
		{"longer prompts and more arrivals", 1.2, 1, 1.5, 0, 1, math.Log(1.2) / math.Log(1.8), true},
		{"more arrivals", 1, 1, 1.5, 0, math.NaN(), 0, false},
		// A full KV cache: the preempted prompts recomputed and queried
		// again, the cached prefixes evicted, the prompts as long.
		{"evictions and recompute", 1, 1.8, 1, 3.1, 1, math.NaN(), false},
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
				p, h, n, q := 1.0, 1.0, 20.0, 1.0
				if off >= 30*time.Minute {
					p, h, n = tc.prompts, tc.hits, 20*tc.arrivals
					if tc.requeried > 0 {
						q = tc.requeried
					}
				}
				// Two pods of the model on one host, scraped at the same
				// instant (the table's sorting key has no pod).
				for _, pod := range []string{"vllm-0", "vllm-1"} {
					for _, m := range []struct {
						name  string
						delta float64
					}{{prefixHitsMetric, n * 2000 * h}, {prefixQueriesMetric, n * 4000 * p * q}, {promptTokensMetric, n * 4000 * p}, {requestDoneMetric, n}} {
						if err := batch.Append("node-1", pod, "llama-3-8b", "0", m.name, uint64(at.UnixNano()), at.Truncate(time.Second), 0.0, m.delta, m.delta/10); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			if err := batch.Send(); err != nil {
				t.Fatal(err)
			}
			r := hourRun(ctx, t, st)
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
			c := &causeRun{cand: Candidate{Cause: schemas.CausePrefixMiss, Entity: Entity{Model: "llama-3-8b"}}}
			r.judgeDilution(c)
			if c.cand.Symptom != tc.symptom {
				t.Errorf("prefix misses a symptom of the prompts: %v, want %v (%q)", c.cand.Symptom, tc.symptom, c.cand.Evidence)
			}
			r.base = nil
			c = &causeRun{cand: Candidate{Cause: schemas.CausePrefixMiss, Entity: Entity{Model: "llama-3-8b"}}}
			if r.judgeDilution(c); c.cand.Symptom {
				t.Error("judged without a baseline")
			}
		})
	}
}

// hourRun is a run of an analyzer of st over the llama-3-8b scope of an
// hour of synthetic rows: the last 30 minutes its window, the first 30 its
// baseline.
func hourRun(ctx context.Context, t *testing.T, st *chstore.Store) *run {
	t.Helper()
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
	return r
}
