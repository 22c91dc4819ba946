package alert

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tailcause/tailcause/internal/chstore"
)

// Store is what the outbox needs of ClickHouse; *chstore.Store is one.
type Store interface {
	Conn() driver.Conn
	Insert(ctx context.Context, t chstore.Table, rows [][]any) error
}

// Attempt states (alert_attempts.state). A (delivery, receiver) without an
// attempt row is pending.
const (
	StateDelivered = "delivered"
	StateRetry     = "retry"
	StateFailed    = "failed"
)

var (
	outboxTable = chstore.Table{Name: "alert_outbox", Columns: []string{
		"delivery_id", "receiver", "incident_id", "version", "event", "payload", "created_ns", "created_at",
	}}
	attemptsTable = chstore.Table{Name: "alert_attempts", Columns: []string{
		"delivery_id", "receiver", "attempt", "state", "status_code", "error", "duration_ms", "attempted_ns", "attempted_at", "next_attempt_ns",
	}}
)

// pending is one (delivery, receiver) that is due.
type pending struct {
	deliveryID, receiver, incidentID string
	version                          uint64
	event                            EventKind
	createdNs                        uint64
	attempts                         uint64 // the newest attempt's number (0: none yet)
}

// outboxLookback is how far back the scan looks: MaxAge plus a margin, so
// every delivery is given up explicitly (a failed attempt row) before it
// leaves the scan.
func outboxLookback(maxAge time.Duration) time.Duration { return maxAge + time.Hour }

// due lists up to limit deliveries whose newest attempt is neither
// delivered nor failed and whose next attempt time has come, oldest first.
// A delivery without attempts joins no row: with join_use_nulls 0 (the
// default) its state is the empty string and next_ns 0, so it is due at
// once. The joined subqueries need aliases (joined_subquery_requires_alias
// is on by default on every supported server: code 206 without them).
func due(ctx context.Context, db Store, now time.Time, lookback time.Duration, limit int) ([]pending, error) {
	since := now.Add(-lookback).Unix()
	rows, err := db.Conn().Query(ctx, `SELECT delivery_id, receiver, incident_id, version, event, created_ns, attempts
FROM
(
    SELECT delivery_id, receiver, any(incident_id) AS incident_id, any(version) AS version, any(event) AS event, min(created_ns) AS created_ns
    FROM alert_outbox
    WHERE created_at >= toDateTime(?)
    GROUP BY delivery_id, receiver
) AS o
ANY LEFT JOIN
(
    SELECT delivery_id, receiver, toUInt64(max(attempt)) AS attempts, argMax(state, attempted_ns) AS state, argMax(next_attempt_ns, attempted_ns) AS next_ns
    FROM alert_attempts
    WHERE attempted_at >= toDateTime(?)
    GROUP BY delivery_id, receiver
) AS a USING (delivery_id, receiver)
WHERE state NOT IN ('delivered', 'failed') AND next_ns <= ?
ORDER BY created_ns, delivery_id, receiver
LIMIT ?`, since, since, uint64(now.UnixNano()), limit)
	if err != nil {
		return nil, fmt.Errorf("scan alert outbox: %w", err)
	}
	defer rows.Close()
	var out []pending
	for rows.Next() {
		var p pending
		var ev string
		if err := rows.Scan(&p.deliveryID, &p.receiver, &p.incidentID, &p.version, &ev, &p.createdNs, &p.attempts); err != nil {
			return nil, fmt.Errorf("scan alert outbox row: %w", err)
		}
		p.event = EventKind(ev)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read alert outbox: %w", err)
	}
	return out, nil
}

// payloads reads the documents of the given deliveries.
func payloads(ctx context.Context, db Store, ids []string) (map[string][]byte, error) {
	rows, err := db.Conn().Query(ctx, `SELECT delivery_id, any(payload) FROM alert_outbox WHERE has(?, delivery_id) GROUP BY delivery_id`, ids)
	if err != nil {
		return nil, fmt.Errorf("read alert payloads: %w", err)
	}
	defer rows.Close()
	out := make(map[string][]byte, len(ids))
	for rows.Next() {
		var id, p string
		if err := rows.Scan(&id, &p); err != nil {
			return nil, fmt.Errorf("scan alert payload: %w", err)
		}
		out[id] = []byte(p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read alert payloads: %w", err)
	}
	return out, nil
}

// existing returns the receivers that already have an outbox row for the
// delivery id.
func existing(ctx context.Context, db Store, deliveryID string) (map[string]bool, error) {
	rows, err := db.Conn().Query(ctx, `SELECT DISTINCT receiver FROM alert_outbox WHERE delivery_id = ?`, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("read outbox rows of %s: %w", deliveryID, err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			return nil, fmt.Errorf("scan outbox receiver: %w", err)
		}
		out[r] = true
	}
	return out, rows.Err()
}

// grouped reports whether the incident's event is already covered by an
// earlier outbox row, so one incident pages once per event:
//   - opened and resolved page once per incident, whatever the version;
//   - top_culprit_changed pages only when the top culprit (cause and
//     entity) differs from that of the newest event already enqueued.
func grouped(ctx context.Context, db Store, ev Event) (bool, string, error) {
	switch ev.Kind {
	case EventOpened, EventResolved:
		rows, err := db.Conn().Query(ctx, `SELECT count() FROM alert_outbox WHERE incident_id = ? AND event = ?`, ev.IncidentID, string(ev.Kind))
		if err != nil {
			return false, "", fmt.Errorf("read outbox events of %s: %w", ev.IncidentID, err)
		}
		defer rows.Close()
		var n uint64
		if rows.Next() {
			if err := rows.Scan(&n); err != nil {
				return false, "", fmt.Errorf("scan outbox count: %w", err)
			}
		}
		if err := rows.Err(); err != nil {
			return false, "", fmt.Errorf("read outbox events of %s: %w", ev.IncidentID, err)
		}
		return n > 0, "already_" + string(ev.Kind), nil
	case EventTopCulpritChanged:
		rows, err := db.Conn().Query(ctx, `SELECT payload FROM alert_outbox WHERE incident_id = ? AND version <= ? ORDER BY version DESC, created_ns DESC LIMIT 1`, ev.IncidentID, ev.Version)
		if err != nil {
			return false, "", fmt.Errorf("read last outbox event of %s: %w", ev.IncidentID, err)
		}
		defer rows.Close()
		if !rows.Next() {
			return false, "", rows.Err()
		}
		var last string
		if err := rows.Scan(&last); err != nil {
			return false, "", fmt.Errorf("scan last outbox event: %w", err)
		}
		var prev, cur incident
		if json.Unmarshal([]byte(last), &prev) != nil || json.Unmarshal(ev.Payload, &cur) != nil {
			return false, "", nil
		}
		return prev.topKey() == cur.topKey(), "same_top_culprit", nil
	}
	return false, "", nil
}
