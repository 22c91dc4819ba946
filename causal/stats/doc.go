// Package stats is the statistics of tailcause's causal stage, pure Go with
// no I/O: functions take small aggregated inputs (sufficient statistics,
// meats, samples of the slowest rows, counts) and return small answers.
//
//   - Least squares from sufficient statistics (XᵀX, Xᵀy, yᵀy) with
//     classical and HC0/HC1/HC3 robust standard errors, collinearity drops,
//     and a QR reference on the rows (ols.go). Package causal writes the
//     ClickHouse SQL of the two passes that feed it.
//   - Per-cause estimators (estimate.go): HC3 treatment effects of the
//     linear-probability model of the tail indicator and of the log-latency
//     model, effect in milliseconds, attributable fraction, counterfactual
//     quantile under do(cause = normal).
//   - Bayesian health per entity: an empirical-Bayes Beta-Binomial over
//     peers (health.go).
//   - Breach detection (breach.go): quantiles with distribution-free
//     order-statistic confidence intervals (QuantileIntervalTop needs only
//     the slowest rows), the breach verdict, and change points of a series
//     to find where a breach began or ended.
//
// Manners follow gonum/stat: a nil options pointer means defaults, panics
// are reserved for programmer errors, tests use seeded randomness.
// Reference values in testdata/ come from independent computations
// (numpy/statsmodels/scipy); the scripts and the versions used sit next to
// them. statstest holds the helpers the tests of stats and causal share.
package stats
