package stats

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"gonum.org/v1/gonum/mat"
)

// SuffStats are the sufficient statistics of a least-squares fit of y on the
// p regressors x (the caller includes the intercept column of ones when it
// wants one): the row count and the cross products XᵀX, Xᵀy and yᵀy.
type SuffStats struct {
	Names []string      // regressor names, len p; optional (nil)
	N     float64       // number of rows
	XtX   *mat.SymDense // p×p
	XtY   *mat.VecDense // p
	YtY   float64
}

// NewSuffStats returns empty statistics for p regressors.
func NewSuffStats(p int, names []string) *SuffStats {
	if p < 1 || (names != nil && len(names) != p) {
		panic(fmt.Sprintf("causal: NewSuffStats(%d) with %d names", p, len(names)))
	}
	return &SuffStats{Names: append([]string(nil), names...), XtX: mat.NewSymDense(p, nil), XtY: mat.NewVecDense(p, nil)}
}

// P is the number of regressors.
func (s *SuffStats) P() int { return s.XtY.Len() }

// Add accumulates one row. x is read, not kept.
func (s *SuffStats) Add(x []float64, y float64) {
	p := s.P()
	if len(x) != p {
		panic(fmt.Sprintf("causal: SuffStats.Add: row has %d values, want %d", len(x), p))
	}
	s.N++
	for i := 0; i < p; i++ {
		for j := i; j < p; j++ {
			s.XtX.SetSym(i, j, s.XtX.At(i, j)+x[i]*x[j])
		}
		s.XtY.SetVec(i, s.XtY.AtVec(i)+x[i]*y)
	}
	s.YtY += y * y
}

// ErrCollinear marks an XᵀX that is singular (or numerically so): some
// regressor is a linear combination of others, or constant alongside the
// intercept.
var ErrCollinear = errors.New("collinear regressors")

// CollinearError lists the regressors that are (numerically) linear
// combinations of the regressors before them. It wraps ErrCollinear.
type CollinearError struct {
	Columns []int
	Names   []string // when the statistics carry names
}

func (e *CollinearError) Error() string {
	what := fmt.Sprint(e.Columns)
	if len(e.Names) > 0 {
		what = strings.Join(e.Names, ", ")
	}
	return fmt.Sprintf("%v: %s (drop them, or fit with OLSOptions.PseudoInverse)", ErrCollinear, what)
}

func (e *CollinearError) Unwrap() error { return ErrCollinear }

// OLSOptions tunes FitOLS. A nil *OLSOptions means defaults.
type OLSOptions struct {
	// PseudoInverse, when XᵀX is singular, solves with the Moore–Penrose
	// pseudo-inverse (minimum-norm β; OLS.PseudoInverse is set and
	// OLS.Collinear lists the offending columns) instead of returning a
	// *CollinearError. Coefficients of collinear columns are then not
	// individually identified: do not report them.
	PseudoInverse bool
	// Tol is the collinearity tolerance: column j is collinear when the
	// share of its (scaled) sum of squares not explained by the earlier
	// columns, 1−R²_j, is below Tol. Zero means 1e-10.
	Tol float64
}

// OLS is a least-squares fit from sufficient statistics.
type OLS struct {
	Names         []string
	N             float64
	Coef          []float64     // β, len p
	XtXInv        *mat.SymDense // (XᵀX)⁻¹, or its pseudo-inverse
	RSS           float64       // residual sum of squares
	Rank          int           // rank of X used for degrees of freedom
	DFResid       float64       // N − Rank
	Sigma2        float64       // RSS / DFResid
	PseudoInverse bool          // solved with the pseudo-inverse
	Collinear     []int         // collinear columns when PseudoInverse
}

// FitOLS solves the normal equations XᵀX β = Xᵀy.
//
// For stability the system is first scaled to unit diagonal (Jacobi
// equilibration, which removes the effect of column units such as bytes/s
// next to ratios), then factorized by Cholesky. Collinearity is detected by
// an unpivoted Cholesky pass on the scaled matrix, in column order, so the
// reported columns are the later member of each dependent group. Errors:
// a *CollinearError (wraps ErrCollinear), or a plain error when N ≤ p or the
// statistics are inconsistent (non-finite, negative diagonal).
func FitOLS(s *SuffStats, opts *OLSOptions) (*OLS, error) {
	tol := 1e-10
	pinv := false
	if opts != nil {
		if opts.Tol > 0 {
			tol = opts.Tol
		}
		pinv = opts.PseudoInverse
	}
	if s == nil || s.XtX == nil || s.XtY == nil {
		return nil, errors.New("fit ols: nil statistics")
	}
	p := s.P()
	if r := s.XtX.SymmetricDim(); r != p {
		return nil, fmt.Errorf("fit ols: XᵀX is %d×%d but Xᵀy has %d entries", r, r, p)
	}
	if !(s.N > float64(p)) {
		return nil, fmt.Errorf("fit ols: %v rows for %d regressors: need more rows than regressors", s.N, p)
	}
	if !finite(s.N) || !finite(s.YtY) || s.YtY < 0 {
		return nil, fmt.Errorf("fit ols: inconsistent statistics: n=%v yᵀy=%v", s.N, s.YtY)
	}
	// Scale: A = D⁻¹ XᵀX D⁻¹, b = D⁻¹ Xᵀy with D = diag(sqrt(XᵀX_jj)).
	d := make([]float64, p)
	var collinear []int
	for j := 0; j < p; j++ {
		v := s.XtX.At(j, j)
		if !finite(v) || v < 0 {
			return nil, fmt.Errorf("fit ols: inconsistent statistics: XᵀX[%d,%d]=%v", j, j, v)
		}
		d[j] = math.Sqrt(v)
	}
	a := mat.NewSymDense(p, nil)
	b := mat.NewVecDense(p, nil)
	for i := 0; i < p; i++ {
		if d[i] == 0 {
			continue
		}
		for j := i; j < p; j++ {
			if d[j] == 0 {
				continue
			}
			v := s.XtX.At(i, j)
			if !finite(v) {
				return nil, fmt.Errorf("fit ols: inconsistent statistics: XᵀX[%d,%d]=%v", i, j, v)
			}
			a.SetSym(i, j, v/(d[i]*d[j]))
		}
		xy := s.XtY.AtVec(i)
		if !finite(xy) {
			return nil, fmt.Errorf("fit ols: inconsistent statistics: Xᵀy[%d]=%v", i, xy)
		}
		b.SetVec(i, xy/d[i])
	}
	collinear = collinearColumns(a, d, tol)

	inv := mat.NewSymDense(p, nil) // inverse (or pseudo-inverse) of A
	rank := p
	if len(collinear) == 0 {
		var ch mat.Cholesky
		if !ch.Factorize(a) {
			// The pivot test passed but gonum's factorization did not: treat
			// as collinear with no column singled out.
			collinear = []int{}
		} else if err := ch.InverseTo(inv); err != nil {
			return nil, fmt.Errorf("fit ols: invert XᵀX: %w", err)
		}
	}
	if collinear != nil {
		if !pinv {
			ce := &CollinearError{Columns: collinear}
			if s.Names != nil {
				for _, c := range collinear {
					ce.Names = append(ce.Names, s.Names[c])
				}
			}
			return nil, ce
		}
		var eig mat.EigenSym
		if !eig.Factorize(a, true) {
			return nil, errors.New("fit ols: eigen-decomposition of XᵀX did not converge")
		}
		vals := eig.Values(nil)
		var vecs mat.Dense
		eig.VectorsTo(&vecs)
		maxv := 0.0
		for _, v := range vals {
			maxv = math.Max(maxv, v)
		}
		rank = 0
		for k, v := range vals {
			if v <= tol*maxv*float64(p) || v <= 0 {
				continue
			}
			rank++
			for i := 0; i < p; i++ {
				for j := i; j < p; j++ {
					inv.SetSym(i, j, inv.At(i, j)+vecs.At(i, k)*vecs.At(j, k)/v)
				}
			}
		}
	}
	// Unscale: (XᵀX)⁻¹ = D⁻¹ A⁻¹ D⁻¹ and β = (XᵀX)⁻¹ Xᵀy.
	xtxInv := mat.NewSymDense(p, nil)
	for i := 0; i < p; i++ {
		for j := i; j < p; j++ {
			if d[i] != 0 && d[j] != 0 {
				xtxInv.SetSym(i, j, inv.At(i, j)/(d[i]*d[j]))
			}
		}
	}
	var bs mat.VecDense
	bs.MulVec(inv, b)
	coef := make([]float64, p)
	for j := range coef {
		if d[j] != 0 {
			coef[j] = bs.AtVec(j) / d[j]
		}
	}
	// RSS = yᵀy − 2βᵀXᵀy + βᵀXᵀXβ: valid for the pseudo-inverse solution
	// too. Clipped at 0 against cancellation when the fit is near perfect.
	beta := mat.NewVecDense(p, coef)
	var xb mat.VecDense
	xb.MulVec(s.XtX, beta)
	rss := s.YtY - 2*mat.Dot(beta, s.XtY) + mat.Dot(beta, &xb)
	if rss < 0 {
		rss = 0
	}
	f := &OLS{
		Names:         append([]string(nil), s.Names...),
		N:             s.N,
		Coef:          coef,
		XtXInv:        xtxInv,
		RSS:           rss,
		Rank:          rank,
		DFResid:       s.N - float64(rank),
		PseudoInverse: collinear != nil,
	}
	if f.PseudoInverse {
		f.Collinear = collinear
	}
	f.Sigma2 = rss / f.DFResid
	return f, nil
}

// collinearColumns runs an unpivoted Cholesky on the unit-diagonal matrix a
// and returns the columns whose pivot (1 − R² on the earlier kept columns)
// falls below tol; zero columns (d_j = 0) are collinear too. It returns nil
// when there are none.
func collinearColumns(a *mat.SymDense, d []float64, tol float64) []int {
	p := len(d)
	l := make([][]float64, p) // rows of L over kept columns
	var kept []int
	var out []int
	for j := 0; j < p; j++ {
		if d[j] == 0 {
			out = append(out, j)
			continue
		}
		row := make([]float64, len(kept))
		for k, c := range kept {
			v := a.At(j, c)
			for m := 0; m < k; m++ {
				v -= row[m] * l[c][m]
			}
			row[k] = v / l[c][k]
		}
		piv := a.At(j, j)
		for _, v := range row {
			piv -= v * v
		}
		if piv < tol {
			out = append(out, j)
			continue
		}
		l[j] = append(row, math.Sqrt(piv))
		kept = append(kept, j)
	}
	return out
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// CovType selects a coefficient covariance estimator.
type CovType int

// Covariance estimators. HC0–HC3 are heteroskedasticity-consistent
// (White 1980; MacKinnon and White 1985): the sandwich (XᵀX)⁻¹ M (XᵀX)⁻¹.
const (
	Classical CovType = iota // σ² (XᵀX)⁻¹, σ² = RSS/(n−k)
	HC0                      // meat M0 = Σ e_i² x_i x_iᵀ
	HC1                      // HC0 · n/(n−k)
	HC3                      // meat M3 = Σ e_i²/(1−h_i)² x_i x_iᵀ
)

func (c CovType) String() string {
	switch c {
	case Classical:
		return "classical"
	case HC0:
		return "HC0"
	case HC1:
		return "HC1"
	case HC3:
		return "HC3"
	}
	return fmt.Sprintf("CovType(%d)", int(c))
}

// Cov returns the coefficient covariance matrix. Classical ignores meat
// (pass nil); HC0 and HC1 take M0, HC3 takes M3 (see Meats and MeatSQL for
// how they are computed).
func (f *OLS) Cov(kind CovType, meat mat.Symmetric) (*mat.SymDense, error) {
	p := len(f.Coef)
	out := mat.NewSymDense(p, nil)
	if kind == Classical {
		out.ScaleSym(f.Sigma2, f.XtXInv)
		return out, nil
	}
	if kind != HC0 && kind != HC1 && kind != HC3 {
		return nil, fmt.Errorf("covariance: unknown estimator %v", kind)
	}
	if meat == nil || meat.SymmetricDim() != p {
		return nil, fmt.Errorf("covariance %v: meat must be %d×%d", kind, p, p)
	}
	var t mat.Dense
	t.Mul(f.XtXInv, meat)
	var s mat.Dense
	s.Mul(&t, f.XtXInv)
	scale := 1.0
	if kind == HC1 {
		scale = f.N / f.DFResid
	}
	for i := 0; i < p; i++ {
		for j := i; j < p; j++ {
			// Symmetrize against rounding.
			out.SetSym(i, j, scale*(s.At(i, j)+s.At(j, i))/2)
		}
	}
	return out, nil
}

// SE returns the coefficient standard errors (square roots of the diagonal
// of Cov).
func (f *OLS) SE(kind CovType, meat mat.Symmetric) ([]float64, error) {
	c, err := f.Cov(kind, meat)
	if err != nil {
		return nil, err
	}
	se := make([]float64, len(f.Coef))
	for i := range se {
		se[i] = math.Sqrt(math.Max(c.At(i, i), 0))
	}
	return se, nil
}

// Meats are the residual-weighted sums of the second pass: either the full
// matrices M0 and M3, or (Regression.MeatSQL with coefs) only the sandwich
// diagonal V0, V3 for the coefficients listed in Coefs.
type Meats struct {
	N           float64
	M0          *mat.SymDense // Σ e_i² x_i x_iᵀ
	M3          *mat.SymDense // Σ e_i²/(1−h_i)² x_i x_iᵀ
	Coefs       []int         // coefficients of V0 and V3
	V0, V3      []float64     // a_jᵀ M0 a_j and a_jᵀ M3 a_j, a_j = row j of (XᵀX)⁻¹
	MaxLeverage float64       // max h_i; near 1 makes HC3 unstable
}

// CoefSE returns the standard error of coefficient j under kind, from full
// or targeted meats (m may be nil for Classical).
func (f *OLS) CoefSE(kind CovType, m *Meats, j int) (float64, error) {
	if j < 0 || j >= len(f.Coef) {
		return 0, fmt.Errorf("coefficient se: index %d out of range [0,%d)", j, len(f.Coef))
	}
	if kind == Classical {
		return math.Sqrt(math.Max(f.Sigma2*f.XtXInv.At(j, j), 0)), nil
	}
	if m == nil {
		return 0, fmt.Errorf("coefficient se %v: no meats", kind)
	}
	if m.M0 != nil && m.M3 != nil {
		meat := m.M0
		if kind == HC3 {
			meat = m.M3
		}
		se, err := f.SE(kind, meat)
		if err != nil {
			return 0, err
		}
		return se[j], nil
	}
	for k, c := range m.Coefs {
		if c != j {
			continue
		}
		switch kind {
		case HC0:
			return math.Sqrt(math.Max(m.V0[k], 0)), nil
		case HC1:
			return math.Sqrt(math.Max(m.V0[k]*f.N/f.DFResid, 0)), nil
		case HC3:
			return math.Sqrt(math.Max(m.V3[k], 0)), nil
		}
		return 0, fmt.Errorf("coefficient se: unknown estimator %v", kind)
	}
	return 0, fmt.Errorf("coefficient se %v: meats do not cover coefficient %d", kind, j)
}

// MeatsFromRows computes the meats in memory from rows x (n×p) and y, for β
// and (XᵀX)⁻¹ of a fit: the in-memory twin of MeatSQL.
func MeatsFromRows(x mat.Matrix, y []float64, f *OLS) *Meats {
	n, p := x.Dims()
	if len(y) != n || p != len(f.Coef) {
		panic(fmt.Sprintf("causal: MeatsFromRows: x is %d×%d, y has %d, fit has %d coefficients", n, p, len(y), len(f.Coef)))
	}
	m := &Meats{N: float64(n), M0: mat.NewSymDense(p, nil), M3: mat.NewSymDense(p, nil)}
	xi := mat.NewVecDense(p, nil)
	ax := mat.NewVecDense(p, nil)
	for i := 0; i < n; i++ {
		e := y[i]
		for j := 0; j < p; j++ {
			xi.SetVec(j, x.At(i, j))
			e -= f.Coef[j] * x.At(i, j)
		}
		ax.MulVec(f.XtXInv, xi)
		h := mat.Dot(xi, ax)
		m.MaxLeverage = math.Max(m.MaxLeverage, h)
		w0 := e * e
		w3 := w0 / ((1 - h) * (1 - h))
		m.M0.SymRankOne(m.M0, w0, xi)
		m.M3.SymRankOne(m.M3, w3, xi)
	}
	return m
}

// OLSRows fits y on the columns of x by Householder QR on the rows, with no
// normal equations and no sufficient statistics, and computes the meats: the
// reference implementation the sufficient-statistics path is tested against.
// x must have full column rank.
func OLSRows(x *mat.Dense, y []float64) (*OLS, *Meats, error) {
	n, p := x.Dims()
	if len(y) != n {
		panic(fmt.Sprintf("causal: OLSRows: x has %d rows, y has %d", n, len(y)))
	}
	if n <= p {
		return nil, nil, fmt.Errorf("ols rows: %d rows for %d regressors", n, p)
	}
	var qr mat.QR
	qr.Factorize(x)
	var rd mat.Dense
	qr.RTo(&rd)
	r := mat.NewTriDense(p, mat.Upper, nil)
	for i := 0; i < p; i++ {
		for j := i; j < p; j++ {
			r.SetTri(i, j, rd.At(i, j))
		}
	}
	for j := 0; j < p; j++ {
		if math.Abs(r.At(j, j)) < 1e-12*math.Abs(r.At(0, 0)) {
			return nil, nil, &CollinearError{Columns: []int{j}}
		}
	}
	var beta mat.Dense
	if err := qr.SolveTo(&beta, false, mat.NewDense(n, 1, append([]float64(nil), y...))); err != nil {
		return nil, nil, fmt.Errorf("ols rows: solve: %w", err)
	}
	// (XᵀX)⁻¹ = R⁻¹ R⁻ᵀ.
	var rinv mat.TriDense
	if err := rinv.InverseTri(r); err != nil {
		return nil, nil, fmt.Errorf("ols rows: invert R: %w", err)
	}
	var full mat.Dense
	full.Mul(&rinv, rinv.T())
	inv := mat.NewSymDense(p, nil)
	for i := 0; i < p; i++ {
		for j := i; j < p; j++ {
			inv.SetSym(i, j, (full.At(i, j)+full.At(j, i))/2)
		}
	}
	f := &OLS{N: float64(n), Coef: make([]float64, p), XtXInv: inv, Rank: p, DFResid: float64(n - p)}
	for j := 0; j < p; j++ {
		f.Coef[j] = beta.At(j, 0)
	}
	for i := 0; i < n; i++ {
		e := y[i]
		for j := 0; j < p; j++ {
			e -= f.Coef[j] * x.At(i, j)
		}
		f.RSS += e * e
	}
	f.Sigma2 = f.RSS / f.DFResid
	return f, MeatsFromRows(x, y, f), nil
}
