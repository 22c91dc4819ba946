package causal

import "gonum.org/v1/gonum/floats"

// The Go fits' two kernels, Σ x·y (the first pass's cross products) and
// y += a·x (the second pass's residuals and leverages), are AVX2 with FMA
// where the CPU has them: 4 products per instruction where gonum's
// assembly does 2 (BenchmarkGoFits). The results differ from the plain
// sums in rounding only (one rounding per product and add).

//go:noescape
func dotFMA(x, y []float64) float64

//go:noescape
func axpyFMA(a float64, x, y []float64)

//go:noescape
func hingeAVX(k float64, x, dst []float64)

//go:noescape
func quadFMA(h *float64, x **float64, a *float64, m, n int)

func cpuid(op, op2 uint32) (eax, ebx, ecx, edx uint32)

func xgetbv0() uint32

// hasFMA reports AVX2 and FMA, and an OS that saves the YMM registers.
var hasFMA = func() bool {
	maxID, _, _, _ := cpuid(0, 0)
	if maxID < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const fma, osxsave, avx = 1 << 12, 1 << 27, 1 << 28
	if ecx1&(fma|osxsave|avx) != fma|osxsave|avx || xgetbv0()&6 != 6 {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<5) != 0 // AVX2
}()

// dot is Σ x[i]·y[i]; y must be at least as long as x.
func dot(x, y []float64) float64 {
	y = y[:len(x)]
	if hasFMA {
		return dotFMA(x, y)
	}
	return floats.Dot(x, y)
}

// axpy adds a·x to y; y must be at least as long as x.
func axpy(y []float64, a float64, x []float64) {
	y = y[:len(x)]
	if hasFMA {
		axpyFMA(a, x, y)
		return
	}
	floats.AddScaled(y, a, x)
}

// hinge writes greatest(x[i] − k, 0) (ClickHouse's: NaN gives 0) to dst,
// at least as long as x.
func hinge(dst []float64, k float64, x []float64) {
	dst = dst[:len(x)]
	if hasFMA {
		hingeAVX(k, x, dst)
		return
	}
	hingeGo(dst, k, x)
}

// quad adds to h[i], for lo ≤ i < hi, x[0][i]·(a[0]·x[0][i] + Σ_l
// a[l]·x[l][i]) (l = 1 … len(a)−1, in order): the leverage's terms of one
// column. With FMA, quadFMA keeps the sum in registers; the arithmetic is
// quadGo's with axpy's fused products (the same bits). ptrs is scratch.
func quad(h []float64, x [][]float64, a []float64, lo, hi int, ptrs []*float64) []*float64 {
	if !hasFMA || hi <= lo {
		return quadGo(h, x, a, lo, hi, ptrs)
	}
	ptrs = ptrs[:0]
	for _, c := range x {
		ptrs = append(ptrs, &c[lo:hi][0])
	}
	quadFMA(&h[lo:hi][0], &ptrs[0], &a[0], len(a), hi-lo)
	return ptrs
}
