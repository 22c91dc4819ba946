package normalize

import (
	"math"
	"sync"
)

// DefaultMaxSeries is the series bound of a Counters made with maxSeries <= 0.
const DefaultMaxSeries = 100_000

// Counters turns Cumulative samples into per-series deltas and rates. A
// series is family + metric + model + placement. It is bounded: past
// maxSeries series, the least recently observed one is forgotten (its next
// sample counts as a first sample again). It is safe for concurrent use.
//
// Counter resets are handled as Prometheus does: when the value decreases,
// or the series start time changes, the counter restarted and its new value
// is the increase since the reset.
type Counters struct {
	mu  sync.Mutex
	max int
	n   int // series tracked
	// The series by placement, then by family, metric and model: a
	// record's samples share their placement (a scrape's resource, a GPU's
	// labels), so the placement — seven strings to hash — is looked up
	// once for a run of them (last), the rest by a key of three.
	byPlace map[Placement]*placementSeries
	last    *placementSeries // the previous Observe's; nil when evicted
	head    *counterEntry    // most recently observed
	tail    *counterEntry    // least recently observed
	evicted uint64
}

// placementSeries are the series of one placement.
type placementSeries struct {
	placement Placement
	series    map[counterKey]*counterEntry
}

type counterKey struct {
	family Family
	metric Metric
	model  string
}

type counterEntry struct {
	key        counterKey
	group      *placementSeries
	timeNs     uint64
	startNs    uint64
	value      float64
	prev, next *counterEntry
}

// NewCounters returns a tracker of at most maxSeries series;
// maxSeries <= 0 means DefaultMaxSeries.
func NewCounters(maxSeries int) *Counters {
	if maxSeries <= 0 {
		maxSeries = DefaultMaxSeries
	}
	return &Counters{max: maxSeries, byPlace: make(map[Placement]*placementSeries)}
}

// Observe records a Cumulative sample and returns the increase since the
// series' previous sample and that increase per second. ok is false, and
// nothing is returned, for a Gauge sample, for the first sample of a series,
// for a sample not newer than the last one seen (out of order or
// duplicate; it is dropped), and for a negative, NaN or infinite value
// (no counter holds one; the sample is dropped).
func (c *Counters) Observe(s Sample) (delta, ratePerSec float64, ok bool) {
	if s.Kind != Cumulative || !(s.Value >= 0) || math.IsInf(s.Value, 0) {
		return 0, 0, false
	}
	key := counterKey{family: s.Family, metric: s.Metric, model: s.Model}
	c.mu.Lock()
	defer c.mu.Unlock()

	g := c.last
	if g == nil || g.placement != s.Placement {
		if g = c.byPlace[s.Placement]; g == nil {
			g = &placementSeries{placement: s.Placement, series: make(map[counterKey]*counterEntry, 8)}
			c.byPlace[s.Placement] = g
		}
		c.last = g
	}
	e, found := g.series[key]
	if !found {
		if c.n >= c.max {
			c.evictOldest()
			if len(g.series) == 0 { // its only series was the oldest
				c.byPlace[s.Placement], c.last = g, g
			}
		}
		e = &counterEntry{key: key, group: g, timeNs: s.TimeNs, startNs: s.StartNs, value: s.Value}
		g.series[key] = e
		c.n++
		c.pushFront(e)
		return 0, 0, false
	}
	c.moveToFront(e)
	if s.TimeNs <= e.timeNs {
		return 0, 0, false
	}

	from := e.timeNs
	reset := s.Value < e.value ||
		(s.StartNs != 0 && e.startNs != 0 && s.StartNs != e.startNs)
	if reset {
		delta = s.Value
		// The new value accrued since the restart, when the start says when.
		if s.StartNs > from && s.StartNs < s.TimeNs {
			from = s.StartNs
		}
	} else {
		delta = s.Value - e.value
	}
	ratePerSec = delta / (float64(s.TimeNs-from) / 1e9)

	e.timeNs, e.value = s.TimeNs, s.Value
	if s.StartNs != 0 {
		e.startNs = s.StartNs
	}
	return delta, ratePerSec, true
}

// Len returns the number of series tracked.
func (c *Counters) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Evicted returns how many series were forgotten to respect the bound.
func (c *Counters) Evicted() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.evicted
}

func (c *Counters) evictOldest() {
	e := c.tail
	if e == nil {
		return
	}
	c.unlink(e)
	g := e.group
	delete(g.series, e.key)
	if len(g.series) == 0 {
		delete(c.byPlace, g.placement)
		if c.last == g {
			c.last = nil
		}
	}
	c.n--
	c.evicted++
}

func (c *Counters) pushFront(e *counterEntry) {
	e.prev, e.next = nil, c.head
	if c.head != nil {
		c.head.prev = e
	}
	c.head = e
	if c.tail == nil {
		c.tail = e
	}
}

func (c *Counters) unlink(e *counterEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (c *Counters) moveToFront(e *counterEntry) {
	if c.head == e {
		return
	}
	c.unlink(e)
	c.pushFront(e)
}
