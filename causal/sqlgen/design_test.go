package sqlgen_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/causal"
	"github.com/tailcause/tailcause/causal/sqlgen"
	"github.com/tailcause/tailcause/causal/stats"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"gonum.org/v1/gonum/mat"
)

func TestDesignColumns(t *testing.T) {
	d := sqlgen.Design{Table: "t", Regressors: []string{"1", "x"}, Outcomes: []string{"y", "z"}, Sums: []string{"w"}}
	cols := d.SuffStatsColumns()
	want := []string{"n", "xx_0_0", "xx_0_1", "xx_1_1", "x_0", "x_1", "xy_0_0", "xy_0_1", "y_0", "yy_0", "xy_1_0", "xy_1_1", "y_1", "yy_1", "s_0"}
	if strings.Join(cols, ",") != strings.Join(want, ",") {
		t.Errorf("columns %v, want %v", cols, want)
	}
	if _, err := (sqlgen.Design{Table: "t", Regressors: []string{"1"}}).SuffStatsSQL(); err == nil {
		t.Error("design without outcomes accepted")
	}
	q, err := d.SuffStatsSQL()
	if err != nil {
		t.Fatal(err)
	}
	for _, banned := range []string{"JOIN", "JSONExtract", "toStartOfInterval"} {
		if strings.Contains(q, banned) {
			t.Errorf("query uses %s", banned)
		}
	}
}

// TestDesignOnClickHouse runs both passes on the test ClickHouse (26.9; the
// project supports 24.8 and newer): nested subqueries with SELECT *, expr
// and isFinite, and a 50-regressor leverage sum, deeper than max_ast_depth
// if written flat; it compares with the QR reference computed from the rows
// in Go.
func TestDesignOnClickHouse(t *testing.T) {
	st := chstoretest.Fresh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := causal.StoreDB(st)
	const p, n = 50, 400
	// Two factors: g with levels a..e (a the reference), h with u, v, w
	// (u the reference); X gets their indicator columns after c1..c49.
	gl, hl := []string{"a", "b", "c", "d", "e"}, []string{"u", "v", "w"}
	cols := []string{"g", "h", "y"}
	ddl := []string{"g String", "h String", "y Float64"}
	for j := 1; j < p; j++ {
		cols = append(cols, fmt.Sprintf("c%d", j))
		ddl = append(ddl, fmt.Sprintf("c%d Float64", j))
	}
	if err := st.Conn().Exec(ctx, "CREATE TABLE wide ("+strings.Join(ddl, ", ")+") ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	pf := p + len(gl) - 1 + len(hl) - 1
	x := mat.NewDense(n, pf, nil)
	y := make([]float64, n)
	rows := make([][]any, 0, n+1)
	for i := 0; i < n; i++ {
		x.Set(i, 0, 1)
		v := 0.5
		for j := 1; j < p; j++ {
			x.Set(i, j, rng.NormFloat64())
			v += x.At(i, j) / float64(j)
		}
		g, h := rng.IntN(len(gl)), rng.IntN(len(hl))
		if g > 0 {
			x.Set(i, p+g-1, 1)
			v += float64(g)
		}
		if h > 0 {
			x.Set(i, p+len(gl)-1+h-1, 1)
			v -= float64(h)
		}
		// Heteroskedastic noise, so HC3 differs from the classical se.
		y[i] = v + rng.NormFloat64()*(0.5+math.Abs(x.At(i, 1)))
		row := []any{gl[g], hl[h], y[i]}
		for j := 1; j < p; j++ {
			row = append(row, x.At(i, j))
		}
		rows = append(rows, row)
	}
	// A row the finite filter must drop.
	bad := []any{"a", "u", math.NaN()}
	for j := 1; j < p; j++ {
		bad = append(bad, 0.0)
	}
	rows = append(rows, bad)
	if err := db.Insert(ctx, "wide", cols, rows); err != nil {
		t.Fatal(err)
	}
	regs := []string{"1"}
	for j := 1; j < p; j++ {
		regs = append(regs, fmt.Sprintf("c%d", j))
	}
	y2 := make([]float64, n)
	for i := range y {
		y2[i] = 2*y[i] + 3*x.At(i, 2)
	}
	d := sqlgen.Design{Table: "wide", Where: "c1 > -100", Regressors: regs, Outcomes: []string{"y", "2 * y + 3 * c2"}, Sums: []string{"c1 > 0"},
		Factors: []sqlgen.Factor{{Name: "g", Expr: "g", Levels: gl[1:]}, {Name: "h", Expr: "h", Levels: hl[1:]}}}
	q1, err := d.SuffStatsSQL()
	if err != nil {
		t.Fatal(err)
	}
	var groups []sqlgen.GroupRow
	err = causal.QueryRows(ctx, db, "pass 1", q1, func(r causal.Rows) error {
		g := sqlgen.GroupRow{Labels: make([]string, 2), Values: make([]float64, len(d.SuffStatsColumns()))}
		dest := []any{&g.Labels[0], &g.Labels[1]}
		for i := range g.Values {
			dest = append(dest, &g.Values[i])
		}
		groups = append(groups, g)
		return r.Scan(dest...)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != len(gl)*len(hl) {
		t.Errorf("%d groups", len(groups))
	}
	suff, sums, err := d.AssembleSuffStats(groups)
	if err != nil {
		t.Fatal(err)
	}
	var positive float64
	for i := 0; i < n; i++ {
		if x.At(i, 1) > 0 {
			positive++
		}
	}
	if suff[0].N != n || sums[0] != positive {
		t.Fatalf("pass 1 read %v rows (sum %v), want %d (%v)", suff[0].N, sums[0], n, positive)
	}
	var fits []*stats.OLS
	for _, s := range suff {
		f, err := stats.FitOLS(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		fits = append(fits, f)
	}
	for _, coef := range []int{3, p + 1} { // an expression and a factor level
		q2, err := d.MeatSQL(fits, coef)
		if err != nil {
			t.Fatal(err)
		}
		row2, err := queryFloats(ctx, db, "pass 2", q2, len(d.MeatColumns()))
		if err != nil {
			t.Fatalf("%v (query of %d bytes)", err, len(q2))
		}
		meats, err := d.ParseMeats(row2, coef)
		if err != nil {
			t.Fatal(err)
		}
		checkAgainstRows(t, x, [][]float64{y, y2}, fits, meats, coef)
	}
	const coef = 3
	q2, _ := d.MeatSQL(fits, coef)
	row2, err := queryFloats(ctx, db, "pass 2", q2, len(d.MeatColumns()))
	if err != nil {
		t.Fatal(err)
	}
	meats, _ := d.ParseMeats(row2, coef)
	// The single-outcome Regression passes give the same numbers.
	r := d.Regression(0)
	r1, _ := r.SuffStatsSQL()
	rrow, err := queryFloats(ctx, db, "regression pass 1", r1, len(r.SuffStatsColumns()))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := r.ParseSuffStats(rrow)
	if err != nil {
		t.Fatal(err)
	}
	rf, _ := stats.FitOLS(rs, nil)
	r2, _ := r.MeatSQL(rf, []int{coef})
	rrow2, err := queryFloats(ctx, db, "regression pass 2", r2, len(r.MeatColumns([]int{coef})))
	if err != nil {
		t.Fatal(err)
	}
	rm, _ := r.ParseMeats(rrow2, []int{coef})
	a, _ := rf.CoefSE(stats.HC3, rm, coef)
	b, _ := fits[0].CoefSE(stats.HC3, meats[0], coef)
	if rel(a, b) > 1e-9 {
		t.Errorf("Regression se %v, Design se %v", a, b)
	}
}

// checkAgainstRows compares fits and targeted meats with the QR reference
// of the rows.
func checkAgainstRows(t *testing.T, x *mat.Dense, ys [][]float64, fits []*stats.OLS, meats []*stats.Meats, coef int) {
	t.Helper()
	for k, yy := range ys {
		ref, refMeats, err := stats.OLSRows(x, yy)
		if err != nil {
			t.Fatal(err)
		}
		wantSE, _ := ref.SE(stats.HC3, refMeats.M3)
		gotSE, err := fits[k].CoefSE(stats.HC3, meats[k], coef)
		if err != nil {
			t.Fatal(err)
		}
		if rel(fits[k].Coef[coef], ref.Coef[coef]) > 1e-8 || rel(gotSE, wantSE[coef]) > 1e-6 || rel(meats[k].MaxLeverage, refMeats.MaxLeverage) > 1e-8 {
			t.Errorf("outcome %d coef %d: β %v se %v h %v, want %v %v %v", k, coef, fits[k].Coef[coef], gotSE, meats[k].MaxLeverage, ref.Coef[coef], wantSE[coef], refMeats.MaxLeverage)
		}
	}
}

func rel(a, b float64) float64 { return math.Abs(a-b) / math.Max(math.Abs(b), 1e-300) }

// queryFloats runs a query that returns exactly one row of n Float64
// columns.
func queryFloats(ctx context.Context, db causal.Querier, what, q string, n int) ([]float64, error) {
	out := make([]float64, n)
	dest := make([]any, n)
	for i := range out {
		dest[i] = &out[i]
	}
	got := 0
	if err := causal.QueryRows(ctx, db, what, q, func(r causal.Rows) error { got++; return r.Scan(dest...) }); err != nil {
		return nil, err
	}
	if got != 1 {
		return nil, fmt.Errorf("query %s: %d rows, want 1", what, got)
	}
	return out, nil
}
