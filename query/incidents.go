package query

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// incidentDoc is the part of the stored v1 payload (schemas/
// culprits.v1.schema.json) this package reads; the API returns the payload
// itself, byte for byte.
type incidentDoc struct {
	IncidentID string `json:"incident_id"`
	Status     string `json:"status"`
	SLO        struct {
		Signal      string            `json:"signal"`
		Quantile    float64           `json:"quantile"`
		ThresholdMS float64           `json:"threshold_ms"`
		Scope       map[string]string `json:"scope"`
	} `json:"slo"`
	Window        interval     `json:"window"`
	Baseline      interval     `json:"baseline"`
	ObservedP99MS float64      `json:"observed_p99_ms"`
	BaselineP99MS float64      `json:"baseline_p99_ms"`
	Requests      int64        `json:"requests"`
	TailRequests  int64        `json:"tail_requests"`
	Culprits      []culpritDoc `json:"culprits"`
	EntityHealth  []healthDoc  `json:"entity_health"` // optional (v1 extra)
	Method        struct {
		Estimator string `json:"estimator"`
		DAG       string `json:"dag"`
		Version   string `json:"version"`
	} `json:"method"`
}

type interval struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

type culpritDoc struct {
	Rank                 int               `json:"rank"`
	Cause                string            `json:"cause"`
	Entity               map[string]string `json:"entity"`
	EffectMS             float64           `json:"effect_ms"`
	CI95MS               [2]float64        `json:"ci95_ms"`
	AttributableFraction float64           `json:"attributable_fraction"`
	CounterfactualP99MS  float64           `json:"counterfactual_p99_ms"`
	Health               float64           `json:"health"`
	AdjustedFor          []string          `json:"adjusted_for"`
	Evidence             []string          `json:"evidence"`
	ExemplarTraceIDs     []string          `json:"exemplar_trace_ids"`
}

// healthDoc is one entry of the optional entity_health list.
type healthDoc struct {
	Kind         string            `json:"kind"`
	Entity       map[string]string `json:"entity"`
	Health       float64           `json:"health"`
	Requests     int64             `json:"requests"`
	TailRequests int64             `json:"tail_requests"`
}

// entityLabel is "host=node-3 gpu=GPU-…" in a fixed key order.
func entityLabel(e map[string]string) string {
	var parts []string
	for _, k := range []string{"model", "service", "host", "pod", "engine", "gpu"} {
		if v := e[k]; v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	if len(parts) == 0 {
		return "(fleet)"
	}
	return strings.Join(parts, " ")
}

// incidentSummary is one row of the incident list.
type incidentSummary struct {
	IncidentID    string            `json:"incident_id"`
	Version       uint64            `json:"version"`
	Status        string            `json:"status"`
	Scope         map[string]string `json:"scope"`
	Signal        string            `json:"signal"`
	Quantile      num               `json:"quantile"`
	ThresholdMS   num               `json:"threshold_ms"`
	Window        intervalJSON      `json:"window"`
	OpenedAt      string            `json:"opened_at"`
	UpdatedAt     string            `json:"updated_at"`
	ResolvedAt    *string           `json:"resolved_at"`
	ObservedP99MS num               `json:"observed_p99_ms"`
	BaselineP99MS num               `json:"baseline_p99_ms"`
	Requests      uint64            `json:"requests"`
	TailRequests  uint64            `json:"tail_requests"`
	TopCause      string            `json:"top_cause"`
	TopEntity     string            `json:"top_entity"`
}

type intervalJSON struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

type incidentList struct {
	Incidents  []incidentSummary `json:"incidents"`
	NextCursor *string           `json:"next_cursor"`
	From       string            `json:"from"`
	To         string            `json:"to"`
}

// listIncidents: GET /v1/incidents. Newest first (opened_at, then id, both
// descending); filters status, cause (the top culprit's), model and service
// (the SLO scope); from/to select incidents whose window overlaps them.
func (s *Server) listIncidents(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if err := known(q, "from", "to", "status", "cause", "model", "service", "limit", "cursor"); err != nil {
		return err
	}
	tr, err := optionalRange(q, s.now(), s.cfg.DefaultIncidentRange, s.cfg.MaxIncidentRange)
	if err != nil {
		return err
	}
	n, err := limit(q, s.cfg.DefaultLimit, s.cfg.MaxLimit)
	if err != nil {
		return err
	}
	f := incidentFilter{from: tr.From, to: tr.To, limit: n + 1}
	for _, p := range []struct {
		param string
		dst   *string
	}{{"status", &f.status}, {"cause", &f.cause}, {"model", &f.model}, {"service", &f.service}} {
		if v := q.Get(p.param); v != "" {
			if err := checkID(p.param, v); err != nil {
				return err
			}
			*p.dst = v
		}
	}
	if v := q.Get("cursor"); v != "" {
		c, err := decodeCursor(v)
		if err != nil {
			return err
		}
		f.after = &c
	}
	rows, err := s.incidents.listIncidents(r.Context(), f)
	if err != nil {
		return err
	}
	out := incidentList{Incidents: []incidentSummary{}, From: rfc3339(tr.From), To: rfc3339(tr.To)}
	var openedUnix []int64
	for _, row := range rows {
		is := incidentSummary{IncidentID: row.id, Version: row.version, Status: row.status, Signal: row.signal,
			Requests: row.requests, TailRequests: row.tailRequests, TopCause: row.topCause, TopEntity: row.topEntity}
		is.Scope = map[string]string{}
		for i := range row.scopeKeys {
			if i < len(row.scopeValues) {
				is.Scope[row.scopeKeys[i]] = row.scopeValues[i]
			}
		}
		is.Quantile, is.ThresholdMS, is.ObservedP99MS, is.BaselineP99MS = num(row.quantile), num(row.thresholdMS), num(row.observedP99MS), num(row.baselineP99MS)
		is.Window = intervalJSON{rfc3339(row.windowStart), rfc3339(row.windowEnd)}
		is.OpenedAt, is.UpdatedAt = rfc3339(row.opened), rfc3339(row.updated)
		if row.resolved.Unix() > 0 {
			v := rfc3339(row.resolved)
			is.ResolvedAt = &v
		}
		out.Incidents = append(out.Incidents, is)
		openedUnix = append(openedUnix, row.opened.Unix())
	}
	if len(out.Incidents) > n {
		out.Incidents = out.Incidents[:n]
		c := cursor{OpenedAt: openedUnix[n-1], ID: out.Incidents[n-1].IncidentID}.encode()
		out.NextCursor = &c
	}
	return writeJSON(w, http.StatusOK, out)
}

// loadIncident reads the newest version of an incident: its version and the
// stored v1 payload.
func (s *Server) loadIncident(ctx context.Context, id string) (uint64, []byte, *incidentDoc, error) {
	if err := checkID("incident id", id); err != nil {
		return 0, nil, nil, err
	}
	version, payload, ok, err := s.incidents.incident(ctx, id)
	if err != nil {
		return 0, nil, nil, err
	}
	if !ok {
		return 0, nil, nil, probNotFound.new("no incident %q", id)
	}
	var doc incidentDoc
	if err := json.Unmarshal([]byte(payload), &doc); err != nil {
		return 0, nil, nil, fmt.Errorf("decode stored payload of incident %s version %d: %w", id, version, err)
	}
	return version, []byte(payload), &doc, nil
}

// getIncident: GET /v1/incidents/{id}: the stored v1 document of the
// newest version, as written by the causal stage.
func (s *Server) getIncident(w http.ResponseWriter, r *http.Request) error {
	if err := known(r.URL.Query()); err != nil {
		return err
	}
	id := r.PathValue("id")
	version, payload, _, err := s.loadIncident(r.Context(), id)
	if err != nil {
		return err
	}
	etag := `"` + strconv.FormatUint(version, 10) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("X-Tailcause-Incident-Version", strconv.FormatUint(version, 10))
	w.Header().Set("Link", `<`+s.ReportURLPath(id)+`>; rel="alternate"; type="text/html"`)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(append(bytes.TrimSpace(payload), '\n'))
	return err
}

// ReportURLPath is the unsigned path of an incident's report page.
func (s *Server) ReportURLPath(id string) string {
	return "/incidents/" + url.PathEscape(id) + "/report"
}

type exemplarRequest struct {
	UID     string `json:"uid"`
	SpanID  string `json:"span_id"`
	Model   string `json:"model"`
	Service string `json:"service"`
	Host    string `json:"host"`
	Engine  string `json:"engine"`
	GPU     string `json:"gpu"`
	Start   string `json:"start"`
	E2EMS   num    `json:"e2e_ms"`
	TTFTMS  num    `json:"ttft_ms"`
	Error   bool   `json:"error"`
}

type exemplar struct {
	TraceID  string            `json:"trace_id"`
	Culprits []int             `json:"culprit_ranks"`
	Causes   []string          `json:"causes"`
	Requests []exemplarRequest `json:"requests"`
}

type exemplarList struct {
	IncidentID string     `json:"incident_id"`
	Version    uint64     `json:"version"`
	Exemplars  []exemplar `json:"exemplars"`
	Truncated  bool       `json:"truncated"`
}

// exemplarSlack widens the incident window when looking up exemplar
// requests: a request that started just before the window can be in it.
const exemplarSlack = 10 * time.Minute

// exemplars: GET /v1/incidents/{id}/exemplars: the culprits' exemplar trace
// ids with the requests each trace holds.
func (s *Server) exemplars(w http.ResponseWriter, r *http.Request) error {
	if err := known(r.URL.Query()); err != nil {
		return err
	}
	id := r.PathValue("id")
	version, _, doc, err := s.loadIncident(r.Context(), id)
	if err != nil {
		return err
	}
	out := exemplarList{IncidentID: id, Version: version, Exemplars: []exemplar{}}
	index := map[string]int{}
	for _, c := range doc.Culprits {
		for _, t := range c.ExemplarTraceIDs {
			i, ok := index[t]
			if !ok {
				if len(out.Exemplars) >= s.cfg.MaxExemplars {
					out.Truncated = true
					continue
				}
				i = len(out.Exemplars)
				index[t] = i
				out.Exemplars = append(out.Exemplars, exemplar{TraceID: t, Requests: []exemplarRequest{}})
			}
			out.Exemplars[i].Culprits = append(out.Exemplars[i].Culprits, c.Rank)
			out.Exemplars[i].Causes = append(out.Exemplars[i].Causes, c.Cause)
		}
	}
	if len(out.Exemplars) > 0 {
		ids := make([]string, len(out.Exemplars))
		for i, e := range out.Exemplars {
			ids[i] = e.TraceID
		}
		from := doc.Window.Start.Add(-exemplarSlack)
		to := doc.Window.End.Add(exemplarSlack)
		if doc.Baseline.Start.Before(from) && !doc.Baseline.Start.IsZero() {
			from = doc.Baseline.Start
		}
		reqs, err := s.lookups.exemplarRequests(r.Context(), ids, from, to.Add(time.Second), s.cfg.MaxExemplars*20)
		if err != nil {
			return fmt.Errorf("exemplars of incident %s: %w", id, err)
		}
		for _, f := range reqs {
			er := exemplarRequest{UID: f.uid, SpanID: f.spanID, Model: f.model, Service: f.service, Host: f.host, Engine: f.engine, GPU: f.gpu}
			er.Start, er.E2EMS, er.TTFTMS, er.Error = rfc3339(nsTime(f.startNs)), num(f.e2e), num(f.ttft), f.errFlag != 0
			if i, ok := index[f.traceID]; ok {
				out.Exemplars[i].Requests = append(out.Exemplars[i].Requests, er)
			}
		}
	}
	return writeJSON(w, http.StatusOK, out)
}
