package alert

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// entityText is "host=node-3 gpu=GPU-…" in a fixed key order.
func entityText(e map[string]string) string {
	var parts []string
	for _, k := range []string{"model", "service", "host", "pod", "engine", "gpu"} {
		if v := e[k]; v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	if len(parts) == 0 {
		return "the fleet"
	}
	return strings.Join(parts, " ")
}

// genericBody is the v1 document with event, delivery_id, incident_version
// and report_url added in front; the document's own fields are kept byte
// for byte.
func genericBody(ev Event, reportURL string) ([]byte, error) {
	doc := bytes.TrimSpace(ev.Payload)
	if len(doc) < 2 || doc[0] != '{' {
		return nil, fmt.Errorf("build generic body of %s: payload is not a JSON object", ev.DeliveryID())
	}
	head, err := json.Marshal(struct {
		Event     EventKind `json:"event"`
		Delivery  string    `json:"delivery_id"`
		Version   uint64    `json:"incident_version"`
		ReportURL string    `json:"report_url"`
	}{ev.Kind, ev.DeliveryID(), ev.Version, reportURL})
	if err != nil {
		return nil, fmt.Errorf("build generic body of %s: %w", ev.DeliveryID(), err)
	}
	rest := bytes.TrimSpace(doc[1:])
	var b bytes.Buffer
	b.Write(head[:len(head)-1]) // without its closing brace
	if len(rest) > 0 && rest[0] != '}' {
		b.WriteByte(',')
	}
	b.Write(rest)
	return b.Bytes(), nil
}

// slackEscape escapes the three characters Slack's mrkdwn reserves.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func ms(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.0f ms", v)
}

var eventTitles = map[EventKind]string{
	EventOpened:            "incident opened",
	EventTopCulpritChanged: "top culprit changed",
	EventResolved:          "incident resolved",
}

// maxSlackCulprits bounds the culprits listed in a message.
const maxSlackCulprits = 5

// slackBody is a Slack incoming-webhook message: a fallback text and blocks
// with the ranked culprits and the report link.
func slackBody(ev Event, reportURL string) ([]byte, error) {
	var in incident
	if err := json.Unmarshal(ev.Payload, &in); err != nil {
		return nil, fmt.Errorf("build slack body of %s: %w", ev.DeliveryID(), err)
	}
	scope := "the fleet"
	if len(in.SLO.Scope) > 0 {
		scope = entityText(in.SLO.Scope)
	}
	title := "tailcause: " + eventTitles[ev.Kind]
	summary := fmt.Sprintf("*%s* (version %d) · scope `%s` · %s P99 *%s* against %s (baseline %s) · window %s – %s",
		slackEscape(ev.IncidentID), ev.Version, slackEscape(scope), slackEscape(in.SLO.Signal),
		ms(in.ObservedP99MS), ms(in.SLO.ThresholdMS), ms(in.BaselineP99MS), slackEscape(in.Window.Start), slackEscape(in.Window.End))
	text := fmt.Sprintf("[tailcause] %s: %s, P99 %s against %s", eventTitles[ev.Kind], ev.IncidentID, ms(in.ObservedP99MS), ms(in.SLO.ThresholdMS))
	var list strings.Builder
	list.WriteString("*Ranked culprits*\n")
	for i, c := range in.Culprits {
		if i == maxSlackCulprits {
			fmt.Fprintf(&list, "… and %d more in the report\n", len(in.Culprits)-i)
			break
		}
		fmt.Fprintf(&list, "%d. `%s` on %s: %.0f%% of the tail, effect +%s, P99 without it %s, health %.2f\n",
			c.Rank, slackEscape(c.Cause), slackEscape(entityText(c.Entity)), 100*c.AttributableFraction, ms(c.EffectMS), ms(c.CounterfactualP99MS), c.Health)
	}
	if len(in.Culprits) == 0 {
		list.WriteString("none: the tail is within its objective\n")
	} else {
		top := in.Culprits[0]
		text += fmt.Sprintf("; top culprit %s on %s (%.0f%%)", top.Cause, entityText(top.Entity), 100*top.AttributableFraction)
	}
	type textObj struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	type block struct {
		Type     string    `json:"type"`
		Text     *textObj  `json:"text,omitempty"`
		Elements []textObj `json:"elements,omitempty"`
	}
	blocks := []block{
		{Type: "header", Text: &textObj{"plain_text", title}},
		{Type: "section", Text: &textObj{"mrkdwn", truncate(summary, 2900)}},
		{Type: "section", Text: &textObj{"mrkdwn", truncate(list.String(), 2900)}},
	}
	if reportURL != "" {
		text += " " + reportURL
		link := slackEscape(reportURL)
		if strings.HasPrefix(reportURL, "http://") || strings.HasPrefix(reportURL, "https://") {
			link = "<" + strings.ReplaceAll(reportURL, "|", "%7C") + "|Open the incident report>"
		}
		blocks = append(blocks, block{Type: "context", Elements: []textObj{{"mrkdwn", link}}})
	}
	b, err := json.Marshal(struct {
		Text   string  `json:"text"`
		Blocks []block `json:"blocks"`
	}{text, blocks})
	if err != nil {
		return nil, fmt.Errorf("build slack body of %s: %w", ev.DeliveryID(), err)
	}
	return b, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// body builds the request body of ev for a receiver format.
func body(format string, ev Event, reportURL string) ([]byte, error) {
	if format == FormatSlack {
		return slackBody(ev, reportURL)
	}
	return genericBody(ev, reportURL)
}
