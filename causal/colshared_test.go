package causal

import (
	"math"
	"testing"
)

// Every test of the package that analyses through a snapshot with the Go
// fits also runs the shared queries and fails unless the frame's answers
// are theirs bit for bit (checkSharedSQL); the benchmarks turn it off.
func init() { checkSharedSQL = true }

func TestQuantileExactRank(t *testing.T) {
	for _, c := range []struct {
		vs    []float64
		level float64
		want  float64
	}{
		{[]float64{5, 1, 4, 2, 3}, 0.5, 3},
		{[]float64{5, 1, 4, 2, 3}, 0.99, 5},
		{[]float64{5, 1, 4, 2, 3}, 1, 5},
		{[]float64{5, 1, 4, 2, 3}, 0, 1},
		{[]float64{2, 2, 2, 1}, 0.5, 2},
	} {
		if got := quantileExact(append([]float64(nil), c.vs...), c.level); got != c.want {
			t.Errorf("quantileExact(%v, %v) = %v, want %v", c.vs, c.level, got, c.want)
		}
	}
	if got := quantileExact(nil, 0.99); !math.IsNaN(got) {
		t.Errorf("quantileExact of nothing = %v, want NaN", got)
	}
	// nthElement against sorting, on many shapes.
	for n := 1; n < 200; n += 7 {
		vs := make([]float64, n)
		for i := range vs {
			vs[i] = float64((i * 7919) % 13)
		}
		sorted := append([]float64(nil), vs...)
		for i := range sorted {
			for j := i + 1; j < len(sorted); j++ {
				if sorted[j] < sorted[i] {
					sorted[i], sorted[j] = sorted[j], sorted[i]
				}
			}
		}
		for k := 0; k < n; k += 3 {
			if got := nthElement(append([]float64(nil), vs...), k); got != sorted[k] {
				t.Fatalf("nthElement(n=%d, k=%d) = %v, want %v", n, k, got, sorted[k])
			}
		}
	}
}
