package causal

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/causal/sqlgen"
	"github.com/tailcause/tailcause/causal/stats"
)

// benchStats builds sufficient statistics of n random rows with p
// regressors (intercept first).
func benchStats(p, n int) *stats.SuffStats {
	rng := rand.New(rand.NewPCG(uint64(p), 1))
	s := stats.NewSuffStats(p, nil)
	x := make([]float64, p)
	for i := 0; i < n; i++ {
		x[0] = 1
		y := 0.0
		for j := 1; j < p; j++ {
			x[j] = rng.NormFloat64()
			y += x[j] / float64(j)
		}
		s.Add(x, y+rng.NormFloat64())
	}
	return s
}

func BenchmarkFitOLS(b *testing.B) {
	for _, p := range []int{10, 30, 60} {
		s := benchStats(p, 4*p+100)
		b.Run(fmt.Sprintf("p=%d", p), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := stats.FitOLS(s, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkMeatSQL(b *testing.B) {
	for _, p := range []int{10, 30, 60} {
		s := benchStats(p, 4*p+100)
		f, err := stats.FitOLS(s, nil)
		if err != nil {
			b.Fatal(err)
		}
		r := sqlgen.Regression{Table: "requests", Outcome: "log(e2e_ms)"}
		for j := 0; j < p; j++ {
			r.Regressors = append(r.Regressors, fmt.Sprintf("col_%d", j))
		}
		b.Run(fmt.Sprintf("p=%d", p), func(b *testing.B) {
			b.ReportAllocs()
			var q string
			for b.Loop() {
				if q, err = r.MeatSQL(f, []int{1}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(q)), "sql-bytes")
		})
	}
}

func BenchmarkBackdoorSetDefaultDAG(b *testing.B) {
	g, err := dag.Default()
	if err != nil {
		b.Fatal(err)
	}
	var causes []string
	for _, n := range g.Nodes() {
		if n.Cause != "" {
			causes = append(causes, n.Name)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, c := range causes {
			if _, err := g.BackdoorSet(c, "e2e_ms", nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(len(causes)), "causes/op")
}

func BenchmarkHealth(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	counts := make([]stats.EntityCounts, 64)
	for i := range counts {
		counts[i] = stats.EntityCounts{Tail: float64(rng.IntN(20)), N: 1000}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := stats.Health(counts, nil); err != nil {
			b.Fatal(err)
		}
	}
}
