package causal

import (
	"math"
	"math/rand/v2"
	"slices"
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
		sorted := slices.Sorted(slices.Values(vs))
		for k := 0; k < n; k += 3 {
			if got := nthElement(append([]float64(nil), vs...), k); got != sorted[k] {
				t.Fatalf("nthElement(n=%d, k=%d) = %v, want %v", n, k, got, sorted[k])
			}
		}
	}
}

// TestNodeGridsIndexed checks the grids read through the shared index
// against the full scan, bit for bit, on values with and without gaps
// (NaN, ±Inf), with and without a baseline.
func TestNodeGridsIndexed(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 5*frameChunk + 123
	f := &colFrame{nums: map[string][]colPart{}, labels: map[string]*labelCol{}}
	for lo := 0; lo < n; lo += frameChunk {
		m := min(frameChunk, n-lo)
		f.chunks = append(f.chunks, m)
		h := make([]uint32, m)
		w := make([]uint8, m)
		full, gaps, few := make([]float64, m), make([]float64, m), make([]float32, m)
		for i := range h {
			h[i] = rng.Uint32()
			w[i] = uint8(rng.IntN(2))
			full[i] = rng.NormFloat64()
			gaps[i] = rng.ExpFloat64()
			switch rng.IntN(20) {
			case 0:
				gaps[i] = math.NaN()
			case 1:
				gaps[i] = math.Inf(1)
			}
			few[i] = float32(math.NaN())
			if rng.IntN(200) == 0 {
				few[i] = float32(rng.IntN(7))
			}
		}
		f.hash = append(f.hash, h)
		f.nums["toFloat64(w)"] = append(f.nums["toFloat64(w)"], colPart{u8: w})
		f.nums["toFloat64(full)"] = append(f.nums["toFloat64(full)"], colPart{f64: full})
		f.nums["toFloat64(gaps)"] = append(f.nums["toFloat64(gaps)"], colPart{f64: gaps})
		f.nums["toFloat64(few)"] = append(f.nums["toFloat64(few)"], colPart{f32: few})
	}
	tc := termCompiler{}
	for _, base := range []bool{true, false} {
		win := "toFloat64(w)"
		if !base {
			win = ""
		}
		ix := f.gridIndex(win, base)
		for _, e := range []string{"toFloat64(full)", "toFloat64(gaps)", "toFloat64(1 - gaps)", "toFloat64(few)", "greatest(toFloat64(full) - 0.5, 0)"} {
			cov := tc.compile(e)
			buf := f.frameBufs(2)
			want := f.nodeGrids(cov, win, base, buf)
			got := f.nodeGridsIndexed(cov, ix, buf)
			if got == nil {
				t.Logf("%s (baseline %v): below the index's degree, scanned", e, base)
				continue
			}
			if !sameFloats(got.base, want.base) || !sameFloats(got.win, want.win) || !sameFloats(got.pooled, want.pooled) || got.nBase != want.nBase || got.nWin != want.nWin {
				t.Errorf("%s (baseline %v): indexed grids %+v, scanned %+v", e, base, got, want)
			}
		}
	}
}

func TestPlaceLabel(t *testing.T) {
	g := [5]string{"node-1", "vllm-1-0", "0", "GPU-1", "llama"}
	for a, want := range map[string]string{
		"toString(gpu)": "GPU-1",
		"toString(concat(host, '/', pod, '/', engine))": "node-1/vllm-1-0/0",
		"toString(concat(toString(host), ':', model))":  "node-1:llama",
		"toString(concat(host, 'it\\'s', engine))":      "node-1it's0",
		"toString(" + placeExpr + ")":                   "node-1\x1fvllm-1-0\x1f0\x1fGPU-1\x1fllama",
		"toString(concat(host, '\\n', engine))":         "", // an escape ClickHouse reads otherwise
		"toString(concat(host, '/', service))":          "",
		"toString(lower(host))":                         "",
		"toString(if(gpu = '', engine, gpu))":           "",
	} {
		got, ok := placeLabel(a, g)
		if ok != (want != "") || got != want {
			t.Errorf("placeLabel(%s) = %q, %v; want %q", a, got, ok, want)
		}
	}
}
