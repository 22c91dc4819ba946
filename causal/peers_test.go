package causal

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// othersLevelRose reads the KV usage of the engines other than the
// culprit's: a cut of the model's KV cache lifts it on every engine, even
// where it stays below the exposure threshold (0.9); load moved off one
// slow engine lifts its peers' by about the load's share; a rise of a few
// thousandths is no rise, whatever its ratio.
func TestOthersLevelRose(t *testing.T) {
	for _, tc := range []struct {
		name     string
		peer     float64 // the peers' KV usage in the window (0.01 in the baseline)
		baseline bool
		want     bool
	}{
		{"peers ×20, below the threshold", 0.2, true, true},
		{"peers ×1.5: the load moved to them", 0.015, true, false},
		{"peers ×4 by 3 points", 0.04, true, false},
		{"no baseline", 0.2, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			st := chstoretest.Fresh(t)
			batch, err := st.Conn().PrepareBatch(ctx, "INSERT INTO requests (uid, host, pod, engine, model, start_ns, start_time, e2e_ms, kv_usage_max)")
			if err != nil {
				t.Fatal(err)
			}
			for off := time.Second; off < time.Hour; off += time.Second {
				at := synthStart.Add(off)
				for _, pod := range []string{"vllm-0", "vllm-1", "vllm-2"} {
					kv := 0.01
					if off >= 30*time.Minute {
						kv = tc.peer
						if pod == "vllm-0" {
							kv = 0.95
						}
					}
					if err := batch.Append(fmt.Sprintf("%s-%d", pod, off/time.Second), "node-1", pod, "0", "llama-3-8b", uint64(at.UnixNano()), at.Truncate(time.Second), 1000.0, kv); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := batch.Send(); err != nil {
				t.Fatal(err)
			}
			r := hourRun(ctx, t, st)
			if !tc.baseline {
				r.base = nil
			}
			node, ok := r.a.dag.Node("kv_usage")
			if !ok {
				t.Fatal("no kv_usage node")
			}
			c := &causeRun{node: node, kind: kindEngine}
			if got := r.othersLevelRose(c, []*entityStats{{key: "node-1/vllm-0/0"}}); got != tc.want {
				t.Errorf("othersLevelRose = %v, want %v (notes %q)", got, tc.want, r.notes)
			}
			// An indicator's mean is the exposure rate othersExposed reads.
			xid, ok := r.a.dag.Node("xid")
			if !ok {
				t.Fatal("no xid node")
			}
			if r.othersLevelRose(&causeRun{node: xid, kind: kindGPU}, []*entityStats{{key: "GPU-0"}}) {
				t.Error("othersLevelRose judged an indicator node")
			}
		})
	}
}
