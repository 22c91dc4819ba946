package causal

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tailcause/tailcause/causal/dag"
)

// The evaluation compares the backdoor-adjusted ranking with two simpler
// methods computed on the same rows: the same window, the same baseline and
// the same tail threshold as an Analysis. Neither adjusts for anything.
const (
	// MethodUnadjusted ranks causes by the unadjusted tail-rate difference
	// between exposed and unexposed window requests: P(tail | exposed) −
	// P(tail | not exposed). Exposure is the node's exposure rule when it has
	// one, else a level above the baseline's 90th percentile. For placement
	// (entity.degraded), the worst entity's tail rate minus the scope's.
	MethodUnadjusted = "unadjusted-tail-rate-diff"
	// MethodRobustZ is a BARO-style robust z-score of each cause's signal:
	// (90th percentile in the window − median in the baseline) / the
	// baseline's interquartile range. For placement, the worst entity's
	// z-score of the outcome itself.
	MethodRobustZ = "baro-robust-z"
)

// Ranked is one cause's score under a comparison method.
type Ranked struct {
	Cause Cause   `json:"cause"`
	Node  string  `json:"node"`
	Score float64 `json:"score"`
}

// CompareRankings computes both comparison rankings (highest score first)
// for an analysis that fired. Nodes whose score is undefined (no exposed
// rows, a constant signal) are left out.
func (a *Analyzer) CompareRankings(ctx context.Context, an *Analysis) (map[string][]Ranked, error) {
	in := an.Incident
	out, ok := a.dag.Outcome(in.SLO.Signal)
	if !ok {
		return nil, fmt.Errorf("compare rankings: no outcome node for signal %q", in.SLO.Signal)
	}
	keys := make([]string, 0, len(in.SLO.Scope))
	for k := range in.SLO.Scope {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	scope := []string{"isFinite(" + out.Covariate() + ")"}
	for _, k := range keys {
		scope = append(scope, k+" = "+dag.QuoteString(in.SLO.Scope[k]))
	}
	where := func(iv Interval) string {
		return strings.Join(scope, " AND ") + " AND " + prune(iv) + " AND " + inInterval(iv)
	}
	win, base := where(in.Window), where(in.Baseline)
	tail := fmt.Sprintf("toFloat64(%s > %s)", out.Covariate(), dag.FormatFloat(an.TailThresholdMS))
	tbl := a.table()
	res := map[string][]Ranked{}
	for _, n := range a.dag.Nodes() {
		if n.Cause == "" || n.Latent || n.Expr == "" {
			continue
		}
		var u, z float64
		var err error
		if n.Categorical {
			u, z, err = a.placementScores(ctx, tbl, n, out, tail, win, base)
		} else {
			u, z, err = a.levelScores(ctx, tbl, n, tail, win, base)
		}
		if err != nil {
			return nil, err
		}
		if !math.IsNaN(u) {
			res[MethodUnadjusted] = append(res[MethodUnadjusted], Ranked{Cause: n.Cause, Node: n.Name, Score: u})
		}
		if !math.IsNaN(z) {
			res[MethodRobustZ] = append(res[MethodRobustZ], Ranked{Cause: n.Cause, Node: n.Name, Score: z})
		}
	}
	for _, r := range res {
		sort.SliceStable(r, func(i, j int) bool { return r[i].Score > r[j].Score })
	}
	return res, nil
}

func (a *Analyzer) levelScores(ctx context.Context, tbl string, n dag.Node, tail, win, base string) (unadj, z float64, err error) {
	lvl := n.Covariate()
	b, err := queryFloats(ctx, a.db, "baseline level of "+n.Name, fmt.Sprintf(
		"SELECT toFloat64(quantile(0.25)(%[1]s)), toFloat64(quantile(0.5)(%[1]s)), toFloat64(quantile(0.75)(%[1]s)), toFloat64(quantile(0.9)(%[1]s)) FROM %[2]s WHERE %[3]s AND isFinite(%[1]s)",
		lvl, tbl, base), 4)
	if err != nil {
		return 0, 0, err
	}
	exposed := n.Exposed
	if exposed == "" {
		if !finite(b[3]) {
			// No baseline row has the level (no baseline, or the signal
			// was never measured there): nothing to compare with.
			return math.NaN(), math.NaN(), nil
		}
		exposed = fmt.Sprintf("%s > %s", lvl, dag.FormatFloat(b[3]))
	}
	w, err := queryFloats(ctx, a.db, "window level of "+n.Name, fmt.Sprintf(
		"SELECT toFloat64(avgIf(%[1]s, %[2]s)), toFloat64(avgIf(%[1]s, NOT (%[2]s))), toFloat64(countIf(%[2]s)), toFloat64(quantile(0.9)(%[3]s)) FROM %[4]s WHERE %[5]s AND isFinite(%[3]s)",
		tail, exposed, lvl, tbl, win), 4)
	if err != nil {
		return 0, 0, err
	}
	unadj, z = math.NaN(), math.NaN()
	if w[2] > 0 && !math.IsNaN(w[0]) && !math.IsNaN(w[1]) {
		unadj = w[0] - w[1]
	}
	iqr := b[2] - b[0]
	if iqr <= 0 {
		iqr = 1e-3 * math.Max(math.Abs(b[1]), 1e-3)
	}
	if !math.IsNaN(w[3]) && !math.IsNaN(b[1]) {
		z = (w[3] - b[1]) / iqr
	}
	return unadj, z, nil
}

func (a *Analyzer) placementScores(ctx context.Context, tbl string, n dag.Node, out dag.Node, tail, win, base string) (unadj, z float64, err error) {
	unadj, z = math.NaN(), math.NaN()
	overall, err := queryFloats(ctx, a.db, "window tail rate", fmt.Sprintf("SELECT toFloat64(avg(%s)) FROM %s WHERE %s", tail, tbl, win), 1)
	if err != nil {
		return 0, 0, err
	}
	min := a.cfg.MinEntityRows
	q := fmt.Sprintf(`SELECT w.e, w.rate, w.p90, b.med, b.iqr FROM
(SELECT toString(%[1]s) AS e, toFloat64(avg(%[2]s)) AS rate, toFloat64(quantile(0.9)(%[3]s)) AS p90, count() AS n FROM %[4]s WHERE %[5]s GROUP BY e HAVING n >= %[7]d) AS w
ANY LEFT JOIN
(SELECT toString(%[1]s) AS e, toFloat64(quantile(0.5)(%[3]s)) AS med, toFloat64(quantile(0.75)(%[3]s) - quantile(0.25)(%[3]s)) AS iqr, count() AS bn FROM %[4]s WHERE %[6]s GROUP BY e HAVING bn >= %[7]d) AS b
USING e`, n.Expr, tail, out.Covariate(), tbl, win, base, min)
	err = QueryRows(ctx, a.db, "per-entity scores of "+n.Name, q, func(rows Rows) error {
		var e string
		var rate, p90, med, iqr float64
		if err := rows.Scan(&e, &rate, &p90, &med, &iqr); err != nil {
			return err
		}
		if d := rate - overall[0]; math.IsNaN(unadj) || d > unadj {
			unadj = d
		}
		if iqr > 0 && med > 0 {
			if s := (p90 - med) / iqr; math.IsNaN(z) || s > z {
				z = s
			}
		}
		return nil
	})
	return unadj, z, err
}
