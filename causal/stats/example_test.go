package stats_test

import (
	"fmt"

	"gonum.org/v1/gonum/mat"

	"github.com/tailcause/tailcause/causal/stats"
)

// Fit y = b0 + b1·x from sufficient statistics, as the ClickHouse first pass
// returns them, then get HC3 standard errors from the second pass's meat.
func ExampleFitOLS() {
	xs := []float64{1, 2, 3, 4, 5, 6}
	ys := []float64{1.1, 1.9, 3.2, 3.9, 5.3, 5.8}
	s := stats.NewSuffStats(2, []string{"intercept", "x"})
	for i := range xs {
		s.Add([]float64{1, xs[i]}, ys[i])
	}
	f, err := stats.FitOLS(s, nil)
	if err != nil {
		panic(err)
	}
	fmt.Printf("beta = [%.4f %.4f], sigma2 = %.5f\n", f.Coef[0], f.Coef[1], f.Sigma2)

	// Second pass (in memory here; causal.Regression.MeatSQL in ClickHouse).
	rows := make([]float64, 0, 2*len(xs))
	for _, x := range xs {
		rows = append(rows, 1, x)
	}
	m := stats.MeatsFromRows(mat.NewDense(len(xs), 2, rows), ys, f)
	se, _ := f.SE(stats.HC3, m.M3)
	fmt.Printf("HC3 se = [%.4f %.4f]\n", se[0], se[1])
	// Output:
	// beta = [0.0933 0.9829], sigma2 = 0.04705
	// HC3 se = [0.1892 0.0707]
}
