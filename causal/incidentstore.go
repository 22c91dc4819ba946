package causal

import "context"

// incidentStore is what the scheduled mode (Lifecycle) needs of its store:
// one version of an incident written (WriteIncident's rules: its culprits,
// then its row), and the newest version of every incident read back,
// optionally only those in one state, ordered by id (LoadIncidents). The
// real one is dbIncidents over DB; the package's tests have an in-memory
// one that passes the same conformance suite (incidentstore_test.go).
type incidentStore interface {
	writeIncident(ctx context.Context, rec IncidentRecord) error
	loadIncidents(ctx context.Context, state string) ([]IncidentRecord, error)
}

// dbIncidents is the incidentStore over the incidents and culprits tables.
type dbIncidents struct{ db DB }

func (d dbIncidents) writeIncident(ctx context.Context, rec IncidentRecord) error {
	return WriteIncident(ctx, d.db, rec)
}

func (d dbIncidents) loadIncidents(ctx context.Context, state string) ([]IncidentRecord, error) {
	return LoadIncidents(ctx, d.db, state)
}
