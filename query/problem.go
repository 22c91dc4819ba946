package query

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// problemTypePrefix makes the RFC 9457 "type" URIs: stable identifiers that
// need not resolve (RFC 9457 §3.1.1).
const problemTypePrefix = "urn:tailcause:problem:"

// Problem is an RFC 9457 problem detail, the body of every error response
// (Content-Type application/problem+json).
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance,omitempty"`
}

// Error lets a Problem travel as an error from handlers to the writer.
func (p *Problem) Error() string { return fmt.Sprintf("%d %s: %s", p.Status, p.Title, p.Detail) }

// problem kinds: slug, title and status.
var (
	probBadParam     = problemKind{"invalid-parameter", "Invalid parameter", http.StatusBadRequest}
	probRange        = problemKind{"invalid-time-range", "Invalid time range", http.StatusBadRequest}
	probUnauthorized = problemKind{"unauthorized", "Unauthorized", http.StatusUnauthorized}
	probNotFound     = problemKind{"not-found", "Not found", http.StatusNotFound}
	probMethod       = problemKind{"method-not-allowed", "Method not allowed", http.StatusMethodNotAllowed}
	probUnavailable  = problemKind{"store-unavailable", "Store unavailable", http.StatusServiceUnavailable}
	probTimeout      = problemKind{"query-timeout", "Query timed out", http.StatusGatewayTimeout}
	probInternal     = problemKind{"internal", "Internal error", http.StatusInternalServerError}
)

type problemKind struct {
	slug   string
	title  string
	status int
}

func (k problemKind) new(format string, args ...any) *Problem {
	return &Problem{Type: problemTypePrefix + k.slug, Title: k.title, Status: k.status, Detail: fmt.Sprintf(format, args...)}
}

// writeProblem writes err as a problem; errors that are not a *Problem are
// internal (their text is logged by the caller, not sent).
func writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	var p *Problem
	if !errors.As(err, &p) {
		p = probInternal.new("the server could not answer this request; see its log")
	}
	out := *p
	out.Instance = r.URL.Path
	if out.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tailcause"`)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(out.Status)
	_ = json.NewEncoder(w).Encode(out)
}
