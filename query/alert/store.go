package alert

import (
	"context"
	"fmt"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
)

// Store is what the dispatcher and the watcher need of their database: the
// outbox (alert_outbox), the attempt log (alert_attempts), the claims
// (alert_claims) and the incidents the causal stage writes (incidents).
// Each method is one question the package asks, so the rules (which rows
// are due, which claim is the first live one) are stated once per
// implementation and checked by one conformance suite (store_test.go) run
// on both. ClickHouse is the real one; the package's tests have an
// in-memory one (memstore_test.go). The methods are unexported: the
// interface is this package's seam, not an extension point.
//
// Insert methods take rows in the column order of outboxTable,
// attemptsTable and claimsTable; the caller owns the rows afterwards.
type Store interface {
	// insertOutbox appends outbox rows.
	insertOutbox(ctx context.Context, rows [][]any) error
	// outboxReceivers returns the receivers with an outbox row for the
	// delivery id.
	outboxReceivers(ctx context.Context, deliveryID string) (map[string]bool, error)
	// eventCount counts the outbox rows of the incident's event kind.
	eventCount(ctx context.Context, incidentID string, kind EventKind) (uint64, error)
	// lastEvent returns the payload of the incident's newest outbox row
	// at or below version (by version, then created_ns); ok is false when
	// there is none.
	lastEvent(ctx context.Context, incidentID string, version uint64) (payload []byte, ok bool, err error)
	// due lists up to limit (delivery, receiver) pairs enqueued at or
	// after since (whole seconds) whose newest attempt (by attempted_ns,
	// among the attempts at or after since) is neither delivered nor
	// failed and whose next attempt time is at or before now; a pair
	// without attempts is due at once. Oldest first: created_ns, then
	// delivery id, then receiver.
	due(ctx context.Context, now, since time.Time, limit int) ([]pending, error)
	// payloads returns the document of each delivery id that has one.
	payloads(ctx context.Context, deliveryIDs []string) (map[string][]byte, error)

	// insertAttempts appends attempt rows.
	insertAttempts(ctx context.Context, rows [][]any) error
	// lastAttempts returns the highest attempt number recorded for each
	// (delivery, receiver) of the delivery ids, keyed with attempt 0.
	lastAttempts(ctx context.Context, deliveryIDs []string) (map[claimKey]uint32, error)

	// insertClaims appends claim rows; claimed_ns is the store's clock at
	// the insert (the server's, for ClickHouse), never the caller's.
	insertClaims(ctx context.Context, rows [][]any) error
	// firstLiveClaims returns, per key of the delivery ids, the claim id
	// of the first live claim: smallest (claimed_ns, claim_id) among the
	// claim ids that are not released (no row with lease 0) and whose
	// claimed_ns + lease is after the store's now.
	firstLiveClaims(ctx context.Context, deliveryIDs []string) (map[claimKey]string, error)

	// listIncidents returns up to limit incidents updated at or after
	// since (whole seconds), each with its newest version and update,
	// newest update first (ties: incident id descending), strictly after
	// the cursor (updated, id) in that order.
	listIncidents(ctx context.Context, since time.Time, curU uint32, curID string, limit int) ([]listed, error)
	// incidentVersions returns up to limit versions of the incidents ids
	// strictly after the cursor (id, version), in (id, version) order.
	incidentVersions(ctx context.Context, ids []string, curID string, curV uint64, limit int) ([]incidentVersion, error)
}

// ClickHouse is the Store over a migrated ClickHouse database
// (migrations 0003_alerts.sql and 0005_alert_claims.sql).
func ClickHouse(st *chstore.Store) Store { return chStore{st} }

type chStore struct{ st *chstore.Store }

func (c chStore) insertOutbox(ctx context.Context, rows [][]any) error {
	return c.st.Insert(ctx, outboxTable, rows)
}

func (c chStore) insertAttempts(ctx context.Context, rows [][]any) error {
	return c.st.Insert(ctx, attemptsTable, rows)
}

func (c chStore) insertClaims(ctx context.Context, rows [][]any) error {
	return c.st.Insert(ctx, claimsTable, rows)
}

func (c chStore) outboxReceivers(ctx context.Context, deliveryID string) (map[string]bool, error) {
	rows, err := c.st.Conn().Query(ctx, `SELECT DISTINCT receiver FROM alert_outbox WHERE delivery_id = ?`, deliveryID)
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

func (c chStore) eventCount(ctx context.Context, incidentID string, kind EventKind) (uint64, error) {
	var n uint64
	if err := c.st.Conn().QueryRow(ctx, `SELECT count() FROM alert_outbox WHERE incident_id = ? AND event = ?`, incidentID, string(kind)).Scan(&n); err != nil {
		return 0, fmt.Errorf("read outbox events of %s: %w", incidentID, err)
	}
	return n, nil
}

func (c chStore) lastEvent(ctx context.Context, incidentID string, version uint64) ([]byte, bool, error) {
	rows, err := c.st.Conn().Query(ctx, `SELECT payload FROM alert_outbox WHERE incident_id = ? AND version <= ? ORDER BY version DESC, created_ns DESC LIMIT 1`, incidentID, version)
	if err != nil {
		return nil, false, fmt.Errorf("read last outbox event of %s: %w", incidentID, err)
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, false, rows.Err()
	}
	var last string
	if err := rows.Scan(&last); err != nil {
		return nil, false, fmt.Errorf("scan last outbox event: %w", err)
	}
	return []byte(last), true, nil
}

// due: a delivery without attempts joins no row: with join_use_nulls 0
// (the default) its state is the empty string and next_ns 0, so it is due
// at once. The joined subqueries need aliases (joined_subquery_requires_alias
// is on by default on every supported server: code 206 without them).
func (c chStore) due(ctx context.Context, now, since time.Time, limit int) ([]pending, error) {
	s := since.Unix()
	rows, err := c.st.Conn().Query(ctx, `SELECT delivery_id, receiver, incident_id, version, event, created_ns, attempts
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
LIMIT ?`, s, s, uint64(now.UnixNano()), limit)
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

func (c chStore) payloads(ctx context.Context, ids []string) (map[string][]byte, error) {
	rows, err := c.st.Conn().Query(ctx, `SELECT delivery_id, any(payload) FROM alert_outbox WHERE has(?, delivery_id) GROUP BY delivery_id`, ids)
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

func (c chStore) lastAttempts(ctx context.Context, ids []string) (map[claimKey]uint32, error) {
	rows, err := c.st.Conn().Query(ctx, `SELECT delivery_id, receiver, max(attempt) FROM alert_attempts WHERE has(?, delivery_id) GROUP BY delivery_id, receiver`, ids)
	if err != nil {
		return nil, fmt.Errorf("read alert attempts: %w", err)
	}
	defer rows.Close()
	out := map[claimKey]uint32{}
	for rows.Next() {
		var k claimKey
		var n uint32
		if err := rows.Scan(&k.deliveryID, &k.receiver, &n); err != nil {
			return nil, fmt.Errorf("scan alert attempt: %w", err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read alert attempts: %w", err)
	}
	return out, nil
}

func (c chStore) firstLiveClaims(ctx context.Context, ids []string) (map[claimKey]string, error) {
	rows, err := c.st.Conn().Query(ctx, `SELECT delivery_id, receiver, attempt, claim_id, min(claimed_ns) AS first_ns
FROM alert_claims
WHERE has(?, delivery_id)
GROUP BY delivery_id, receiver, attempt, claim_id
HAVING min(lease_ns) > 0 AND first_ns + max(lease_ns) > toUnixTimestamp64Nano(now64(9))
ORDER BY delivery_id, receiver, attempt, first_ns, claim_id`, ids)
	if err != nil {
		return nil, fmt.Errorf("read alert claims: %w", err)
	}
	defer rows.Close()
	out := map[claimKey]string{}
	for rows.Next() {
		var k claimKey
		var id string
		var at uint64
		if err := rows.Scan(&k.deliveryID, &k.receiver, &k.attempt, &id, &at); err != nil {
			return nil, fmt.Errorf("scan alert claim: %w", err)
		}
		if _, ok := out[k]; !ok {
			out[k] = id // the first in (claimed_ns, claim_id) order
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read alert claims: %w", err)
	}
	return out, nil
}

func (c chStore) listIncidents(ctx context.Context, since time.Time, curU uint32, curID string, limit int) ([]listed, error) {
	rows, err := c.st.Conn().Query(ctx, `SELECT incident_id, max(version) AS v, toUInt32(max(updated_at)) AS u
FROM incidents
WHERE updated_at >= toDateTime(?)
GROUP BY incident_id
HAVING (u, incident_id) < (?, ?)
ORDER BY u DESC, incident_id DESC
LIMIT ?`, since.Unix(), curU, curID, limit)
	if err != nil {
		return nil, fmt.Errorf("list incidents for alerts: %w", err)
	}
	defer rows.Close()
	var out []listed
	for rows.Next() {
		var l listed
		if err := rows.Scan(&l.id, &l.version, &l.updated); err != nil {
			return nil, fmt.Errorf("scan incident listing: %w", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list incidents for alerts: %w", err)
	}
	return out, nil
}

func (c chStore) incidentVersions(ctx context.Context, ids []string, curID string, curV uint64, limit int) ([]incidentVersion, error) {
	rows, err := c.st.Conn().Query(ctx, `SELECT incident_id, version, status, toUInt32(resolved_at) > 0, payload
FROM incidents
WHERE has(?, incident_id) AND (incident_id, version) > (?, ?)
ORDER BY incident_id, version
LIMIT ?`, ids, curID, curV, limit)
	if err != nil {
		return nil, fmt.Errorf("read incident versions for alerts: %w", err)
	}
	defer rows.Close()
	var vs []incidentVersion
	for rows.Next() {
		var v incidentVersion
		if err := rows.Scan(&v.id, &v.version, &v.status, &v.resolved, &v.payload); err != nil {
			return nil, fmt.Errorf("scan incident version: %w", err)
		}
		vs = append(vs, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read incident versions for alerts: %w", err)
	}
	return vs, nil
}
