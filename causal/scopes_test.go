package causal

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/causal/causaltest"
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

// ScopeLoad ends the data where every engine of the scope has been
// written: the engine furthest behind, unless it is IdleBehind or more
// behind the scope's newest row (idle, not late).
func TestScopeLoadComplete(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st := chstoretest.Fresh(t)
	s := synthScenario{Seed: 70, Start: synthStart, Duration: 5 * time.Minute, Hosts: 3, GPUs: 1, RatePerS: 6}
	if _, err := insertSynth(ctx, st.Conn(), s, 100_000); err != nil {
		t.Fatal(err)
	}
	a, err := NewAnalyzer(StoreDB(st), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	newest := func(host string) time.Time {
		t.Helper()
		v, err := queryFloats(ctx, StoreDB(st), "newest", "SELECT toFloat64(max(end_ns)) FROM requests FINAL WHERE host = '"+host+"'", 1)
		if err != nil {
			t.Fatal(err)
		}
		return time.Unix(0, int64(v[0]))
	}
	iv := Interval{Start: synthStart.Add(-time.Hour), End: synthStart.Add(time.Hour)}
	load := func() (int, time.Time) {
		t.Helper()
		n, end, err := a.ScopeLoad(ctx, SLO{Scope: llama}, iv)
		if err != nil {
			t.Fatal(err)
		}
		return n, end
	}
	n0, _ := load()
	// node-1's rows of its last 12 s are not written yet: the data is
	// complete up to its newest.
	cut := newest(causaltest.HostName(0)).Add(-12 * time.Second)
	if err := st.Conn().Exec(ctx, fmt.Sprintf("DELETE FROM requests WHERE host = '%s' AND end_ns > %d", causaltest.HostName(1), cut.UnixNano())); err != nil {
		t.Fatal(err)
	}
	n, end := load()
	if want := newest(causaltest.HostName(1)); !end.Equal(want) || n >= n0 {
		t.Errorf("a late engine: complete at %v, want its newest %v (requests %d of %d)", end, want, n, n0)
	}
	// node-2 stopped serving two minutes before the others: idle.
	idle := newest(causaltest.HostName(0)).Add(-2 * time.Minute)
	if err := st.Conn().Exec(ctx, fmt.Sprintf("DELETE FROM requests WHERE host = '%s' AND end_ns > %d", causaltest.HostName(2), idle.UnixNano())); err != nil {
		t.Fatal(err)
	}
	if _, end := load(); !end.Equal(newest(causaltest.HostName(1))) {
		t.Errorf("an idle engine: complete at %v, want the late engine's newest %v", end, newest(causaltest.HostName(1)))
	}
}
