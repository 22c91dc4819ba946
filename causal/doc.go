// Package causal is the causal stage of tailcause: it says why the tail
// latency of an LLM inference fleet broke, and where.
//
// The mathematical core and the SQL generation are pure Go with no I/O,
// in packages of their own:
//
//   - causal/dag: the causal DAG — nodes with a role, the SQL expression
//     over the requests table that measures them, the taxonomy cause they
//     stand for (the taxonomy itself is schemas.Causes); the default DAG
//     ships in schemas/dag/default.json ("default@1") — d-separation, and
//     minimum-cost backdoor adjustment sets, refusing when latent
//     confounding leaves none;
//   - causal/stats: least squares from sufficient statistics with classical
//     and HC0/HC1/HC3 robust standard errors; the per-cause estimators
//     (linear-probability model of the tail indicator and log-latency model,
//     effect in milliseconds, attributable fraction, counterfactual P99
//     under do(cause = normal)); Bayesian health per entity, an
//     empirical-Bayes Beta-Binomial over peers; breach detection, P99 with
//     order-statistic confidence intervals and change points of a P99 series
//     to find where a breach began;
//   - causal/sqlgen: the ClickHouse SQL of the two aggregation passes that
//     feed the fits (Regression; Design for several outcomes sharing one
//     design, with placement fixed effects as factors): XᵀX, Xᵀy, yᵀy in
//     one SELECT, then the meat sums from residuals and leverages; text
//     only, no I/O.
//
// This package holds the ranked-culprits document, v1 (culprits.go).
//
// On top of it, talking to ClickHouse only through the small Querier and
// Inserter interfaces (querier.go):
//
//   - the Analyzer (analyze.go, run.go, attribute.go, fit.go): one
//     question "why was the tail bad in this window?" answered with a v1
//     Incident — baseline resolution, breach detection, the two passes per
//     candidate cause, localization to the engine or GPU that carries a
//     mechanism, health, evidence, exemplars, entity.degraded, ranking;
//   - what the scheduled mode asks of the requests table: the scopes seen,
//     and a scope's requests and newest end to size its window (scopes.go).
//
// Incident persistence and the scheduled mode's lifecycle (open, update on
// a new top culprit, resolve) are package causal/incident, which imports
// this one; this one does not import it.
//
// Heavy aggregation happens in ClickHouse; functions here take small
// aggregated inputs (sufficient statistics, meats, samples of the slowest
// rows) and return small answers. Every generated query runs on the
// supported servers, ClickHouse 24.8 and newer (the tests run 26.9); the
// fits' two passes (sqlgen.Regression) keep to plain nested subqueries,
// which causal/sqlgen/testdata/sql_check.py also runs on SQLite. Manners
// follow gonum/stat: a nil options pointer means defaults, panics are
// reserved for programmer errors, tests use seeded randomness. The decisions are written down in
// DESIGN.md beside this file.
//
// Reference values in testdata/ (and causal/stats/testdata) come from
// independent computations (numpy/statsmodels/scipy); the scripts and the
// versions used sit next to them.
package causal
