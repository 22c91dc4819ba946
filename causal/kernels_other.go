//go:build !amd64

package causal

import "gonum.org/v1/gonum/floats"

// dot is Σ x[i]·y[i]; y must be at least as long as x.
func dot(x, y []float64) float64 { return floats.Dot(x, y[:len(x)]) }

// axpy adds a·x to y; y must be at least as long as x.
func axpy(y []float64, a float64, x []float64) { floats.AddScaled(y[:len(x)], a, x) }

// hinge writes greatest(x[i] − k, 0) (ClickHouse's: NaN gives 0) to dst,
// at least as long as x.
func hinge(dst []float64, k float64, x []float64) { hingeGo(dst[:len(x)], k, x) }

// hasFMA is false: the kernels are gonum's loops.
const hasFMA = false

// quad adds to h[i], for lo ≤ i < hi, x[0][i]·(a[0]·x[0][i] + Σ_l
// a[l]·x[l][i]).
func quad(h []float64, x [][]float64, a []float64, lo, hi int, ptrs []*float64) []*float64 {
	return quadGo(h, x, a, lo, hi, ptrs)
}
