package causaltest

import (
	"fmt"
	"time"
)

// Start is the first instant of the tests' scenarios.
var Start = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)

// Fleet is the parallel-sweep tests' fleet: six models over one hour,
// faults in the second half: a degraded engine among 16 (an entity
// breach), a long-prompt shift (a scope breach), a KV fault on one engine
// of eight, and three models without a fault.
func Fleet() []Scenario {
	f := []Scenario{
		{Seed: 7, RatePerS: 20, Hosts: 4, GPUs: 4, Model: "a-degraded", Faults: []Fault{{Kind: "degraded", Host: 2, GPU: 3, Factor: 3}}},
		{Seed: 1, Model: "b-long-prompts", Service: "batch", Faults: []Fault{{Kind: "long_prompts"}}},
		{Seed: 3, Model: "c-kv", Faults: []Fault{{Kind: "kv", Host: 1, GPU: 1}}},
		{Seed: 4, RatePerS: 8, Hosts: 2, Model: "d-quiet"},
		{Seed: 5, RatePerS: 8, Hosts: 2, Model: "e-quiet"},
		{Seed: 6, RatePerS: 3, Hosts: 1, Model: "f-small"},
	}
	for i := range f {
		f[i].Start, f[i].Duration, f[i].FaultFrom = Start, time.Hour, 30*time.Minute
	}
	return f
}

// FirstDiff shows where two documents, a sequential run's and a
// parallel one's, first differ.
func FirstDiff(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(0, i-300)
	return fmt.Sprintf("sequential: …%s…\nparallel:   …%s…", a[from:min(len(a), i+300)], b[from:min(len(b), i+300)])
}
