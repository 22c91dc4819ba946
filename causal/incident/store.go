package incident

import (
	"context"

	"github.com/tailcause/tailcause/causal"
)

// incidentStore is what the scheduled mode (Lifecycle) needs of its store:
// one version of an incident written (Write's rules: its culprits,
// then its row), and the newest version of every incident read back,
// optionally only those in one state, ordered by id (Load). The
// real one is dbIncidents over causal.DB; the package's tests have an in-memory
// one that passes the same conformance suite (store_test.go).
type incidentStore interface {
	writeIncident(ctx context.Context, rec Record) error
	loadIncidents(ctx context.Context, state string) ([]Record, error)
}

// dbIncidents is the incidentStore over the incidents and culprits tables.
type dbIncidents struct{ db causal.DB }

func (d dbIncidents) writeIncident(ctx context.Context, rec Record) error {
	return Write(ctx, d.db, rec)
}

func (d dbIncidents) loadIncidents(ctx context.Context, state string) ([]Record, error) {
	return Load(ctx, d.db, state)
}
