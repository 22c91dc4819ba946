package causal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// Estimator is the method.estimator of culprits ranked by this package.
const Estimator = "backdoor-ols-hc3"

// Incident statuses.
const (
	StatusFiring = "firing" // a breach with ranked culprits
	StatusOK     = "ok"     // no breach in the window: culprits is empty
)

// Incident is the ranked-culprits document (v1): the API response, the
// webhook payload and `tailcause rank --format json`. Field names and shapes
// are the contract of design.md; see schemas/culprits.v1.schema.json.
type Incident struct {
	IncidentID    string    `json:"incident_id"`
	Status        string    `json:"status"`
	SLO           SLO       `json:"slo"`
	Window        Interval  `json:"window"`
	Baseline      Interval  `json:"baseline"`
	ObservedP99MS float64   `json:"observed_p99_ms"`
	BaselineP99MS float64   `json:"baseline_p99_ms"`
	Requests      int64     `json:"requests"`
	TailRequests  int64     `json:"tail_requests"`
	Culprits      []Culprit `json:"culprits"`
	Method        Method    `json:"method"`
	// EntityHealth is the health of the least healthy engines, GPUs and
	// hosts of the scope in the window (at most MaxEntityHealth, least
	// healthy first), culprits or not: an extra field of v1, absent when
	// no entity was scored.
	EntityHealth []EntityHealth `json:"entity_health,omitempty"`
	// Breach says where the breach was found (the scope's quantile, or one
	// engine or host far worse than its peers): an extra field of v1,
	// absent on documents of a scoped question.
	Breach *Where `json:"breach,omitempty"`
	// Notes are the analyzer's remarks (baseline found by change point,
	// unstable intervals, ...): an extra field of v1, absent when empty.
	Notes []string `json:"notes,omitempty"`
}

// EntityHealth is one entity's posterior health against its peers of the
// same kind (Health: leave-one-out Beta-Binomial on window tail counts).
type EntityHealth struct {
	Kind         string  `json:"kind"` // engine, gpu or host
	Entity       Entity  `json:"entity"`
	Health       float64 `json:"health"`
	Requests     int64   `json:"requests"`      // window requests on the entity
	TailRequests int64   `json:"tail_requests"` // of which above the tail threshold
}

// MaxEntityHealth caps Incident.EntityHealth.
const MaxEntityHealth = 24

// SLO is the objective the incident is about.
type SLO struct {
	Signal      string            `json:"signal"` // e2e_latency, ttft, tpot
	Quantile    float64           `json:"quantile"`
	ThresholdMS float64           `json:"threshold_ms"`
	Scope       map[string]string `json:"scope"` // e.g. {"model": "llama-3-8b"}
}

// Interval is a half-open time range [Start, End), written as RFC 3339 in UTC.
type Interval struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// MarshalJSON writes RFC 3339 UTC timestamps (nanoseconds only when set).
func (iv Interval) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Start string `json:"start"`
		End   string `json:"end"`
	}{iv.Start.UTC().Format(time.RFC3339Nano), iv.End.UTC().Format(time.RFC3339Nano)})
}

// Entity is what a culprit acts on; only the fields that apply are written.
type Entity struct {
	Host    string `json:"host,omitempty"`
	GPU     string `json:"gpu,omitempty"`
	Engine  string `json:"engine,omitempty"`
	Model   string `json:"model,omitempty"`
	Pod     string `json:"pod,omitempty"`
	Service string `json:"service,omitempty"`
}

// Culprit is one ranked root cause.
type Culprit struct {
	Rank   int    `json:"rank"`
	Cause  Cause  `json:"cause"`
	Entity Entity `json:"entity"`
	// EffectMS is the adjusted effect of the cause on the tail latency of
	// affected requests (EffectMS), CI95MS its 95% interval.
	EffectMS float64    `json:"effect_ms"`
	CI95MS   [2]float64 `json:"ci95_ms"`
	// AttributableFraction is the share of the window's tail explained by
	// the cause (AttributableFraction).
	AttributableFraction float64 `json:"attributable_fraction"`
	// CounterfactualP99MS is the P99 had the cause been absent
	// (CounterfactualQuantile).
	CounterfactualP99MS float64 `json:"counterfactual_p99_ms"`
	// Health is the posterior probability that the entity behaves like its
	// healthy peers (HealthScore.Health).
	Health           float64  `json:"health"`
	AdjustedFor      []string `json:"adjusted_for"`
	Evidence         []string `json:"evidence"`
	ExemplarTraceIDs []string `json:"exemplar_trace_ids"`
}

// Method says how the culprits were obtained.
type Method struct {
	Estimator string `json:"estimator"` // Estimator
	DAG       string `json:"dag"`       // DAG.Version, e.g. "default@1"
	Version   string `json:"version"`   // tailcause build version
}

// MarshalJSON writes the v1 document. Lists are never null (an empty list is
// []) and the scope is never null.
func (in Incident) MarshalJSON() ([]byte, error) {
	type plain Incident
	p := plain(in)
	if p.Culprits == nil {
		p.Culprits = []Culprit{}
	}
	if p.SLO.Scope == nil {
		p.SLO.Scope = map[string]string{}
	}
	return marshalNoHTML(p)
}

// marshalNoHTML is json.Marshal without HTML escaping, so that an Encoder
// with SetEscapeHTML(false) prints evidence such as "kv_usage_max >= 0.9"
// as written (json.Marshal of the document still escapes <, > and &).
func marshalNoHTML(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// MarshalJSON writes one culprit with non-null lists.
func (c Culprit) MarshalJSON() ([]byte, error) {
	type plain Culprit
	p := plain(c)
	for _, l := range []*[]string{&p.AdjustedFor, &p.Evidence, &p.ExemplarTraceIDs} {
		if *l == nil {
			*l = []string{}
		}
	}
	return marshalNoHTML(p)
}

// Validate checks what JSON cannot express: finite numbers, known causes and
// statuses, ranks 1..n in order, shares in [0, 1].
func (in Incident) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if in.Status != StatusFiring && in.Status != StatusOK {
		bad("status %q: want %q or %q", in.Status, StatusFiring, StatusOK)
	}
	if in.Status == StatusOK && len(in.Culprits) > 0 {
		bad("status ok with %d culprits", len(in.Culprits))
	}
	for name, v := range map[string]float64{"observed_p99_ms": in.ObservedP99MS, "baseline_p99_ms": in.BaselineP99MS, "slo.quantile": in.SLO.Quantile, "slo.threshold_ms": in.SLO.ThresholdMS} {
		if !finite(v) {
			bad("%s is %v", name, v)
		}
	}
	if in.Method.Estimator == "" || in.Method.DAG == "" {
		bad("method.estimator and method.dag are required")
	}
	for i, c := range in.Culprits {
		if c.Rank != i+1 {
			bad("culprit %d: rank %d, want %d", i, c.Rank, i+1)
		}
		if !c.Cause.Valid() {
			bad("culprit %d: unknown cause %q", i, c.Cause)
		}
		for name, v := range map[string]float64{"effect_ms": c.EffectMS, "ci95_ms[0]": c.CI95MS[0], "ci95_ms[1]": c.CI95MS[1], "counterfactual_p99_ms": c.CounterfactualP99MS} {
			if !finite(v) {
				bad("culprit %d: %s is %v", i, name, v)
			}
		}
		for name, v := range map[string]float64{"attributable_fraction": c.AttributableFraction, "health": c.Health} {
			if !(v >= 0 && v <= 1) {
				bad("culprit %d: %s %v outside [0,1]", i, name, v)
			}
		}
	}
	if len(in.EntityHealth) > MaxEntityHealth {
		bad("entity_health: %d entries, at most %d", len(in.EntityHealth), MaxEntityHealth)
	}
	for i, h := range in.EntityHealth {
		if h.Kind != "engine" && h.Kind != "gpu" && h.Kind != "host" {
			bad("entity_health %d: kind %q: want engine, gpu or host", i, h.Kind)
		}
		if !(h.Health >= 0 && h.Health <= 1) || h.TailRequests < 0 || h.TailRequests > h.Requests {
			bad("entity_health %d: health %v, %d tail of %d requests", i, h.Health, h.TailRequests, h.Requests)
		}
		if i > 0 && h.Health < in.EntityHealth[i-1].Health {
			bad("entity_health %d: not ordered least healthy first", i)
		}
	}
	return errors.Join(errs...)
}

// RankCulprits orders culprits and numbers them from 1: by attributable
// fraction (the share of the tail a fix would remove), then effect_ms, then
// lower health, then cause id and entity for a stable order. It sorts cs in
// place.
func RankCulprits(cs []Culprit) {
	key := func(c Culprit) string {
		e := c.Entity
		return string(c.Cause) + "\x00" + e.Host + "\x00" + e.GPU + "\x00" + e.Engine + "\x00" + e.Pod + "\x00" + e.Model + "\x00" + e.Service
	}
	sort.SliceStable(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.AttributableFraction != b.AttributableFraction {
			return a.AttributableFraction > b.AttributableFraction
		}
		if a.EffectMS != b.EffectMS && !math.IsNaN(a.EffectMS) && !math.IsNaN(b.EffectMS) {
			return a.EffectMS > b.EffectMS
		}
		if a.Health != b.Health {
			return a.Health < b.Health
		}
		return key(a) < key(b)
	})
	for i := range cs {
		cs[i].Rank = i + 1
	}
}
