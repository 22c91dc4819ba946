package alert

import (
	"context"
	"encoding/json"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
)

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

// grouped reports whether the incident's event is already covered by an
// earlier outbox row, so one incident pages once per event:
//   - opened and resolved page once per incident, whatever the version;
//   - top_culprit_changed pages only when the top culprit (cause and
//     entity) differs from that of the newest event already enqueued.
func grouped(ctx context.Context, db Store, ev Event) (bool, string, error) {
	switch ev.Kind {
	case EventOpened, EventResolved:
		n, err := db.eventCount(ctx, ev.IncidentID, ev.Kind)
		if err != nil {
			return false, "", err
		}
		return n > 0, "already_" + string(ev.Kind), nil
	case EventTopCulpritChanged:
		last, ok, err := db.lastEvent(ctx, ev.IncidentID, ev.Version)
		if err != nil || !ok {
			return false, "", err
		}
		var prev, cur incident
		if json.Unmarshal(last, &prev) != nil || json.Unmarshal(ev.Payload, &cur) != nil {
			return false, "", nil
		}
		return prev.topKey() == cur.topKey(), "same_top_culprit", nil
	}
	return false, "", nil
}
