// Package alert pushes incidents to on-call: when an incident opens, changes
// its top culprit, or resolves, it POSTs the v1 ranked-culprits JSON to each
// configured webhook receiver, in a generic or a Slack-compatible format,
// signed with HMAC-SHA256.
//
// Delivery goes through a durable outbox in ClickHouse (tables alert_outbox
// and alert_attempts, migration 0003_alerts.sql): Enqueue writes the outbox
// rows before anything is sent; a Dispatcher scans for undelivered rows,
// delivers with exponential backoff and jitter, and appends one attempt row
// per try, so no alert is lost across restarts or receiver outages. Delivery
// is at least once; the X-Tailcause-Delivery id
// (<incident_id>:<version>:<event>) lets a receiver drop repeats. A Watcher
// derives the events from the incidents table the causal stage writes.
package alert
