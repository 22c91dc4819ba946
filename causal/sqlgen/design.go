package sqlgen

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/causal/stats"
)

// Design is several least-squares problems that share their rows and their
// regressors, one per outcome: the tail indicator and log latency of one
// candidate cause. Sharing X halves the passes over ClickHouse: XᵀX, the
// leverages h_i and the rows a_jᵀx_i of the sandwich are the same for every
// outcome; only Xᵀy, yᵀy and the residuals differ. With one outcome and no
// factors the numbers equal those of Regression (same row filter, same
// sums).
//
// The regressors are Regressors (SQL expressions) followed by one indicator
// column per level of each Factor: fixed effects of a placement (engine,
// GPU). Indicators cost no aggregate: the first pass groups by the factors
// and XᵀX is assembled in Go from per-group sums (an indicator's cross
// products are its groups' counts and sums), and the second pass looks the
// factor terms of residual and leverage up with transform(). The first
// pass aggregates c(c+3)/2 sums per group for c expression regressors
// instead of p(p+1)/2 for all p columns.
//
// Sums are extra row expressions summed over the same rows in the first
// pass (counts and exposures the estimators need, such as "window row" or
// "window row in the tail"), so that they describe exactly the rows the
// fits use.
type Design struct {
	Table      string   // table name (may carry FINAL), or a parenthesised subquery
	Where      string   // SQL boolean; empty means all rows
	Regressors []string // SQL expressions; "1" is the intercept
	Names      []string // optional regressor names
	Factors    []Factor // categorical regressors, after Regressors
	Outcomes   []string // SQL expressions of the outcomes, at least one
	Sums       []string // optional extra row expressions summed in the first pass
}

// Factor is a categorical regressor: one 0/1 column per level in Levels;
// rows at any other level (the reference) are 0 in all of them.
type Factor struct {
	Name   string   // column names are Name=level
	Expr   string   // SQL expression of the label (converted with toString)
	Levels []string // distinct
}

// Validate checks that the design is complete.
func (d Design) Validate() error {
	r := Regression{Table: d.Table, Regressors: d.Regressors, Names: d.Names, Outcome: "y"}
	var errs []error
	if err := r.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(d.Outcomes) == 0 {
		errs = append(errs, errors.New("no outcomes"))
	}
	for i, y := range d.Outcomes {
		if strings.TrimSpace(y) == "" {
			errs = append(errs, fmt.Errorf("outcome %d is empty", i))
		}
	}
	for i, s := range d.Sums {
		if strings.TrimSpace(s) == "" {
			errs = append(errs, fmt.Errorf("sum %d is empty", i))
		}
	}
	for i, f := range d.Factors {
		if strings.TrimSpace(f.Expr) == "" {
			errs = append(errs, fmt.Errorf("factor %d has no expression", i))
		}
		seen := map[string]bool{}
		for _, l := range f.Levels {
			if seen[l] {
				errs = append(errs, fmt.Errorf("factor %s: level %q twice", f.Name, l))
			}
			seen[l] = true
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid design: %w", err)
	}
	return nil
}

// P is the number of columns of X: the regressors and every factor level.
func (d Design) P() int {
	p := len(d.Regressors)
	for _, f := range d.Factors {
		p += len(f.Levels)
	}
	return p
}

// ColumnNames names the columns of X (regressor names, or their SQL when
// Names is nil, then Factor.Name=level).
func (d Design) ColumnNames() []string {
	out := make([]string, 0, d.P())
	for j, x := range d.Regressors {
		if d.Names != nil {
			out = append(out, d.Names[j])
		} else {
			out = append(out, x)
		}
	}
	for _, f := range d.Factors {
		for _, l := range f.Levels {
			out = append(out, f.Name+"="+l)
		}
	}
	return out
}

// Keep returns the design restricted to the columns keep (indices into
// ColumnNames, ascending): regressors and factor levels not listed are
// dropped (a dropped level joins the reference).
func (d Design) Keep(keep []int) Design {
	in := map[int]bool{}
	for _, k := range keep {
		in[k] = true
	}
	out := d
	out.Regressors, out.Names, out.Factors = nil, nil, nil
	for j := range d.Regressors {
		if in[j] {
			out.Regressors = append(out.Regressors, d.Regressors[j])
			if d.Names != nil {
				out.Names = append(out.Names, d.Names[j])
			}
		}
	}
	at := len(d.Regressors)
	for _, f := range d.Factors {
		g := Factor{Name: f.Name, Expr: f.Expr}
		for _, l := range f.Levels {
			if in[at] {
				g.Levels = append(g.Levels, l)
			}
			at++
		}
		out.Factors = append(out.Factors, g)
	}
	return out
}

// Regression returns the single-outcome regression of outcome k, factors
// written as indicator columns.
func (d Design) Regression(k int) Regression {
	r := Regression{Table: d.Table, Where: d.Where, Regressors: append([]string(nil), d.Regressors...), Outcome: d.Outcomes[k]}
	for _, f := range d.Factors {
		for _, l := range f.Levels {
			r.Regressors = append(r.Regressors, "toFloat64(toString("+f.Expr+") = "+dag.QuoteString(l)+")")
		}
	}
	if d.Names != nil || len(d.Factors) > 0 {
		r.Names = d.ColumnNames()
	}
	return r
}

func ycol(k int) string { return "tc_y" + strconv.Itoa(k) }
func scol(k int) string { return "tc_s" + strconv.Itoa(k) }
func fcol(k int) string { return "tc_f" + strconv.Itoa(k) }

// rowsSQL is the innermost query: the regressors, outcomes and sums as
// Float64 columns and the factor labels as strings, of the selected rows
// whose numbers are all finite.
func (d Design) rowsSQL(indent string) string {
	var b strings.Builder
	b.WriteString(indent + "SELECT *\n" + indent + "FROM\n" + indent + "(\n" + indent + "    SELECT\n")
	var cols, fin []string
	for j, x := range d.Regressors {
		cols = append(cols, fmt.Sprintf("toFloat64(%s) AS %s", x, xcol(j)))
		fin = append(fin, xcol(j))
	}
	for k, y := range d.Outcomes {
		cols = append(cols, fmt.Sprintf("toFloat64(%s) AS %s", y, ycol(k)))
		fin = append(fin, ycol(k))
	}
	for k, s := range d.Sums {
		cols = append(cols, fmt.Sprintf("toFloat64(%s) AS %s", s, scol(k)))
		fin = append(fin, scol(k))
	}
	for k, f := range d.Factors {
		cols = append(cols, fmt.Sprintf("toString(%s) AS %s", f.Expr, fcol(k)))
	}
	b.WriteString(indent + "        " + strings.Join(cols, ",\n"+indent+"        ") + "\n")
	fmt.Fprintf(&b, "%s    FROM %s\n", indent, d.Table)
	if strings.TrimSpace(d.Where) != "" {
		fmt.Fprintf(&b, "%s    WHERE %s\n", indent, d.Where)
	}
	b.WriteString(indent + ")\n" + indent + "WHERE isFinite(" + strings.Join(fin, " + ") + ")")
	return b.String()
}

// SuffStatsColumns names the Float64 columns of each first-pass row (after
// the factor labels, one String per factor): n; xx_i_j (i ≤ j) and x_i over
// the expression regressors; for each outcome k xy_k_i, y_k and yy_k; s_m
// for each sum.
func (d Design) SuffStatsColumns() []string {
	c := len(d.Regressors)
	cols := []string{"n"}
	for i := 0; i < c; i++ {
		for j := i; j < c; j++ {
			cols = append(cols, fmt.Sprintf("xx_%d_%d", i, j))
		}
	}
	for i := 0; i < c; i++ {
		cols = append(cols, fmt.Sprintf("x_%d", i))
	}
	for k := range d.Outcomes {
		for i := 0; i < c; i++ {
			cols = append(cols, fmt.Sprintf("xy_%d_%d", k, i))
		}
		cols = append(cols, fmt.Sprintf("y_%d", k), fmt.Sprintf("yy_%d", k))
	}
	for m := range d.Sums {
		cols = append(cols, fmt.Sprintf("s_%d", m))
	}
	return cols
}

// SuffStatsSQL renders the first pass: one SELECT returning, per
// combination of factor labels (one row when there are no factors), the
// labels then the columns of SuffStatsColumns.
func (d Design) SuffStatsSQL() (string, error) {
	if err := d.Validate(); err != nil {
		return "", err
	}
	c := len(d.Regressors)
	var b strings.Builder
	b.WriteString("SELECT\n    ")
	for k := range d.Factors {
		b.WriteString(fcol(k) + ",\n    ")
	}
	b.WriteString("toFloat64(count()) AS n")
	for i := 0; i < c; i++ {
		for j := i; j < c; j++ {
			fmt.Fprintf(&b, ",\n    sum(%s * %s) AS xx_%d_%d", xcol(i), xcol(j), i, j)
		}
	}
	for i := 0; i < c; i++ {
		fmt.Fprintf(&b, ",\n    sum(%s) AS x_%d", xcol(i), i)
	}
	for k := range d.Outcomes {
		for i := 0; i < c; i++ {
			fmt.Fprintf(&b, ",\n    sum(%s * %s) AS xy_%d_%d", xcol(i), ycol(k), k, i)
		}
		fmt.Fprintf(&b, ",\n    sum(%s) AS y_%d", ycol(k), k)
		fmt.Fprintf(&b, ",\n    sum(%s * %s) AS yy_%d", ycol(k), ycol(k), k)
	}
	for m := range d.Sums {
		fmt.Fprintf(&b, ",\n    sum(%s) AS s_%d", scol(m), m)
	}
	b.WriteString("\nFROM\n(\n")
	b.WriteString(d.rowsSQL("    "))
	b.WriteString("\n)")
	if len(d.Factors) > 0 {
		var g []string
		for k := range d.Factors {
			g = append(g, fcol(k))
		}
		b.WriteString("\nGROUP BY " + strings.Join(g, ", "))
	}
	return b.String(), nil
}

// GroupRow is one row of the first pass: the factor labels and the values
// of SuffStatsColumns.
type GroupRow struct {
	Labels []string
	Values []float64
}

// ParseSuffStats turns the first-pass row of a design without factors into
// one SuffStats per outcome and the extra sums.
func (d Design) ParseSuffStats(row []float64) ([]*stats.SuffStats, []float64, error) {
	return d.AssembleSuffStats([]GroupRow{{Values: row}})
}

// AssembleSuffStats adds up the first-pass rows into one SuffStats per
// outcome (over all P columns, factor levels included) and the extra sums.
func (d Design) AssembleSuffStats(rows []GroupRow) ([]*stats.SuffStats, []float64, error) {
	cols := d.SuffStatsColumns()
	c, p := len(d.Regressors), d.P()
	names := d.ColumnNames()
	if d.Names == nil && len(d.Factors) == 0 {
		names = nil
	}
	out := make([]*stats.SuffStats, len(d.Outcomes))
	for k := range out {
		out[k] = stats.NewSuffStats(p, names)
	}
	sums := make([]float64, len(d.Sums))
	level := make([]map[string]int, len(d.Factors)) // label → column
	at := c
	for f, fa := range d.Factors {
		level[f] = map[string]int{}
		for _, l := range fa.Levels {
			level[f][l] = at
			at++
		}
	}
	add := func(i, j int, v float64) {
		if i > j {
			i, j = j, i
		}
		for _, s := range out {
			s.XtX.SetSym(i, j, s.XtX.At(i, j)+v)
		}
	}
	for _, g := range rows {
		if len(g.Values) != len(cols) || len(g.Labels) != len(d.Factors) {
			return nil, nil, fmt.Errorf("parse design statistics: %d labels and %d values, want %d and %d", len(g.Labels), len(g.Values), len(d.Factors), len(cols))
		}
		for k, v := range g.Values {
			if !finite(v) {
				return nil, nil, fmt.Errorf("parse design statistics: column %s is %v", cols[k], v)
			}
		}
		v := g.Values
		n := v[0]
		at := 1
		for i := 0; i < c; i++ {
			for j := i; j < c; j++ {
				add(i, j, v[at])
				at++
			}
		}
		xs := v[at : at+c]
		at += c
		var ind []int // this group's indicator columns
		for f, l := range g.Labels {
			if col, ok := level[f][l]; ok {
				ind = append(ind, col)
			}
		}
		for a, i := range ind {
			for j := 0; j < c; j++ {
				add(j, i, xs[j])
			}
			for _, i2 := range ind[a:] {
				add(i, i2, n)
			}
		}
		for _, s := range out {
			s.N += n
			for i := 0; i < c; i++ {
				s.XtY.SetVec(i, s.XtY.AtVec(i)+v[at+i])
			}
			ysum := v[at+c]
			for _, i := range ind {
				s.XtY.SetVec(i, s.XtY.AtVec(i)+ysum)
			}
			s.YtY += v[at+c+1]
			at += c + 2
		}
		for m := range sums {
			sums[m] += v[at+m]
		}
	}
	return out, sums, nil
}

// MeatColumns names the second-pass columns: n, h_max, then v0_k and v3_k
// for each outcome k (the HC0 and HC3 variances of coefficient coef).
func (d Design) MeatColumns() []string {
	cols := []string{"n", "h_max"}
	for k := range d.Outcomes {
		cols = append(cols, fmt.Sprintf("v0_%d", k), fmt.Sprintf("v3_%d", k))
	}
	return cols
}

// floatArray renders a constant Array(Float64) literal (exponent form, so
// that ClickHouse never reads an integer type).
func floatArray(vs []float64) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		if !finite(v) {
			panic(fmt.Sprintf("causal: non-finite SQL literal %v", v))
		}
		parts[i] = strconv.FormatFloat(v, 'e', -1, 64)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// lookup renders Σ over factors of "the value of this row's level": a
// transform() of the label per factor, 0 for the reference.
func (d Design) lookup(val func(col int) float64) []string {
	var terms []string
	at := len(d.Regressors)
	for f, fa := range d.Factors {
		if len(fa.Levels) == 0 {
			continue
		}
		labels := make([]string, len(fa.Levels))
		vals := make([]float64, len(fa.Levels))
		nonzero := false
		for i, l := range fa.Levels {
			labels[i] = dag.QuoteString(l)
			vals[i] = val(at + i)
			nonzero = nonzero || vals[i] != 0
		}
		at += len(fa.Levels)
		if nonzero {
			terms = append(terms, fmt.Sprintf("transform(%s, [%s], %s, toFloat64(0))", fcol(f), strings.Join(labels, ", "), floatArray(vals)))
		}
	}
	return terms
}

// MeatSQL renders the second pass for fits (one per outcome, all of the
// same columns, hence the same (XᵀX)⁻¹): ONE SELECT returning, for
// coefficient coef of each outcome's fit, the targeted sandwich sums
// v0 = Σ e_i² (a·x_i)² and v3 = Σ e_i²/(1−h_i)² (a·x_i)², a = row coef of
// (XᵀX)⁻¹ (see Regression.MeatSQL). The leverage and a·x_i are computed
// once for all outcomes.
func (d Design) MeatSQL(fits []*stats.OLS, coef int) (string, error) {
	if err := d.Validate(); err != nil {
		return "", err
	}
	c, p := len(d.Regressors), d.P()
	if len(fits) != len(d.Outcomes) {
		return "", fmt.Errorf("design meat sql: %d fits for %d outcomes", len(fits), len(d.Outcomes))
	}
	if coef < 0 || coef >= p {
		return "", fmt.Errorf("design meat sql: coefficient %d out of range [0,%d)", coef, p)
	}
	for k, f := range fits {
		if f == nil || len(f.Coef) != p || f.XtXInv == nil || f.XtXInv.SymmetricDim() != p {
			return "", fmt.Errorf("design meat sql: fit %d does not match the %d columns", k, p)
		}
		for _, v := range f.Coef {
			if !finite(v) {
				return "", fmt.Errorf("design meat sql: fit %d: non-finite coefficient %v", k, v)
			}
		}
	}
	xs := make([]string, c)
	for j := range xs {
		xs[j] = xcol(j)
	}
	inv := fits[0].XtXInv
	var b strings.Builder
	b.WriteString("SELECT\n    toFloat64(count()) AS n,\n    max(tc_h) AS h_max")
	for k := range d.Outcomes {
		fmt.Fprintf(&b, ",\n    sum(tc_e%d * tc_e%d * tc_u * tc_u) AS v0_%d", k, k, k)
		fmt.Fprintf(&b, ",\n    sum(tc_e%d * tc_e%d * tc_u * tc_u / ((1 - tc_h) * (1 - tc_h))) AS v3_%d", k, k, k)
	}
	b.WriteString("\nFROM\n(\n    SELECT\n        *")
	for k, f := range fits {
		fit := append(linearTerms(xs, f.Coef[:c]), d.lookup(func(col int) float64 { return f.Coef[col] })...)
		fmt.Fprintf(&b, ",\n        (%s) - (%s) AS tc_e%d", ycol(k), sumSQL(orZero(fit)), k)
	}
	row := make([]float64, c)
	for j := range row {
		row[j] = inv.At(coef, j)
	}
	u := append(linearTerms(xs, row), d.lookup(func(col int) float64 { return inv.At(coef, col) })...)
	fmt.Fprintf(&b, ",\n        %s AS tc_u", sumSQL(orZero(u)))
	fmt.Fprintf(&b, ",\n        %s AS tc_h", sumSQL(orZero(d.leverageTerms(inv))))
	b.WriteString("\n    FROM\n    (\n")
	b.WriteString(d.rowsSQL("        "))
	b.WriteString("\n    )\n)")
	return b.String(), nil
}

func linearTerms(xs []string, w []float64) []string {
	out := make([]string, len(xs))
	for j, x := range xs {
		out[j] = dag.FormatFloat(w[j]) + " * " + x
	}
	return out
}

func orZero(terms []string) []string {
	if len(terms) == 0 {
		return []string{"0"}
	}
	return terms
}

// leverageTerms are the terms of h = xᵀAx: expression × expression terms
// written out, every term with a factor level looked up per row.
func (d Design) leverageTerms(a interface{ At(i, j int) float64 }) []string {
	c := len(d.Regressors)
	var terms []string
	for j := 0; j < c; j++ {
		for k := j; k < c; k++ {
			v := a.At(j, k)
			if k != j {
				v *= 2
			}
			terms = append(terms, fmt.Sprintf("%s * %s * %s", dag.FormatFloat(v), xcol(j), xcol(k)))
		}
	}
	// Expression × level: 2·A[j, level] x_j.
	for j := 0; j < c; j++ {
		for _, t := range d.lookup(func(col int) float64 { return 2 * a.At(j, col) }) {
			terms = append(terms, t+" * "+xcol(j))
		}
	}
	// Level × level of the same factor: A[level, level]; of two factors:
	// 2·A[level_f, level_g], looked up on the pair of labels.
	terms = append(terms, d.lookup(func(col int) float64 { return a.At(col, col) })...)
	start := make([]int, len(d.Factors))
	at := c
	for f, fa := range d.Factors {
		start[f] = at
		at += len(fa.Levels)
	}
	for f := range d.Factors {
		for g := f + 1; g < len(d.Factors); g++ {
			var keys []string
			var vals []float64
			for i, lf := range d.Factors[f].Levels {
				for j, lg := range d.Factors[g].Levels {
					if v := 2 * a.At(start[f]+i, start[g]+j); v != 0 {
						keys = append(keys, dag.QuoteString(lf+"\t"+lg))
						vals = append(vals, v)
					}
				}
			}
			if len(keys) > 0 {
				terms = append(terms, fmt.Sprintf("transform(concat(%s, '\\t', %s), [%s], %s, toFloat64(0))", fcol(f), fcol(g), strings.Join(keys, ", "), floatArray(vals)))
			}
		}
	}
	return terms
}

// ParseMeats turns the second-pass row into one targeted Meats per outcome.
func (d Design) ParseMeats(row []float64, coef int) ([]*stats.Meats, error) {
	cols := d.MeatColumns()
	if len(row) != len(cols) {
		return nil, fmt.Errorf("parse design meats: %d values, want %d", len(row), len(cols))
	}
	for k, v := range row {
		if !finite(v) {
			return nil, fmt.Errorf("parse design meats: column %s is %v", cols[k], v)
		}
	}
	out := make([]*stats.Meats, len(d.Outcomes))
	for k := range out {
		out[k] = &stats.Meats{N: row[0], MaxLeverage: row[1], Coefs: []int{coef}, V0: []float64{row[2+2*k]}, V3: []float64{row[3+2*k]}}
	}
	return out, nil
}
