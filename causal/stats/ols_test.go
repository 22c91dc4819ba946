package stats

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/tailcause/tailcause/causal/stats/statstest"
)

func statsOf(x mat.Matrix, y []float64, names []string) *SuffStats {
	n, p := x.Dims()
	s := NewSuffStats(p, names)
	row := make([]float64, p)
	for i := 0; i < n; i++ {
		for j := range row {
			row[j] = x.At(i, j)
		}
		s.Add(row, y[i])
	}
	return s
}

func TestOLSReference(t *testing.T) {
	x, y, ref := statstest.LoadOLSData(t, "testdata")
	for _, tc := range []struct {
		name string
		fit  func() (*OLS, *Meats)
	}{
		{"suffstats", func() (*OLS, *Meats) {
			f, err := FitOLS(statsOf(x, y, nil), nil)
			if err != nil {
				t.Fatal(err)
			}
			return f, MeatsFromRows(x, y, f)
		}},
		{"rows-qr", func() (*OLS, *Meats) {
			f, m, err := OLSRows(x, y)
			if err != nil {
				t.Fatal(err)
			}
			return f, m
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, m := tc.fit()
			for j, b := range ref.Coef {
				statstest.Near(t, "coef", f.Coef[j], b, 1e-11)
			}
			statstest.Near(t, "rss", f.RSS, ref.RSS, 1e-10)
			statstest.Near(t, "sigma2", f.Sigma2, ref.Sigma2, 1e-10)
			statstest.Near(t, "max leverage", m.MaxLeverage, ref.MaxLev, 1e-11)
			for kind, name := range map[CovType]string{Classical: "classical", HC0: "HC0", HC1: "HC1", HC3: "HC3"} {
				meat := m.M0
				if kind == HC3 {
					meat = m.M3
				}
				se, err := f.SE(kind, meat)
				if err != nil {
					t.Fatal(err)
				}
				for j := range se {
					statstest.Near(t, name+" se", se[j], ref.SE[name][j], 1e-9)
					statstest.Near(t, name+" se (statsmodels)", se[j], ref.SEStatsmod[name][j], 1e-9)
					one, err := f.CoefSE(kind, m, j)
					if err != nil {
						t.Fatal(err)
					}
					statstest.Near(t, name+" CoefSE", one, se[j], 1e-12)
				}
			}
			for i := 0; i < 4; i++ {
				for j := 0; j < 4; j++ {
					statstest.Near(t, "M0", m.M0.At(i, j), ref.MeatHC0[i][j], 1e-9)
					statstest.Near(t, "M3", m.M3.At(i, j), ref.MeatHC3[i][j], 1e-9)
				}
			}
		})
	}
}

func TestOLSCollinear(t *testing.T) {
	x, y, _ := statstest.LoadOLSData(t, "testdata")
	n, _ := x.Dims()
	// Append x4 = 2·x1 − x3: a linear combination.
	x5 := mat.NewDense(n, 5, nil)
	for i := 0; i < n; i++ {
		for j := 0; j < 4; j++ {
			x5.Set(i, j, x.At(i, j))
		}
		x5.Set(i, 4, 2*x.At(i, 1)-x.At(i, 3))
	}
	names := []string{"1", "x1", "x2", "x3", "x4"}
	_, err := FitOLS(statsOf(x5, y, names), nil)
	var ce *CollinearError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCollinear) {
		t.Fatalf("err = %v, want *CollinearError", err)
	}
	if len(ce.Columns) != 1 || ce.Columns[0] != 4 || ce.Names[0] != "x4" {
		t.Errorf("collinear columns %v %v, want [4] [x4]", ce.Columns, ce.Names)
	}
	f, err := FitOLS(statsOf(x5, y, names), &OLSOptions{PseudoInverse: true})
	if err != nil {
		t.Fatal(err)
	}
	full, err := FitOLS(statsOf(x, y, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !f.PseudoInverse || f.Rank != 4 || f.DFResid != full.DFResid {
		t.Errorf("pinv fit: flag %v rank %d df %v", f.PseudoInverse, f.Rank, f.DFResid)
	}
	statstest.Near(t, "pinv rss", f.RSS, full.RSS, 1e-7)
	// Fitted values agree with the identified model.
	for i := 0; i < n; i++ {
		var a, b float64
		for j := 0; j < 5; j++ {
			a += f.Coef[j] * x5.At(i, j)
		}
		for j := 0; j < 4; j++ {
			b += full.Coef[j] * x.At(i, j)
		}
		statstest.Near(t, "fitted", a, b, 1e-8)
	}

	// A constant column alongside the intercept.
	xc := mat.NewDense(n, 3, nil)
	for i := 0; i < n; i++ {
		xc.Set(i, 0, 1)
		xc.Set(i, 1, x.At(i, 1))
		xc.Set(i, 2, 7)
	}
	if _, err := FitOLS(statsOf(xc, y, nil), nil); !errors.As(err, &ce) || ce.Columns[0] != 2 {
		t.Errorf("constant column: err = %v", err)
	}
	// An all-zero column.
	xc.Set(0, 2, 0)
	for i := 0; i < n; i++ {
		xc.Set(i, 2, 0)
	}
	if _, err := FitOLS(statsOf(xc, y, nil), nil); !errors.As(err, &ce) || ce.Columns[0] != 2 {
		t.Errorf("zero column: err = %v", err)
	}
}

func TestOLSErrors(t *testing.T) {
	s := NewSuffStats(3, nil)
	s.Add([]float64{1, 2, 3}, 1)
	if _, err := FitOLS(s, nil); err == nil {
		t.Error("n <= p accepted")
	}
	if _, err := FitOLS(nil, nil); err == nil {
		t.Error("nil accepted")
	}
	s = NewSuffStats(2, nil)
	for i := 0; i < 5; i++ {
		s.Add([]float64{1, float64(i)}, float64(i))
	}
	s.YtY = math.NaN()
	if _, err := FitOLS(s, nil); err == nil {
		t.Error("NaN accepted")
	}
}

// TestOLSBadlyScaled fits columns of very different units (bytes/s next
// to ratios) from normal equations and compares with QR on the rows.
func TestOLSBadlyScaled(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	n, p := 2000, 5
	x := mat.NewDense(n, p, nil)
	y := make([]float64, n)
	for i := 0; i < n; i++ {
		x.Set(i, 0, 1)
		x.Set(i, 1, 1e10+rng.NormFloat64()*3e9) // PCIe bytes/s
		x.Set(i, 2, rng.Float64())              // a ratio
		x.Set(i, 3, float64(rng.IntN(4000)))    // tokens
		x.Set(i, 4, rng.Float64()*1e-3)         // a tiny scale
		y[i] = 3 + 2e-10*x.At(i, 1) + 0.5*x.At(i, 2) + 1e-3*x.At(i, 3) + 700*x.At(i, 4) + rng.NormFloat64()
	}
	f, err := FitOLS(statsOf(x, y, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := OLSRows(x, y)
	if err != nil {
		t.Fatal(err)
	}
	for j := range f.Coef {
		statstest.Near(t, "coef", f.Coef[j], r.Coef[j], 1e-6)
	}
}
