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
	mu      sync.Mutex
	max     int
	series  map[seriesKey]*counterEntry
	head    *counterEntry // most recently observed
	tail    *counterEntry // least recently observed
	evicted uint64
}

type seriesKey struct {
	family    Family
	metric    Metric
	model     string
	placement Placement
}

type counterEntry struct {
	key        seriesKey
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
	return &Counters{max: maxSeries, series: make(map[seriesKey]*counterEntry)}
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
	key := seriesKey{family: s.Family, metric: s.Metric, model: s.Model, placement: s.Placement}
	c.mu.Lock()
	defer c.mu.Unlock()

	e, found := c.series[key]
	if !found {
		if len(c.series) >= c.max {
			c.evictOldest()
		}
		e = &counterEntry{key: key, timeNs: s.TimeNs, startNs: s.StartNs, value: s.Value}
		c.series[key] = e
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
	return len(c.series)
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
	delete(c.series, e.key)
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
