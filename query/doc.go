// Package query is the read side of tailcause: `tailcause query`, an HTTP
// JSON API over the ClickHouse tables the other stages write (incidents and
// their ranked culprits, P99 breakdowns by scope, entity and minute, request
// drill-down with token stalls, exemplar traces) and an HTML incident report
// with gonum/plot SVG figures.
//
// It owns the API contract (schemas/openapi.json, served at /openapi.json),
// bearer-token authentication, RFC 9457 problem responses, and the bounds on
// every query (time-range spans, page sizes, result sizes, timeouts). It
// never imports another stage: incidents are read as the stored v1 JSON
// payload (schemas/culprits.v1.schema.json), decoded into this package's own
// types. Every read goes through one of four small stores declared in
// store.go — incidents, the P99 breakdowns, drill-down and exemplar lookups,
// the report's aggregations — each with an in-memory twin that passes the
// same conformance suite as its ClickHouse implementation. Alert webhooks
// live in the subpackage alert.
package query
