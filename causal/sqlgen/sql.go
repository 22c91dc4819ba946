package sqlgen

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/mat"

	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/causal/stats"
)

// Regression is a least-squares problem whose rows live in ClickHouse: the
// first pass (SuffStatsSQL) aggregates XᵀX, Xᵀy and yᵀy in one SELECT; after
// FitOLS the second pass (MeatSQL) aggregates the robust-covariance meats
// from the residuals. Both passes read exactly the same rows.
//
// The generated SQL keeps to a small core: nested subqueries in FROM,
// toFloat64, count, sum, max, isFinite; no JOIN, and no alias is used in the
// SELECT list that defines it (each level reads only the columns of the
// level below), so the text is plain standard SQL apart from those function
// names (testdata/sql_check.py runs the goldens on SQLite). It runs on every
// supported server, ClickHouse 24.8 and newer (the tests use 26.9).
type Regression struct {
	Table      string   // table name, or a parenthesised subquery
	Where      string   // SQL boolean over the table; empty means all rows
	Regressors []string // SQL expressions, one per column of X; "1" is the intercept
	Names      []string // optional names of the regressors (for errors and reports)
	Outcome    string   // SQL expression of y
}

// Validate checks that the regression is complete.
func (r Regression) Validate() error {
	var errs []error
	if strings.TrimSpace(r.Table) == "" {
		errs = append(errs, errors.New("table is empty"))
	}
	if len(r.Regressors) == 0 {
		errs = append(errs, errors.New("no regressors"))
	}
	for i, x := range r.Regressors {
		if strings.TrimSpace(x) == "" {
			errs = append(errs, fmt.Errorf("regressor %d is empty", i))
		}
	}
	if r.Names != nil && len(r.Names) != len(r.Regressors) {
		errs = append(errs, fmt.Errorf("%d names for %d regressors", len(r.Names), len(r.Regressors)))
	}
	if strings.TrimSpace(r.Outcome) == "" {
		errs = append(errs, errors.New("outcome is empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid regression: %w", err)
	}
	return nil
}

func xcol(j int) string { return "tc_x" + strconv.Itoa(j) }

// rowsSQL is the shared innermost query: one Float64 column per regressor
// and the outcome, for the rows selected by Where whose values are all
// finite (a single NaN or Inf would poison every sum).
func (r Regression) rowsSQL(indent string) string {
	var b strings.Builder
	p := len(r.Regressors)
	b.WriteString(indent + "SELECT *\n" + indent + "FROM\n" + indent + "(\n")
	b.WriteString(indent + "    SELECT\n")
	for j, x := range r.Regressors {
		fmt.Fprintf(&b, "%s        toFloat64(%s) AS %s,\n", indent, x, xcol(j))
	}
	fmt.Fprintf(&b, "%s        toFloat64(%s) AS tc_y\n", indent, r.Outcome)
	fmt.Fprintf(&b, "%s    FROM %s\n", indent, r.Table)
	if strings.TrimSpace(r.Where) != "" {
		fmt.Fprintf(&b, "%s    WHERE %s\n", indent, r.Where)
	}
	b.WriteString(indent + ")\n")
	b.WriteString(indent + "WHERE isFinite(")
	for j := 0; j < p; j++ {
		b.WriteString(xcol(j) + " + ")
	}
	b.WriteString("tc_y)")
	return b.String()
}

// SuffStatsColumns names the columns of the first-pass result, in order:
// n, xx_i_j for i ≤ j (row-major upper triangle), xy_i, yy.
func (r Regression) SuffStatsColumns() []string {
	p := len(r.Regressors)
	cols := make([]string, 0, 2+p+p*(p+1)/2)
	cols = append(cols, "n")
	for i := 0; i < p; i++ {
		for j := i; j < p; j++ {
			cols = append(cols, fmt.Sprintf("xx_%d_%d", i, j))
		}
	}
	for i := 0; i < p; i++ {
		cols = append(cols, fmt.Sprintf("xy_%d", i))
	}
	return append(cols, "yy")
}

// SuffStatsSQL renders the first pass: ONE SELECT returning one row with the
// columns of SuffStatsColumns, all Float64.
func (r Regression) SuffStatsSQL() (string, error) {
	if err := r.Validate(); err != nil {
		return "", err
	}
	p := len(r.Regressors)
	var b strings.Builder
	b.WriteString("SELECT\n    toFloat64(count()) AS n")
	for i := 0; i < p; i++ {
		for j := i; j < p; j++ {
			fmt.Fprintf(&b, ",\n    sum(%s * %s) AS xx_%d_%d", xcol(i), xcol(j), i, j)
		}
	}
	for i := 0; i < p; i++ {
		fmt.Fprintf(&b, ",\n    sum(%s * tc_y) AS xy_%d", xcol(i), i)
	}
	b.WriteString(",\n    sum(tc_y * tc_y) AS yy\nFROM\n(\n")
	b.WriteString(r.rowsSQL("    "))
	b.WriteString("\n)")
	return b.String(), nil
}

// ParseSuffStats turns the first-pass result row (values in the order of
// SuffStatsColumns) into SuffStats.
func (r Regression) ParseSuffStats(row []float64) (*stats.SuffStats, error) {
	p := len(r.Regressors)
	want := 2 + p + p*(p+1)/2
	if len(row) != want {
		return nil, fmt.Errorf("parse sufficient statistics: %d values, want %d for %d regressors", len(row), want, p)
	}
	for k, v := range row {
		if !finite(v) {
			return nil, fmt.Errorf("parse sufficient statistics: column %s is %v", r.SuffStatsColumns()[k], v)
		}
	}
	var names []string
	if r.Names != nil {
		names = r.Names
	}
	s := stats.NewSuffStats(p, names)
	s.N = row[0]
	k := 1
	for i := 0; i < p; i++ {
		for j := i; j < p; j++ {
			s.XtX.SetSym(i, j, row[k])
			k++
		}
	}
	for i := 0; i < p; i++ {
		s.XtY.SetVec(i, row[k])
		k++
	}
	s.YtY = row[k]
	return s, nil
}

// ResidualSQL renders e_i = y − Σ_j β_j x_j as SQL over the given
// expressions (column names or aliases).
func ResidualSQL(outcome string, regressors []string, beta []float64) string {
	if len(regressors) != len(beta) {
		panic(fmt.Sprintf("causal: ResidualSQL: %d regressors, %d coefficients", len(regressors), len(beta)))
	}
	return "(" + outcome + ") - (" + linearSQL(regressors, beta) + ")"
}

func linearSQL(xs []string, w []float64) string {
	terms := make([]string, len(xs))
	for j, x := range xs {
		terms[j] = dag.FormatFloat(w[j]) + " * " + x
	}
	return sumSQL(terms)
}

// maxChain is the longest a + b + … chain sumSQL writes flat. ClickHouse
// parses a chain into a left-deep tree, and refuses trees deeper than
// max_ast_depth (1000 by default, "AST is too deep", code 167): the
// leverage of 40 regressors alone has 820 terms.
const maxChain = 32

// sumSQL renders the sum of terms: flat up to maxChain terms, beyond as a
// balanced tree of parenthesised halves (depth O(log n)).
func sumSQL(terms []string) string {
	if len(terms) <= maxChain {
		return strings.Join(terms, " + ")
	}
	h := len(terms) / 2
	return "(" + sumSQL(terms[:h]) + ") + (" + sumSQL(terms[h:]) + ")"
}

// LeverageSQL renders h_i = x_iᵀ (XᵀX)⁻¹ x_i as SQL over the given
// expressions: Σ_j A_jj x_j² + Σ_{j<k} 2 A_jk x_j x_k with A = xtxInv.
func LeverageSQL(regressors []string, xtxInv mat.Symmetric) string {
	p := len(regressors)
	if xtxInv.SymmetricDim() != p {
		panic(fmt.Sprintf("causal: LeverageSQL: %d regressors, %d×%d matrix", p, xtxInv.SymmetricDim(), xtxInv.SymmetricDim()))
	}
	terms := make([]string, 0, p*(p+1)/2)
	for j := 0; j < p; j++ {
		for k := j; k < p; k++ {
			a := xtxInv.At(j, k)
			if k != j {
				a *= 2
			}
			terms = append(terms, fmt.Sprintf("%s * %s * %s", dag.FormatFloat(a), regressors[j], regressors[k]))
		}
	}
	return sumSQL(terms)
}

// MeatColumns names the columns of the second-pass result, in order: n,
// h_max, then either the full meats m0_i_j and m3_i_j (i ≤ j) when coefs is
// nil, or v0_j and v3_j for each targeted coefficient j.
func (r Regression) MeatColumns(coefs []int) []string {
	p := len(r.Regressors)
	cols := []string{"n", "h_max"}
	if coefs == nil {
		for _, m := range []string{"m0", "m3"} {
			for i := 0; i < p; i++ {
				for j := i; j < p; j++ {
					cols = append(cols, fmt.Sprintf("%s_%d_%d", m, i, j))
				}
			}
		}
		return cols
	}
	for _, j := range coefs {
		cols = append(cols, fmt.Sprintf("v0_%d", j), fmt.Sprintf("v3_%d", j))
	}
	return cols
}

// MeatSQL renders the second pass for a fit of this regression: ONE SELECT
// returning the row described by MeatColumns(coefs).
//
// With coefs nil it aggregates the full meats
//
//	M0 = Σ e_i² x_i x_iᵀ,   M3 = Σ e_i²/(1−h_i)² x_i x_iᵀ,
//
// p(p+1) sums, enough for every covariance. With coefs set it aggregates,
// for each listed coefficient j, only the diagonal sandwich terms
//
//	v0_j = Σ e_i² (a_jᵀ x_i)²,   v3_j = Σ e_i²/(1−h_i)² (a_jᵀ x_i)²,
//
// with a_j the j-th row of (XᵀX)⁻¹, so that Var_HC0(β_j) = v0_j and
// Var_HC3(β_j) = v3_j: two sums per coefficient instead of p(p+1), which keeps
// the query short when only the treatment's standard error is needed. The
// leverage expression alone has p(p+1)/2 terms; with 60 regressors the text is
// about 100 KB, under ClickHouse's default max_query_size of 256 KiB.
func (r Regression) MeatSQL(f *stats.OLS, coefs []int) (string, error) {
	if err := r.Validate(); err != nil {
		return "", err
	}
	p := len(r.Regressors)
	if f == nil || len(f.Coef) != p || f.XtXInv == nil || f.XtXInv.SymmetricDim() != p {
		return "", fmt.Errorf("meat sql: fit does not match the %d regressors", p)
	}
	for _, v := range f.Coef {
		if !finite(v) {
			return "", fmt.Errorf("meat sql: non-finite coefficient %v", v)
		}
	}
	for _, j := range coefs {
		if j < 0 || j >= p {
			return "", fmt.Errorf("meat sql: coefficient index %d out of range [0,%d)", j, p)
		}
	}
	xs := make([]string, p)
	for j := range xs {
		xs[j] = xcol(j)
	}
	var b strings.Builder
	b.WriteString("SELECT\n    toFloat64(count()) AS n,\n    max(tc_h) AS h_max")
	if coefs == nil {
		for _, m := range []struct{ name, w string }{{"m0", "tc_w0"}, {"m3", "tc_w3"}} {
			for i := 0; i < p; i++ {
				for j := i; j < p; j++ {
					fmt.Fprintf(&b, ",\n    sum(%s * %s * %s) AS %s_%d_%d", m.w, xs[i], xs[j], m.name, i, j)
				}
			}
		}
	} else {
		for _, j := range coefs {
			fmt.Fprintf(&b, ",\n    sum(tc_w0 * tc_u%d * tc_u%d) AS v0_%d", j, j, j)
			fmt.Fprintf(&b, ",\n    sum(tc_w3 * tc_u%d * tc_u%d) AS v3_%d", j, j, j)
		}
	}
	b.WriteString("\nFROM\n(\n    SELECT\n        *,\n        tc_e * tc_e AS tc_w0,\n        tc_e * tc_e / ((1 - tc_h) * (1 - tc_h)) AS tc_w3")
	for _, j := range coefs {
		row := make([]float64, p)
		for k := range row {
			row[k] = f.XtXInv.At(j, k)
		}
		fmt.Fprintf(&b, ",\n        %s AS tc_u%d", linearSQL(xs, row), j)
	}
	b.WriteString("\n    FROM\n    (\n        SELECT\n            *,\n")
	fmt.Fprintf(&b, "            %s AS tc_e,\n", ResidualSQL("tc_y", xs, f.Coef))
	fmt.Fprintf(&b, "            %s AS tc_h\n", LeverageSQL(xs, f.XtXInv))
	b.WriteString("        FROM\n        (\n")
	b.WriteString(r.rowsSQL("            "))
	b.WriteString("\n        )\n    )\n)")
	return b.String(), nil
}

// ParseMeats turns the second-pass result row (values in the order of
// MeatColumns(coefs)) into Meats.
func (r Regression) ParseMeats(row []float64, coefs []int) (*stats.Meats, error) {
	cols := r.MeatColumns(coefs)
	if len(row) != len(cols) {
		return nil, fmt.Errorf("parse meats: %d values, want %d", len(row), len(cols))
	}
	for k, v := range row {
		if math.IsNaN(v) {
			return nil, fmt.Errorf("parse meats: column %s is NaN", cols[k])
		}
	}
	p := len(r.Regressors)
	m := &stats.Meats{N: row[0], MaxLeverage: row[1]}
	k := 2
	if coefs == nil {
		m.M0 = mat.NewSymDense(p, nil)
		m.M3 = mat.NewSymDense(p, nil)
		for _, dst := range []*mat.SymDense{m.M0, m.M3} {
			for i := 0; i < p; i++ {
				for j := i; j < p; j++ {
					dst.SetSym(i, j, row[k])
					k++
				}
			}
		}
		return m, nil
	}
	m.Coefs = append([]int(nil), coefs...)
	for range coefs {
		m.V0 = append(m.V0, row[k])
		m.V3 = append(m.V3, row[k+1])
		k += 2
	}
	return m, nil
}

// Hinges renders a linear-spline basis of a continuous adjuster for a
// regression: toFloat64(expr) and greatest(toFloat64(expr) − k, 0) for each
// knot k (e.g. baseline quantiles of the adjuster). The tail indicator of the
// linear-probability model is a steep, non-linear function of confounders
// such as prompt length; adjusting for the level alone leaves residual
// confounding that an exposure threshold on a correlated node (KV usage ≥ 0.9)
// picks up. The hinges remove most of it.
func Hinges(expr string, knots []float64) []string {
	out := []string{"toFloat64(" + expr + ")"}
	for _, k := range knots {
		out = append(out, "greatest(toFloat64("+expr+") - "+dag.FormatFloat(k)+", 0)")
	}
	return out
}

// finite reports whether v is neither NaN nor infinite.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
