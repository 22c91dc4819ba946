package causal

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"
)

// SweepRequest is the fleet-wide question "why was the tail bad in this
// window, and where?": no scope is given; the sweep finds every scope and
// entity whose tail broke.
type SweepRequest struct {
	// SLO: Signal, Quantile and ThresholdMS as for Request. Scope, when
	// set, restricts the sweep to the requests it selects (every scope and
	// entity found inside it).
	SLO      SLO
	Window   Interval
	Baseline *Interval
}

// Breach levels, as Where.Level reports them.
const (
	LevelScope  = "scope"
	LevelEngine = "engine"
	LevelHost   = "host"
)

// Where says where a breach was found: its scope's P99 (LevelScope), or
// one entity far worse than its peers in the scope (LevelEngine,
// LevelHost). An extra field of v1 ("breach").
type Where struct {
	Level  string `json:"level"`
	Entity Entity `json:"entity"`
	// Window tail requests of the entity (or scope) above the scope's tail
	// threshold, out of Requests; PeerTailRate is the peers' rate.
	Requests     int64   `json:"requests"`
	TailRequests int64   `json:"tail_requests"`
	PeerTailRate float64 `json:"peer_tail_rate"`
	// PValue is the one-sided p-value of the entity's tail count against
	// its peers' rate, before the multiplicity correction.
	PValue float64 `json:"p_value,omitempty"`
	// ExcessTail is the tail requests above what the peers' rate (or the
	// baseline) predicts: the severity the sweep orders breaches by.
	ExcessTail float64 `json:"excess_tail"`
}

// SweepResult is the outcome of Sweep.
type SweepResult struct {
	// Breaches are the firing analyses, most severe first.
	Breaches []*Analysis
	// Scopes are the scopes examined, in the order examined.
	Scopes []map[string]string
	// Notes are remarks about the sweep itself.
	Notes []string
	// Queries counts the SQL queries sent; QueryTime their total latency.
	Queries   int
	QueryTime time.Duration
}

// Sweep answers the fleet-wide question: every model scope is examined for
// a breach of its own quantile, and every engine and host of it against
// its peers; each breach is attributed within its scope. A window with no
// breach anywhere gives an empty Breaches.
func (a *Analyzer) Sweep(ctx context.Context, req SweepRequest) (*SweepResult, error) {
	if !req.Window.End.After(req.Window.Start) {
		return nil, fmt.Errorf("sweep: invalid request: window %s is empty", fmtInterval(req.Window))
	}
	scopes, err := a.discoverScopes(ctx, req)
	if err != nil {
		return nil, err
	}
	res := &SweepResult{}
	for _, sc := range scopes {
		r := Request{SLO: req.SLO, Window: req.Window, Baseline: req.Baseline}
		r.SLO.Scope = sc
		an, err := a.Analyze(ctx, r)
		if err != nil {
			return nil, fmt.Errorf("sweep %s: %w", ScopeString(sc), err)
		}
		res.Scopes = append(res.Scopes, sc)
		res.Queries += an.Queries
		res.QueryTime += an.QueryTime
		if an.Incident.Status == StatusFiring {
			res.Breaches = append(res.Breaches, an)
		}
	}
	sort.SliceStable(res.Breaches, func(i, j int) bool { return severity(res.Breaches[i]) > severity(res.Breaches[j]) })
	return res, nil
}

// severity orders breaches: the excess tail requests of the breach.
func severity(an *Analysis) float64 {
	if w := an.Incident.Breach; w != nil {
		return w.ExcessTail
	}
	return float64(an.Incident.TailRequests) - 0.01*float64(an.Incident.Requests)
}

// discoverScopes lists the model scopes with requests in the window.
func (a *Analyzer) discoverScopes(ctx context.Context, req SweepRequest) ([]map[string]string, error) {
	conds := ""
	for _, k := range sortedKeys(req.SLO.Scope) {
		conds += " AND " + k + " = " + QuoteString(req.SLO.Scope[k])
	}
	q := fmt.Sprintf("SELECT toString(model) AS m, toFloat64(count()) FROM %s FINAL WHERE %s AND %s%s GROUP BY m ORDER BY m",
		a.cfg.Table, prune(req.Window), inInterval(req.Window), conds)
	var out []map[string]string
	err := queryRows(ctx, a.db, "scopes", q, func(rows Rows) error {
		var m string
		var n float64
		if err := rows.Scan(&m, &n); err != nil {
			return err
		}
		sc := map[string]string{}
		for k, v := range req.SLO.Scope {
			sc[k] = v
		}
		sc["model"] = m
		out = append(out, sc)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sweep: discover scopes: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("sweep: no requests in the window")
	}
	return out, nil
}
