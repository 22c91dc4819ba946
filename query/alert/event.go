package alert

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// EventKind is what happened to an incident.
type EventKind string

// The events that page.
const (
	EventOpened            EventKind = "opened"
	EventTopCulpritChanged EventKind = "top_culprit_changed"
	EventResolved          EventKind = "resolved"
)

// Valid reports whether k is a known event.
func (k EventKind) Valid() bool {
	return k == EventOpened || k == EventTopCulpritChanged || k == EventResolved
}

// Event is one incident state change to deliver.
type Event struct {
	IncidentID string
	Version    uint64
	Kind       EventKind
	// Payload is the incident's v1 JSON document at Version
	// (schemas/culprits.v1.schema.json). Enqueue copies it.
	Payload []byte
}

// DeliveryID is the idempotency id of the event, the same for every
// receiver and every attempt: <incident_id>:<version>:<event>.
func (e Event) DeliveryID() string {
	return e.IncidentID + ":" + strconv.FormatUint(e.Version, 10) + ":" + string(e.Kind)
}

// maxPayloadBytes bounds one event's document.
const maxPayloadBytes = 1 << 20

func (e Event) validate() error {
	if e.IncidentID == "" || len(e.IncidentID) > 256 {
		return errors.New("incident id: want 1 to 256 bytes")
	}
	if !e.Kind.Valid() {
		return fmt.Errorf("event %q: want opened, top_culprit_changed or resolved", e.Kind)
	}
	if len(e.Payload) > maxPayloadBytes {
		return fmt.Errorf("payload of %d bytes: at most %d", len(e.Payload), maxPayloadBytes)
	}
	var doc incident
	if err := json.Unmarshal(e.Payload, &doc); err != nil {
		return fmt.Errorf("payload is not a v1 incident JSON object: %w", err)
	}
	if doc.IncidentID != "" && doc.IncidentID != e.IncidentID {
		return fmt.Errorf("payload incident_id %q does not match %q", doc.IncidentID, e.IncidentID)
	}
	return nil
}

// incident is the part of the v1 document the messages use.
type incident struct {
	IncidentID string `json:"incident_id"`
	Status     string `json:"status"`
	SLO        struct {
		Signal      string            `json:"signal"`
		ThresholdMS float64           `json:"threshold_ms"`
		Scope       map[string]string `json:"scope"`
	} `json:"slo"`
	Window struct {
		Start string `json:"start"`
		End   string `json:"end"`
	} `json:"window"`
	ObservedP99MS float64   `json:"observed_p99_ms"`
	BaselineP99MS float64   `json:"baseline_p99_ms"`
	Culprits      []culprit `json:"culprits"`
}

type culprit struct {
	Rank                 int               `json:"rank"`
	Cause                string            `json:"cause"`
	Entity               map[string]string `json:"entity"`
	EffectMS             float64           `json:"effect_ms"`
	AttributableFraction float64           `json:"attributable_fraction"`
	CounterfactualP99MS  float64           `json:"counterfactual_p99_ms"`
	Health               float64           `json:"health"`
}

// topKey identifies the top culprit (cause and entity); "" without culprits.
func (in *incident) topKey() string {
	if len(in.Culprits) == 0 {
		return ""
	}
	c := in.Culprits[0]
	return c.Cause + " " + entityText(c.Entity)
}
