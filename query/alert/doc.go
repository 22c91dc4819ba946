// Package alert pushes incidents to on-call: when an incident opens, changes
// its top culprit, or resolves, it POSTs the v1 ranked-culprits JSON to each
// configured webhook receiver, in a generic or a Slack-compatible format,
// signed with HMAC-SHA256.
//
// Delivery goes through a durable outbox in ClickHouse (tables alert_outbox
// and alert_attempts, migration 0003_alerts.sql): Enqueue writes the outbox
// rows before anything is sent; a Dispatcher scans for undelivered rows,
// delivers with exponential backoff and jitter, and appends one attempt row
// per try, so no alert is lost across restarts or receiver outages. The
// dispatchers of several replicas claim each attempt in alert_claims
// (claim.go) so that one of them makes it: an event is delivered once, and
// at least once when a replica dies between a POST and its record; the
// X-Tailcause-Delivery id (<incident_id>:<version>:<event>) lets a
// receiver drop such repeats. A Watcher derives the events from the
// incidents table the causal stage writes, newest first and paged.
//
// Everything the package asks of its database goes through Store
// (store.go), in the package's terms; ClickHouse is the real one, and the
// tests' in-memory store passes the same conformance suite.
package alert
