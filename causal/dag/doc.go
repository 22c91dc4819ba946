// Package dag is the causal DAG of tailcause's causal stage, pure Go with no
// I/O.
//
//   - The DAG (dag.go): nodes with a role, the SQL expression over the
//     requests table that measures them, the taxonomy cause
//     (schemas.Cause) they stand for; the default DAG ships in
//     schemas/dag/default.json ("default@1", Default). Node renders the SQL
//     of its level, treatment, indicator and Δ; QuoteString and FormatFloat
//     the literals in them.
//   - d-separation and minimum-cost backdoor adjustment sets, refusing
//     (ErrNoBackdoorSet) when latent confounding leaves none (backdoor.go).
//
// A DAG is immutable and safe for concurrent use; a nil options pointer
// means defaults, and panics are reserved for programmer errors.
package dag
