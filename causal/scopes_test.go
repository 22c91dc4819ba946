package causal

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// DiscoverScopes returns at most limit scopes, the busiest, sorted by
// value, and says whether it left values out.
func TestDiscoverScopesLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st := chstoretest.Fresh(t)
	for i, rate := range []float64{2, 6, 1, 4} {
		s := synthScenario{Seed: uint64(60 + i), Start: synthStart, Duration: 5 * time.Minute, Hosts: 1, GPUs: 1, RatePerS: rate, Model: fmt.Sprintf("m-%d", i)}
		if _, err := insertSynth(ctx, st.Conn(), s, 100_000); err != nil {
			t.Fatal(err)
		}
	}
	models := func(limit int) (string, bool) {
		t.Helper()
		found, more, err := DiscoverScopes(ctx, StoreDB(st), "requests", "model", synthStart, synthStart.Add(5*time.Minute), limit)
		if err != nil {
			t.Fatal(err)
		}
		var ms []string
		for _, sc := range found {
			ms = append(ms, sc["model"])
		}
		return strings.Join(ms, ","), more
	}
	for _, c := range []struct {
		limit int
		want  string
		more  bool
	}{{0, "m-0,m-1,m-2,m-3", false}, {4, "m-0,m-1,m-2,m-3", false}, {2, "m-1,m-3", true}, {3, "m-0,m-1,m-3", true}} {
		if got, more := models(c.limit); got != c.want || more != c.more {
			t.Errorf("limit %d: %s (more %v), want %s (more %v)", c.limit, got, more, c.want, c.more)
		}
	}
	if _, _, err := DiscoverScopes(ctx, StoreDB(st), "requests", "model", synthStart, synthStart.Add(time.Minute), -1); err == nil {
		t.Error("a negative limit accepted")
	}
}
