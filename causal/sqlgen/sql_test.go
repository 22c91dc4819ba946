package sqlgen

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/tailcause/tailcause/causal/causaltest"
	"github.com/tailcause/tailcause/causal/stats"
	"github.com/tailcause/tailcause/causal/stats/statstest"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func golden(t *testing.T, name, got string) {
	t.Helper()
	causaltest.Golden(t, *update, filepath.Join("testdata", name), got)
}

// refRegression is the reference dataset's regression as ClickHouse would
// see it, in a table ols_data(x1, x2, x3, y). testdata/sql_check.py runs the
// golden SQL below on that data (in SQLite, with toFloat64 and isFinite
// defined) and compares with the numpy reference.
var refRegression = Regression{
	Table:      "ols_data",
	Where:      "y > -1000",
	Regressors: []string{"1", "x1", "x2", "x3"},
	Names:      []string{"intercept", "x1", "x2", "x3"},
	Outcome:    "y",
}

// refFit is a fit carrying the numpy β and (XᵀX)⁻¹, so that the golden SQL
// text does not depend on this machine's last floating-point bits.
func refFit(t *testing.T) *stats.OLS {
	t.Helper()
	_, _, ref := statstest.LoadOLSData(t, filepath.Join("..", "stats", "testdata"))
	inv := mat.NewSymDense(4, nil)
	for i := 0; i < 4; i++ {
		for j := i; j < 4; j++ {
			inv.SetSym(i, j, ref.XtXInv[i][j])
		}
	}
	return &stats.OLS{N: ref.N, Coef: ref.Coef, XtXInv: inv, Rank: 4, DFResid: ref.N - 4}
}

func TestSuffStatsSQL(t *testing.T) {
	q, err := refRegression.SuffStatsSQL()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "ols_suffstats.golden.sql", q+"\n")
	for _, banned := range []string{"JOIN", "JSONExtract", "toStartOfInterval"} {
		if strings.Contains(q, banned) {
			t.Errorf("query uses %s, outside the core the generated SQL keeps to (see Regression)", banned)
		}
	}
	if got, want := strings.Count(q, " AS xx_"), 10; got != want {
		t.Errorf("%d cross products, want %d (upper triangle)", got, want)
	}
	if _, err := (Regression{Table: "t"}).SuffStatsSQL(); err == nil {
		t.Error("regression without regressors accepted")
	}
}

func TestMeatSQL(t *testing.T) {
	f := refFit(t)
	full, err := refRegression.MeatSQL(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "ols_meat_full.golden.sql", full+"\n")
	one, err := refRegression.MeatSQL(f, []int{2})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "ols_meat_coef2.golden.sql", one+"\n")
	if _, err := refRegression.MeatSQL(f, []int{9}); err == nil {
		t.Error("out-of-range coefficient accepted")
	}
	if got := ResidualSQL("y", []string{"1", "x"}, []float64{0.5, -2}); got != "(y) - (0.5 * 1 + (-2) * x)" {
		t.Errorf("ResidualSQL = %q", got)
	}
	if got := Hinges("prompt_tokens", []float64{512, 2048}); len(got) != 3 || got[2] != "greatest(toFloat64(prompt_tokens) - 2048, 0)" {
		t.Errorf("Hinges = %q", got)
	}
	a := mat.NewSymDense(2, []float64{1, 0.25, 0.25, 3})
	if got := LeverageSQL([]string{"a", "b"}, a); got != "1 * a * a + 0.5 * a * b + 3 * b * b" {
		t.Errorf("LeverageSQL = %q", got)
	}
}

// TestParseSuffStats feeds a synthetic first-pass row (the reference
// cross products in SuffStatsColumns order) through the parser and solver.
func TestParseSuffStats(t *testing.T) {
	_, _, ref := statstest.LoadOLSData(t, filepath.Join("..", "stats", "testdata"))
	cols := refRegression.SuffStatsColumns()
	row := make([]float64, 0, len(cols))
	row = append(row, ref.N)
	for i := 0; i < 4; i++ {
		for j := i; j < 4; j++ {
			row = append(row, ref.XtX[i][j])
		}
	}
	row = append(row, ref.XtY...)
	row = append(row, ref.YtY)
	if len(row) != len(cols) || cols[0] != "n" || cols[len(cols)-1] != "yy" || cols[1] != "xx_0_0" || cols[11] != "xy_0" {
		t.Fatalf("columns %v", cols)
	}
	s, err := refRegression.ParseSuffStats(row)
	if err != nil {
		t.Fatal(err)
	}
	f, err := stats.FitOLS(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	for j, b := range ref.Coef {
		statstest.Near(t, "coef", f.Coef[j], b, 1e-10)
	}
	statstest.Near(t, "sigma2", f.Sigma2, ref.Sigma2, 1e-8)
	if _, err := refRegression.ParseSuffStats(row[1:]); err == nil {
		t.Error("short row accepted")
	}

	// Second pass, full: the meats in MeatColumns order.
	mrow := []float64{ref.N, ref.MaxLev}
	for _, m := range [][][]float64{ref.MeatHC0, ref.MeatHC3} {
		for i := 0; i < 4; i++ {
			for j := i; j < 4; j++ {
				mrow = append(mrow, m[i][j])
			}
		}
	}
	meats, err := refRegression.ParseMeats(mrow, nil)
	if err != nil {
		t.Fatal(err)
	}
	for j := 0; j < 4; j++ {
		se, err := f.CoefSE(stats.HC3, meats, j)
		if err != nil {
			t.Fatal(err)
		}
		statstest.Near(t, "HC3 se", se, ref.SE["HC3"][j], 1e-8)
		se, err = f.CoefSE(stats.HC1, meats, j)
		if err != nil {
			t.Fatal(err)
		}
		statstest.Near(t, "HC1 se", se, ref.SE["HC1"][j], 1e-8)
	}

	// Second pass, targeted at coefficient 2: v_j = a_jᵀ M a_j.
	v := func(m [][]float64) float64 {
		var s float64
		for i := 0; i < 4; i++ {
			for k := 0; k < 4; k++ {
				s += ref.XtXInv[2][i] * m[i][k] * ref.XtXInv[k][2]
			}
		}
		return s
	}
	trow := []float64{ref.N, ref.MaxLev, v(ref.MeatHC0), v(ref.MeatHC3)}
	tm, err := refRegression.ParseMeats(trow, []int{2})
	if err != nil {
		t.Fatal(err)
	}
	for kind, name := range map[stats.CovType]string{stats.HC0: "HC0", stats.HC1: "HC1", stats.HC3: "HC3"} {
		se, err := f.CoefSE(kind, tm, 2)
		if err != nil {
			t.Fatal(err)
		}
		statstest.Near(t, name+" targeted se", se, ref.SE[name][2], 1e-8)
	}
	if _, err := f.CoefSE(stats.HC3, tm, 1); err == nil {
		t.Error("targeted meats answered for an untargeted coefficient")
	}
}

func TestSumSQLDepth(t *testing.T) {
	terms := make([]string, 2000)
	for i := range terms {
		terms[i] = fmt.Sprintf("t%d", i)
	}
	s := sumSQL(terms)
	depth, maxDepth := 0, 0
	for _, c := range s {
		switch c {
		case '(':
			depth++
			maxDepth = max(maxDepth, depth)
		case ')':
			depth--
		}
	}
	if maxDepth > 8 {
		t.Errorf("nesting depth %d for 2000 terms", maxDepth)
	}
	if strings.Count(s, "+") != 1999 {
		t.Errorf("%d additions", strings.Count(s, "+"))
	}
	if got := sumSQL([]string{"a", "b"}); got != "a + b" {
		t.Errorf("short sums stay flat: %q", got)
	}
}
