// Package causaltest holds what the tests of package causal and its
// subpackages share: a structural model of an LLM-serving fleet written
// straight into the requests table (Scenario, Insert), the test ground
// truth for the analyzer and the scheduled mode, and the fleets several
// tests replay (Fleet). It imports nothing of causal, so causal's own
// tests can use it.
package causaltest
