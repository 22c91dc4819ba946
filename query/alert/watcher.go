package alert

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
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
// A scan lists the incidents updated within Lookback newest first, in
// pages of incidentPage bounded by a cursor (their newest update, then
// id), and reads the versions of those not yet handled at their newest
// version in pages of versionPage (cursor: id, version), so every version
// is seen however many there are, and the newest incidents first. (It
// used to read every version oldest first with LIMIT 10000: past 10,000
// versions the newest incidents never paged.)
//
// Enqueue's grouping makes re-deriving the same events harmless, so the
// watcher keeps no durable state; its memory of handled versions is a
// bounded cache (maxWatched incidents, the newest kept) that only saves
// queries.
type Watcher struct {
	d        *Dispatcher
	log      *slog.Logger
	now      func() time.Time
	every    time.Duration
	lookback time.Duration
	seen     map[string]uint64 // incident → newest version fully handled
	// page sizes of the listing and of the version reads (tests shrink them)
	incidentPage, versionPage int
}

// Status values of the incidents table that the watcher interprets.
const (
	incidentResolved = "resolved"
	incidentOK       = "ok"
)

// Bounds of one scan's queries and of the watcher's cache.
const (
	incidentPage = 1000
	versionPage  = 500 // versions carry their documents (up to 1 MiB each)
	maxWatched   = 100_000
)

// NewWatcher scans every `every` the incident versions updated within
// lookback.
func NewWatcher(d *Dispatcher, every, lookback time.Duration) *Watcher {
	return &Watcher{d: d, log: d.log, now: d.now, every: every, lookback: lookback, seen: map[string]uint64{},
		incidentPage: incidentPage, versionPage: versionPage}
}

// Run scans until ctx ends; scan failures are logged and retried, backing
// off (the scan interval doubling to the dispatcher's MaxBackoff) while
// they go on.
func (w *Watcher) Run(ctx context.Context) error {
	failures := 0
	for {
		wait := w.every
		if _, err := w.Scan(ctx); err != nil && ctx.Err() == nil {
			failures++
			for i := 1; i < failures && wait < time.Duration(w.d.cfg.MaxBackoff); i++ {
				wait *= 2
			}
			wait = min(wait, max(time.Duration(w.d.cfg.MaxBackoff), w.every))
			w.log.Warn("incident watch scan failed", "err", err, "failures", failures, "next_in", wait)
		} else {
			failures = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
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

// listed is one incident of a scan's listing: its newest version and
// update (seconds) within the lookback.
type listed struct {
	id      string
	version uint64
	updated uint32
}

// Scan derives and enqueues the events of recently updated incidents,
// newest first; it returns how many outbox rows were written.
func (w *Watcher) Scan(ctx context.Context) (int, error) {
	since := w.now().Add(-w.lookback)
	total := 0
	seen := make(map[string]uint64, len(w.seen))
	curU, curID := uint32(math.MaxUint32), ""
	for {
		page, err := w.listIncidents(ctx, since, curU, curID)
		if err != nil {
			return total, err
		}
		var todo []string
		want := map[string]uint64{}
		for _, in := range page {
			if v := w.seen[in.id]; v != 0 && v >= in.version {
				if len(seen) < maxWatched {
					seen[in.id] = v
				}
				continue
			}
			todo = append(todo, in.id)
			want[in.id] = in.version
		}
		n, handled, err := w.derive(ctx, todo)
		total += n
		for id, v := range handled {
			if v >= want[id] {
				w.seen[id] = v
				if len(seen) < maxWatched {
					seen[id] = v
				}
			}
		}
		if err != nil {
			return total, err
		}
		if len(page) < w.incidentPage {
			break
		}
		last := page[len(page)-1]
		curU, curID = last.updated, last.id
	}
	w.seen = seen // the incidents still within the lookback, newest first up to maxWatched
	return total, nil
}

// listIncidents returns a page of the incidents updated since, newest
// first, strictly after the cursor (updated, id) in that order.
func (w *Watcher) listIncidents(ctx context.Context, since time.Time, curU uint32, curID string) ([]listed, error) {
	return w.d.db.listIncidents(ctx, since, curU, curID, w.incidentPage)
}

// derive reads every version of the given incidents in (incident, version)
// order, a page at a time, and enqueues their events. It returns the
// outbox rows written and, per incident whose versions were all handled,
// the newest version.
func (w *Watcher) derive(ctx context.Context, ids []string) (int, map[string]uint64, error) {
	handled := map[string]uint64{}
	if len(ids) == 0 {
		return 0, handled, nil
	}
	total := 0
	var prevID, prevTop string
	opened, resolved := false, false
	curID, curV := "", uint64(0)
	for {
		vs, err := w.versions(ctx, ids, curID, curV)
		if err != nil {
			return total, handled, err
		}
		for _, v := range vs {
			if v.id != prevID {
				prevID, prevTop, opened, resolved = v.id, "", false, false
			}
			handled[v.id] = v.version
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
				delete(handled, v.id)
				return total, handled, err
			}
			total += n
		}
		if len(vs) < w.versionPage {
			return total, handled, nil
		}
		last := vs[len(vs)-1]
		curID, curV = last.id, last.version
	}
}

// versions returns a page of the versions of ids after the cursor (id,
// version), in that order.
func (w *Watcher) versions(ctx context.Context, ids []string, curID string, curV uint64) ([]incidentVersion, error) {
	return w.d.db.incidentVersions(ctx, ids, curID, curV, w.versionPage)
}
