// Package statstest holds the test helpers package stats and package causal
// share: the reference OLS data set and its numpy/statsmodels answers, and
// numeric comparisons.
package statstest
