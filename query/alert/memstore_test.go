package alert

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// memStore is the in-memory Store: the tables as appended rows, each
// question answered by the rule its Store method states. It passes the
// conformance suite (store_test.go) that the ClickHouse store passes.
type memStore struct {
	now func() time.Time // the store's clock: claimed_ns and a claim's liveness

	mu        sync.Mutex
	outbox    []memOutbox
	attempts  []memAttempt
	claims    []memClaim
	incidents []memIncident
}

type memOutbox struct {
	deliveryID, receiver, incidentID string
	version                          uint64
	event                            EventKind
	payload                          []byte
	createdNs                        uint64
	createdAt                        time.Time
}

type memAttempt struct {
	deliveryID, receiver string
	attempt              uint32
	state                string
	attemptedNs          uint64
	attemptedAt          time.Time
	nextNs               uint64
}

type memClaim struct {
	key       claimKey
	claimID   string
	leaseNs   uint64
	claimedNs uint64
}

// memIncident is a row of the incidents table (written by the causal
// stage; the tests add them with addIncident).
type memIncident struct {
	id       string
	version  uint64
	status   string
	updated  time.Time
	resolved time.Time
	payload  string
}

func newMemStore() *memStore { return &memStore{now: time.Now} }

func (m *memStore) addIncident(in memIncident) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.incidents = append(m.incidents, in)
}

func (m *memStore) insertOutbox(_ context.Context, rows [][]any) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rows {
		m.outbox = append(m.outbox, memOutbox{
			deliveryID: r[0].(string), receiver: r[1].(string), incidentID: r[2].(string), version: r[3].(uint64),
			event: EventKind(r[4].(string)), payload: []byte(r[5].(string)), createdNs: r[6].(uint64), createdAt: r[7].(time.Time),
		})
	}
	return nil
}

func (m *memStore) insertAttempts(_ context.Context, rows [][]any) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rows {
		m.attempts = append(m.attempts, memAttempt{
			deliveryID: r[0].(string), receiver: r[1].(string), attempt: r[2].(uint32), state: r[3].(string),
			attemptedNs: r[7].(uint64), attemptedAt: r[8].(time.Time), nextNs: r[9].(uint64),
		})
	}
	return nil
}

func (m *memStore) insertClaims(_ context.Context, rows [][]any) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	at := uint64(m.now().UnixNano())
	for _, r := range rows {
		m.claims = append(m.claims, memClaim{
			key: claimKey{r[0].(string), r[1].(string), r[2].(uint32)}, claimID: r[3].(string), leaseNs: r[4].(uint64), claimedNs: at,
		})
	}
	return nil
}

func (m *memStore) outboxReceivers(_ context.Context, deliveryID string) (map[string]bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]bool{}
	for _, o := range m.outbox {
		if o.deliveryID == deliveryID {
			out[o.receiver] = true
		}
	}
	return out, nil
}

func (m *memStore) eventCount(_ context.Context, incidentID string, kind EventKind) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n uint64
	for _, o := range m.outbox {
		if o.incidentID == incidentID && o.event == kind {
			n++
		}
	}
	return n, nil
}

func (m *memStore) lastEvent(_ context.Context, incidentID string, version uint64) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var best *memOutbox
	for i, o := range m.outbox {
		if o.incidentID != incidentID || o.version > version {
			continue
		}
		if best == nil || o.version > best.version || o.version == best.version && o.createdNs > best.createdNs {
			best = &m.outbox[i]
		}
	}
	if best == nil {
		return nil, false, nil
	}
	return bytes.Clone(best.payload), true, nil
}

func (m *memStore) due(_ context.Context, now, since time.Time, limit int) ([]pending, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := since.Truncate(time.Second)
	type pair struct{ d, r string }
	byPair := map[pair]*pending{}
	var order []pair
	for _, o := range m.outbox {
		if o.createdAt.Before(s) {
			continue
		}
		k := pair{o.deliveryID, o.receiver}
		if p, ok := byPair[k]; ok {
			p.createdNs = min(p.createdNs, o.createdNs)
			continue
		}
		byPair[k] = &pending{deliveryID: o.deliveryID, receiver: o.receiver, incidentID: o.incidentID, version: o.version, event: o.event, createdNs: o.createdNs}
		order = append(order, k)
	}
	type newest struct {
		ns, next uint64
		state    string
	}
	last := map[pair]newest{}
	for _, a := range m.attempts {
		if a.attemptedAt.Before(s) {
			continue
		}
		k := pair{a.deliveryID, a.receiver}
		if p := byPair[k]; p != nil {
			p.attempts = max(p.attempts, uint64(a.attempt))
		}
		if n, ok := last[k]; !ok || a.attemptedNs >= n.ns {
			last[k] = newest{a.attemptedNs, a.nextNs, a.state}
		}
	}
	var out []pending
	for _, k := range order {
		n := last[k]
		if n.state == StateDelivered || n.state == StateFailed || n.next > uint64(now.UnixNano()) {
			continue
		}
		out = append(out, *byPair[k])
	}
	slices.SortFunc(out, func(a, b pending) int {
		return cmp.Or(cmp.Compare(a.createdNs, b.createdNs), cmp.Compare(a.deliveryID, b.deliveryID), cmp.Compare(a.receiver, b.receiver))
	})
	return out[:min(len(out), limit)], nil
}

func (m *memStore) payloads(_ context.Context, ids []string) (map[string][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]byte{}
	for _, o := range m.outbox {
		if _, ok := out[o.deliveryID]; !ok && slices.Contains(ids, o.deliveryID) {
			out[o.deliveryID] = bytes.Clone(o.payload)
		}
	}
	return out, nil
}

func (m *memStore) lastAttempts(_ context.Context, ids []string) (map[claimKey]uint32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[claimKey]uint32{}
	for _, a := range m.attempts {
		if slices.Contains(ids, a.deliveryID) {
			k := claimKey{a.deliveryID, a.receiver, 0}
			out[k] = max(out[k], a.attempt)
		}
	}
	return out, nil
}

func (m *memStore) firstLiveClaims(_ context.Context, ids []string) (map[claimKey]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	type claimOf struct {
		key claimKey
		id  string
	}
	type agg struct {
		first, minLease, maxLease uint64
	}
	byClaim := map[claimOf]*agg{}
	for _, c := range m.claims {
		if !slices.Contains(ids, c.key.deliveryID) {
			continue
		}
		k := claimOf{c.key, c.claimID}
		if a, ok := byClaim[k]; ok {
			a.first, a.minLease, a.maxLease = min(a.first, c.claimedNs), min(a.minLease, c.leaseNs), max(a.maxLease, c.leaseNs)
		} else {
			byClaim[k] = &agg{c.claimedNs, c.leaseNs, c.leaseNs}
		}
	}
	now := uint64(m.now().UnixNano())
	type best struct {
		first uint64
		id    string
	}
	winners := map[claimKey]best{}
	for k, a := range byClaim {
		if a.minLease == 0 || a.first+a.maxLease <= now {
			continue
		}
		if b, ok := winners[k.key]; !ok || a.first < b.first || a.first == b.first && k.id < b.id {
			winners[k.key] = best{a.first, k.id}
		}
	}
	out := make(map[claimKey]string, len(winners))
	for k, b := range winners {
		out[k] = b.id
	}
	return out, nil
}

func (m *memStore) listIncidents(_ context.Context, since time.Time, curU uint32, curID string, limit int) ([]listed, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := since.Truncate(time.Second)
	byID := map[string]*listed{}
	for _, in := range m.incidents {
		if in.updated.Before(s) {
			continue
		}
		u := uint32(in.updated.Unix())
		if l, ok := byID[in.id]; ok {
			l.version, l.updated = max(l.version, in.version), max(l.updated, u)
		} else {
			byID[in.id] = &listed{id: in.id, version: in.version, updated: u}
		}
	}
	var out []listed
	for _, l := range byID {
		if l.updated < curU || l.updated == curU && l.id < curID {
			out = append(out, *l)
		}
	}
	slices.SortFunc(out, func(a, b listed) int {
		return cmp.Or(cmp.Compare(b.updated, a.updated), cmp.Compare(b.id, a.id))
	})
	return out[:min(len(out), limit)], nil
}

func (m *memStore) incidentVersions(_ context.Context, ids []string, curID string, curV uint64, limit int) ([]incidentVersion, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []incidentVersion
	for _, in := range m.incidents {
		if !slices.Contains(ids, in.id) || in.id < curID || in.id == curID && in.version <= curV {
			continue
		}
		v := incidentVersion{id: in.id, version: in.version, status: in.status, payload: in.payload}
		if in.resolved.Unix() > 0 {
			v.resolved = 1
		}
		out = append(out, v)
	}
	slices.SortStableFunc(out, func(a, b incidentVersion) int {
		return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.version, b.version))
	})
	return out[:min(len(out), limit)], nil
}
