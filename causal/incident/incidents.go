package incident

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/tailcause/tailcause/causal"
	"github.com/tailcause/tailcause/causal/dag"
)

// Incident lifecycle states, as the incidents table's status column holds
// them. (The v1 document's status is firing or ok: a resolved incident's
// payload is its last firing document.)
const (
	StateFiring   = "firing"
	StateResolved = "resolved"
)

// Record is one version of an incident: a row of the incidents
// table and its culprits rows (schemas/clickhouse 0002_causal.sql).
type Record struct {
	Incident   causal.Incident
	Version    uint64 // 1, 2, …: the newest version wins (ReplacingMergeTree)
	State      string // StateFiring or StateResolved
	OpenedAt   time.Time
	UpdatedAt  time.Time
	ResolvedAt time.Time // zero while firing
}

// Table column lists, in insert order.
var (
	incidentColumns = []string{
		"incident_id", "version", "status", "scope", "scope_keys", "scope_values", "signal", "quantile", "threshold_ms",
		"window_start", "window_end", "baseline_start", "baseline_end", "opened_at", "updated_at", "resolved_at",
		"observed_p99_ms", "baseline_p99_ms", "requests", "tail_requests", "top_cause", "top_entity",
		"method_estimator", "method_dag", "method_version", "payload",
	}
	culpritColumns = []string{
		"incident_id", "version", "rank", "cause", "entity_host", "entity_gpu", "entity_engine", "entity_model",
		"entity_pod", "entity_service", "effect_ms", "ci95_low_ms", "ci95_high_ms", "attributable_fraction",
		"counterfactual_p99_ms", "health", "adjusted_for", "evidence", "exemplar_trace_ids", "computed_at",
	}
)

func dt(t time.Time) time.Time {
	if t.IsZero() || t.Before(time.Unix(0, 0)) {
		return time.Unix(0, 0).UTC()
	}
	return t.UTC().Truncate(time.Second)
}

// Write inserts one version of an incident: its culprits first,
// then the incident row, so that a reader who sees the version finds its
// culprits.
func Write(ctx context.Context, db causal.Inserter, rec Record) error {
	in := rec.Incident
	if in.IncidentID == "" {
		return fmt.Errorf("write incident: empty incident id")
	}
	if rec.State != StateFiring && rec.State != StateResolved {
		return fmt.Errorf("write incident %s: state %q", in.IncidentID, rec.State)
	}
	payload, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode incident %s: %w", in.IncidentID, err)
	}
	computed := dt(rec.UpdatedAt)
	rows := make([][]any, 0, len(in.Culprits))
	for _, c := range in.Culprits {
		rows = append(rows, []any{
			in.IncidentID, rec.Version, uint16(c.Rank), string(c.Cause),
			c.Entity.Host, c.Entity.GPU, c.Entity.Engine, c.Entity.Model, c.Entity.Pod, c.Entity.Service,
			c.EffectMS, c.CI95MS[0], c.CI95MS[1], c.AttributableFraction, c.CounterfactualP99MS, c.Health,
			nonNil(c.AdjustedFor), nonNil(c.Evidence), nonNil(c.ExemplarTraceIDs), computed,
		})
	}
	if err := db.Insert(ctx, "culprits", culpritColumns, rows); err != nil {
		return fmt.Errorf("write culprits of incident %s v%d: %w", in.IncidentID, rec.Version, err)
	}
	keys := sortedKeys(in.SLO.Scope)
	vals := make([]string, len(keys))
	for i, k := range keys {
		vals[i] = in.SLO.Scope[k]
	}
	var topCause, topEntity string
	if len(in.Culprits) > 0 {
		topCause, topEntity = string(in.Culprits[0].Cause), causal.EntityString(in.Culprits[0].Entity)
	}
	row := []any{
		in.IncidentID, rec.Version, rec.State, causal.ScopeString(in.SLO.Scope), keys, vals, in.SLO.Signal, in.SLO.Quantile, in.SLO.ThresholdMS,
		dt(in.Window.Start), dt(in.Window.End), dt(in.Baseline.Start), dt(in.Baseline.End),
		dt(rec.OpenedAt), dt(rec.UpdatedAt), dt(rec.ResolvedAt),
		in.ObservedP99MS, in.BaselineP99MS, uint64(max(in.Requests, 0)), uint64(max(in.TailRequests, 0)), topCause, topEntity,
		in.Method.Estimator, in.Method.DAG, in.Method.Version, string(payload),
	}
	if err := db.Insert(ctx, "incidents", incidentColumns, [][]any{row}); err != nil {
		return fmt.Errorf("write incident %s v%d: %w", in.IncidentID, rec.Version, err)
	}
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Load reads the newest version of every incident, optionally
// only those in state (e.g. StateFiring: the open ones), ordered by id.
func Load(ctx context.Context, db causal.Querier, state string) ([]Record, error) {
	q := `SELECT incident_id, max(version), toString(argMax(status, version)), argMax(payload, version),
       argMax(opened_at, version), argMax(updated_at, version), argMax(resolved_at, version)
FROM incidents
GROUP BY incident_id`
	if state != "" {
		q += "\nHAVING toString(argMax(status, version)) = " + dag.QuoteString(state)
	}
	q += "\nORDER BY incident_id"
	var out []Record
	err := causal.QueryRows(ctx, db, "incidents", q, func(r causal.Rows) error {
		var rec Record
		var id, payload string
		if err := r.Scan(&id, &rec.Version, &rec.State, &payload, &rec.OpenedAt, &rec.UpdatedAt, &rec.ResolvedAt); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(payload), &rec.Incident); err != nil {
			return fmt.Errorf("decode payload of incident %s v%d: %w", id, rec.Version, err)
		}
		if rec.ResolvedAt.Unix() <= 0 {
			rec.ResolvedAt = time.Time{}
		}
		out = append(out, rec)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Incident.IncidentID < out[j].Incident.IncidentID })
	return out, nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
