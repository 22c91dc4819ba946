package alert

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"
)

// Watcher turns the incidents table (written by the causal stage, one row
// per incident version) into events for a Dispatcher, so `tailcause query`
// pages without the causal stage calling it. For each incident, in version
// order, over the versions updated within Lookback:
//
//   - a version with status resolved (or a resolved_at) → resolved;
//   - the first firing version seen → opened;
//   - a firing version whose top culprit (cause, entity) differs from the
//     previous version's → top_culprit_changed.
//
// Enqueue's grouping makes re-deriving the same events harmless, so the
// watcher keeps no durable state; its memory of handled versions is a
// bounded cache that only saves queries.
type Watcher struct {
	d        *Dispatcher
	log      *slog.Logger
	now      func() time.Time
	every    time.Duration
	lookback time.Duration
	seen     map[string]uint64 // incident → newest version fully handled
}

// Status values of the incidents table that the watcher interprets.
const (
	incidentResolved = "resolved"
	incidentOK       = "ok"
)

// maxWatched bounds the watcher's cache and one scan.
const maxWatched = 10000

// NewWatcher scans every `every` the incident versions updated within
// lookback.
func NewWatcher(d *Dispatcher, every, lookback time.Duration) *Watcher {
	return &Watcher{d: d, log: d.log, now: d.now, every: every, lookback: lookback, seen: map[string]uint64{}}
}

// Run scans until ctx ends; scan failures are logged and retried.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		if _, err := w.Scan(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("incident watch scan failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

type incidentVersion struct {
	id       string
	version  uint64
	status   string
	resolved uint8
	payload  string
}

// Scan derives and enqueues the events of recently updated incidents; it
// returns how many outbox rows were written.
func (w *Watcher) Scan(ctx context.Context) (int, error) {
	since := w.now().Add(-w.lookback).Unix()
	rows, err := w.d.db.Conn().Query(ctx, `SELECT incident_id, version, status, toUInt32(resolved_at) > 0, payload
FROM incidents
WHERE incident_id IN (SELECT incident_id FROM incidents WHERE updated_at >= toDateTime(?))
ORDER BY incident_id, version
LIMIT ?`, since, maxWatched)
	if err != nil {
		return 0, fmt.Errorf("scan incidents for alerts: %w", err)
	}
	var vs []incidentVersion
	for rows.Next() {
		var v incidentVersion
		if err := rows.Scan(&v.id, &v.version, &v.status, &v.resolved, &v.payload); err != nil {
			rows.Close()
			return 0, fmt.Errorf("scan incident version: %w", err)
		}
		vs = append(vs, v)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return 0, fmt.Errorf("read incidents for alerts: %w", err)
	}
	total := 0
	var prevID, prevTop string
	opened, resolved := false, false
	for _, v := range vs {
		if v.id != prevID {
			prevID, prevTop, opened, resolved = v.id, "", false, false
		}
		var doc incident
		if json.Unmarshal([]byte(v.payload), &doc) != nil {
			continue // not a v1 document: nothing to send
		}
		top := doc.topKey()
		var kind EventKind
		switch {
		case v.status == incidentResolved || v.resolved != 0:
			if !resolved {
				kind, resolved = EventResolved, true
			}
		case v.status == incidentOK:
		case !opened:
			kind, opened = EventOpened, true
		case top != prevTop:
			kind = EventTopCulpritChanged
		}
		prevTop = top
		if kind == "" || w.seen[v.id] >= v.version && w.seen[v.id] != 0 {
			continue
		}
		n, err := w.d.Enqueue(ctx, Event{IncidentID: v.id, Version: v.version, Kind: kind, Payload: []byte(v.payload)})
		if err != nil {
			return total, err
		}
		total += n
		if len(w.seen) >= maxWatched {
			clear(w.seen)
		}
		w.seen[v.id] = v.version
	}
	return total, nil
}
