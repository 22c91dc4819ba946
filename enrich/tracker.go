package enrich

import "sort"

// offsetTracker knows, per partition, which fetched records are complete
// and so how far the consumer group may commit: up to the end of the
// longest prefix of complete records. Records complete out of order.
type offsetTracker struct {
	parts map[int]*partTrack
}

type partTrack struct {
	open      map[int64]bool // fetched, not complete
	next      int64          // one past the highest fetched offset
	committed int64          // last offset handed to commit (-1 none)
}

func newOffsetTracker() *offsetTracker { return &offsetTracker{parts: map[int]*partTrack{}} }

// fetched registers a record. A rewind (the group handed the partition back
// from an earlier offset after a rebalance) resets the partition.
func (t *offsetTracker) fetched(part int, off int64) {
	p := t.parts[part]
	if p == nil || (off < p.next && !p.open[off]) {
		p = &partTrack{open: map[int64]bool{}, committed: -1}
		t.parts[part] = p
	}
	p.open[off] = true
	if off+1 > p.next {
		p.next = off + 1
	}
}

// complete marks a record done.
func (t *offsetTracker) complete(part int, off int64) {
	if p := t.parts[part]; p != nil {
		delete(p.open, off)
	}
}

// committable returns, per partition with progress, the highest offset
// whose predecessors are all complete, and remembers it as committed.
func (t *offsetTracker) committable() map[int]int64 {
	out := map[int]int64{}
	parts := make([]int, 0, len(t.parts))
	for k := range t.parts {
		parts = append(parts, k)
	}
	sort.Ints(parts)
	for _, k := range parts {
		p := t.parts[k]
		upto := p.next - 1
		for off := range p.open {
			if off-1 < upto {
				upto = off - 1
			}
		}
		if upto > p.committed {
			p.committed = upto
			out[k] = upto
		}
	}
	return out
}

// openCount is the number of records fetched and not complete.
func (t *offsetTracker) openCount() int {
	n := 0
	for _, p := range t.parts {
		n += len(p.open)
	}
	return n
}
