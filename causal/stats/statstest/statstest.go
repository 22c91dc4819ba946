package statstest

import (
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// OLSReference is testdata/ols_reference.json: numpy's and statsmodels'
// answers for the design of ols_data.csv.
type OLSReference struct {
	N          float64              `json:"n"`
	XtX        [][]float64          `json:"xtx"`
	XtY        []float64            `json:"xty"`
	YtY        float64              `json:"yty"`
	Coef       []float64            `json:"coef"`
	XtXInv     [][]float64          `json:"xtx_inv"`
	RSS        float64              `json:"rss"`
	Sigma2     float64              `json:"sigma2"`
	MaxLev     float64              `json:"max_leverage"`
	MeatHC0    [][]float64          `json:"meat_hc0"`
	MeatHC3    [][]float64          `json:"meat_hc3"`
	SE         map[string][]float64 `json:"se_explicit"`
	SEStatsmod map[string][]float64 `json:"se_statsmodels"`
}

// LoadOLSData reads dir/ols_data.csv as the design [1, x1, x2, x3] and y,
// and dir/ols_reference.json (dir is causal/stats/testdata, relative to the
// test's package).
func LoadOLSData(t testing.TB, dir string) (*mat.Dense, []float64, OLSReference) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "ols_data.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	recs = recs[1:]
	x := mat.NewDense(len(recs), 4, nil)
	y := make([]float64, len(recs))
	for i, r := range recs {
		x.Set(i, 0, 1)
		for j := 0; j < 4; j++ {
			v, err := strconv.ParseFloat(r[j], 64)
			if err != nil {
				t.Fatal(err)
			}
			if j < 3 {
				x.Set(i, j+1, v)
			} else {
				y[i] = v
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "ols_reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref OLSReference
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	return x, y, ref
}

// Near fails t unless got is within rel (relative) of want.
func Near(t *testing.T, what string, got, want, rel float64) {
	t.Helper()
	if d := math.Abs(got - want); d > rel*math.Max(math.Abs(want), 1e-300) {
		t.Errorf("%s = %.15g, want %.15g (rel err %.2g > %.2g)", what, got, want, d/math.Abs(want), rel)
	}
}

// Columns returns the columns cols of x, in that order, as a new matrix.
func Columns(x *mat.Dense, cols ...int) *mat.Dense {
	n, _ := x.Dims()
	out := mat.NewDense(n, len(cols), nil)
	for i := 0; i < n; i++ {
		for j, c := range cols {
			out.Set(i, j, x.At(i, c))
		}
	}
	return out
}
