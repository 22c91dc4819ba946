package query

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

//go:embed report.html.tmpl
var reportTemplateText string

// reportData is what the report page and its figures are drawn from: the
// stored incident and two bounded aggregations over the requests in its
// SLO scope.
type reportData struct {
	id        string
	version   uint64
	doc       *incidentDoc
	latency   string // requests column of the SLO signal
	base, win cdf
	series    []seriesPoint
	sig       causeSignal
}

// sloColumns maps the SLO signal of the payload to its requests column.
var sloColumns = map[string]string{"e2e_latency": "e2e_ms", "ttft": "ttft_ms", "tpot": "tpot_ms"}

// clip keeps the last max of iv.
func clip(iv interval, max time.Duration) interval {
	if iv.End.Sub(iv.Start) > max {
		iv.Start = iv.End.Add(-max)
	}
	return iv
}

// conds renders column = ? conditions for the keys of m that are request
// columns, in a fixed order, returning the SQL and its arguments.
func conds(m map[string]string) (string, []any) {
	var sql []string
	var args []any
	for _, c := range filterColumns {
		if v, ok := m[c]; ok && v != "" {
			sql = append(sql, c+" = ?")
			args = append(args, v)
		}
	}
	if len(sql) == 0 {
		return "1", nil
	}
	return strings.Join(sql, " AND "), args
}

// entityConds selects the requests of a culprit's entity. A GPU of a
// multi-GPU (tensor-parallel) engine is named by no request row (they ran
// on all of its GPUs: gpu = ”); its requests are those of the engine whose
// GPU samples carry the GPU's pod.
func entityConds(e map[string]string) (string, []any) {
	sql, args := conds(e)
	if e["gpu"] != "" && e["pod"] == "" && e["engine"] == "" {
		sql = "(" + sql + " OR (gpu = '' AND host = ? AND pod IN (SELECT pod FROM gpu_samples WHERE host = ? AND gpu = ?)))"
		args = append(args, e["host"], e["host"], e["gpu"])
	}
	return sql, args
}

func (s *Server) loadReport(ctx context.Context, id string) (*reportData, error) {
	version, _, doc, err := s.loadIncident(ctx, id)
	if err != nil {
		return nil, err
	}
	rd := &reportData{id: id, version: version, doc: doc, latency: "e2e_ms"}
	if c, ok := sloColumns[doc.SLO.Signal]; ok {
		rd.latency = c
	}
	if len(doc.Culprits) > 0 {
		rd.sig = signalFor(doc.Culprits[0].Cause, rd.latency)
	} else {
		rd.sig = causeSignal{"toFloat64(1)", "requests"}
	}
	if doc.Window.Start.IsZero() || !doc.Window.Start.Before(doc.Window.End) {
		return rd, nil // nothing to aggregate
	}
	win := clip(doc.Window, s.cfg.MaxRange)
	base := clip(doc.Baseline, s.cfg.MaxRange)
	hasBase := !base.Start.IsZero() && base.Start.Before(base.End)
	col := rd.latency

	// Distributions: quantiles of the baseline and the window in one pass.
	levels := quantileLevels()
	if !hasBase {
		base = interval{time.Unix(0, 0), time.Unix(0, 0)} // selects nothing
	}
	rd.base, rd.win, err = s.reports.distributions(ctx, col, doc.SLO.Scope, base, win, levels)
	if err != nil {
		return nil, fmt.Errorf("report of incident %s: %w", id, err)
	}

	// P99 per minute against the top culprit's signal on its entity, from
	// the baseline (at most MaxRange before the window's end) to the end.
	from := win.Start
	if hasBase && doc.Baseline.Start.Before(from) {
		from = doc.Baseline.Start
	}
	if lim := win.End.Add(-s.cfg.MaxRange); from.Before(lim) {
		from = lim
	}
	var entity map[string]string // nil: every request of the scope
	if len(doc.Culprits) > 0 {
		entity = doc.Culprits[0].Entity
		if entity == nil {
			entity = map[string]string{}
		}
	}
	rd.series, err = s.reports.series(ctx, col, doc.SLO.Scope, from, win.End, rd.sig, entity, int(s.cfg.MaxRange/time.Minute)+2)
	if err != nil {
		return nil, fmt.Errorf("report of incident %s: %w", id, err)
	}
	return rd, nil
}

// sigAggregate is the per-minute aggregate of a signal: the mean over the
// entity's requests, or their count for the no-culprit "requests" signal.
func sigAggregate(sig causeSignal, cond string) string {
	if sig.label == "requests" {
		return "toFloat64(countIf(" + cond + "))"
	}
	return "avgIf(" + sig.expr + ", " + cond + ")"
}

// render draws one figure of the report.
func (rd *reportData) render(name string) ([]byte, error) {
	d := rd.doc
	switch name {
	case "latency_cdf":
		return plotLatencyCDF(rd.latency, rd.base, rd.win, d.SLO.ThresholdMS)
	case "p99_signal":
		return plotP99Signal(rd.series, d.SLO.ThresholdMS, d.Window, rd.sig.label)
	case "contributions":
		return plotContributions(d.Culprits)
	case "counterfactual":
		return plotCounterfactual(d.Culprits, d.ObservedP99MS, d.BaselineP99MS, d.SLO.ThresholdMS)
	case "health":
		return plotHealth(d.Culprits, d.EntityHealth)
	}
	return nil, probNotFound.new("no plot %q: want one of %s (with .svg)", name, strings.Join(plotNames, ", "))
}

// plot: GET /incidents/{id}/plots/{plot}: one figure as SVG.
func (s *Server) plot(w http.ResponseWriter, r *http.Request) error {
	name, ok := strings.CutSuffix(r.PathValue("plot"), ".svg")
	if !ok {
		return probNotFound.new("no plot %q: plots are named <name>.svg", r.PathValue("plot"))
	}
	known := false
	for _, n := range plotNames {
		known = known || n == name
	}
	if !known {
		return probNotFound.new("no plot %q: want one of %s (with .svg)", name, strings.Join(plotNames, ", "))
	}
	rd, err := s.loadReport(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	svg, err := rd.render(name)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.Header().Set("Cache-Control", "no-store")
	_, err = w.Write(svg)
	return err
}

type figure struct {
	Name    string
	Caption string
	SVG     template.HTML // produced by gonum/plot, which escapes its text
	Href    string
}

type culpritRow struct {
	culpritDoc
	EntityText string
}

type reportPage struct {
	ID, Status, Scope, Signal  string
	Version                    uint64
	Window, Baseline           string
	Observed, BaselineP99, Thr string
	Requests, TailRequests     int64
	Method                     string
	Culprits                   []culpritRow
	Figures                    []figure
	Generated                  string
	IncidentJSON               string
}

var captions = map[string]string{
	"latency_cdf":    "Latency distribution before (baseline) and during the window.",
	"p99_signal":     "P99 per minute against the top culprit's signal on its entity; dashed verticals mark the window.",
	"contributions":  "Share of the window's tail each culprit explains (attributable fraction).",
	"counterfactual": "P99 had each cause been absent, against the observed and baseline P99.",
	"health":         "Posterior probability that each entity behaves like its healthy peers: the least healthy engines, GPUs and hosts of the scope.",
}

// report: GET /incidents/{id}/report: the HTML page with inline SVG figures.
func (s *Server) report(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	rd, err := s.loadReport(r.Context(), id)
	if err != nil {
		return err
	}
	d := rd.doc
	tmpl, err := template.New("report").Funcs(template.FuncMap{
		"ms":   func(v float64) string { return fmtMS(v) },
		"pct":  func(v float64) string { return fmt.Sprintf("%.0f%%", v*100) },
		"f2":   func(v float64) string { return fmt.Sprintf("%.2f", v) },
		"join": strings.Join,
	}).Parse(reportTemplateText)
	if err != nil {
		return fmt.Errorf("parse report template: %w", err)
	}
	page := reportPage{
		ID: id, Version: rd.version, Status: d.Status, Signal: d.SLO.Signal,
		Scope:    scopeText(d.SLO.Scope),
		Window:   ivText(d.Window),
		Baseline: ivText(d.Baseline),
		Observed: fmtMS(d.ObservedP99MS), BaselineP99: fmtMS(d.BaselineP99MS), Thr: against(d.SLO.ThresholdMS, d.BaselineP99MS),
		Requests: d.Requests, TailRequests: d.TailRequests,
		Method:       strings.TrimSpace(d.Method.Estimator + " " + d.Method.DAG + " " + d.Method.Version),
		Generated:    s.now().UTC().Format(time.RFC3339),
		IncidentJSON: "/v1/incidents/" + id,
	}
	for _, c := range d.Culprits {
		page.Culprits = append(page.Culprits, culpritRow{c, entityLabel(c.Entity)})
	}
	lq := linkQuery(r.URL.Query().Get("exp"), r.URL.Query().Get("sig"))
	for _, name := range plotNames {
		svg, err := rd.render(name)
		if err != nil {
			return err
		}
		page.Figures = append(page.Figures, figure{Name: name, Caption: captions[name], SVG: template.HTML(svg),
			Href: "/incidents/" + id + "/plots/" + name + ".svg" + lq})
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, page); err != nil {
		return fmt.Errorf("render report of incident %s: %w", id, err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	_, err = w.Write(buf.Bytes())
	return err
}

func fmtMS(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	return strconv.FormatFloat(math.Round(v), 'f', 0, 64) + " ms"
}

func ivText(iv interval) string {
	if iv.Start.IsZero() {
		return "n/a"
	}
	return iv.Start.UTC().Format("2006-01-02 15:04:05") + " – " + iv.End.UTC().Format("15:04:05 MST")
}

func scopeText(m map[string]string) string {
	if len(m) == 0 {
		return "fleet"
	}
	return entityLabel(m)
}

// against is what the title compares the observed P99 with: the SLO
// threshold, or the baseline P99 when the breach was declared against the
// baseline (no threshold).
func against(thresholdMS, baselineMS float64) string {
	if thresholdMS > 0 {
		return fmtMS(thresholdMS)
	}
	return "a baseline of " + fmtMS(baselineMS)
}
