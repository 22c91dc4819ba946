// Package sqlgen writes the ClickHouse SQL of the fits' two aggregation
// passes and reads their answers back: Regression (one outcome, sql.go) and
// Design (several outcomes sharing one design, with placement fixed effects
// as factors, design.go) generate the first pass (XᵀX, Xᵀy, yᵀy in one
// SELECT) and, after stats.FitOLS, the second (the robust-covariance meats
// from residuals and leverages); Hinges writes the hinge regressors. It is
// text in, text out: no I/O (the analyzer in package causal sends the
// queries). The generated queries keep to plain nested subqueries, which
// testdata/sql_check.py also runs on SQLite.
package sqlgen
