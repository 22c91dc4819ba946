package join

import (
	"math"
	"sort"
)

// series is one metric's samples in event-time order. Gauges store levels;
// counters store deltas, each covering (previous point's time, t]; a
// counter's first point is stored with a zero delta to open the interval.
type series struct {
	t []uint64
	v []float64
}

// add inserts a point, keeping time order; a point with an existing
// timestamp replaces nothing (duplicate deliveries are ignored).
func (s *series) add(t uint64, v float64) bool {
	n := len(s.t)
	if n == 0 || t > s.t[n-1] {
		s.t = append(s.t, t)
		s.v = append(s.v, v)
		return true
	}
	i := sort.Search(n, func(i int) bool { return s.t[i] >= t })
	if i < n && s.t[i] == t {
		return false
	}
	s.t = append(s.t, 0)
	s.v = append(s.v, 0)
	copy(s.t[i+1:], s.t[i:])
	copy(s.v[i+1:], s.v[i:])
	s.t[i], s.v[i] = t, v
	return true
}

// trim drops points older than cutoff, keeping the last one before it so
// that as-of lookups at the cutoff still find their level.
func (s *series) trim(cutoff uint64) {
	if len(s.t) < 2 || s.t[1] >= cutoff {
		return // the search below would find i <= 1: most series, on most calls
	}
	i := sort.Search(len(s.t), func(i int) bool { return s.t[i] >= cutoff })
	if i <= 1 {
		return
	}
	k := i - 1
	s.t = append(s.t[:0], s.t[k:]...)
	s.v = append(s.v[:0], s.v[k:]...)
}

// due is the earliest cutoff at which trim or eviction could change the
// series: its second point's time, or its newest's (hostState.due).
func (s *series) due() uint64 {
	d := s.last()
	if len(s.t) >= 2 {
		d = min(d, s.t[1])
	}
	return d
}

func (s *series) last() uint64 {
	if len(s.t) == 0 {
		return 0
	}
	return s.t[len(s.t)-1]
}

// asOf is the level at t: the latest point at or before t, with its age in
// ms. ok is false when there is none or it is older than maxAgeNs.
func (s *series) asOf(t, maxAgeNs uint64) (v, ageMs float64, ok bool) {
	i := sort.Search(len(s.t), func(i int) bool { return s.t[i] > t }) - 1
	if i < 0 || t-s.t[i] > maxAgeNs {
		return math.NaN(), math.NaN(), false
	}
	return s.v[i], float64(t-s.t[i]) / 1e6, true
}

// window visits the level holding at a (as-of, within maxAge) and every
// point in (a, b]. It returns the age in ms of the data describing the
// window's start (as for asOf; for a window with no as-of point, the
// distance from a to the first point inside) and whether anything was seen.
func (s *series) window(a, b, maxAgeNs uint64, visit func(v float64)) (ageMs float64, ok bool) {
	return s.windowAt(a, b, maxAgeNs, func(_ uint64, v float64) { visit(v) })
}

// windowAt is window visiting each point's time too.
func (s *series) windowAt(a, b, maxAgeNs uint64, visit func(t uint64, v float64)) (ageMs float64, ok bool) {
	i := sort.Search(len(s.t), func(i int) bool { return s.t[i] > a }) - 1
	ageMs = math.NaN()
	if i >= 0 && a-s.t[i] <= maxAgeNs {
		visit(s.t[i], s.v[i])
		ageMs = float64(a-s.t[i]) / 1e6
		ok = true
	}
	for j := i + 1; j < len(s.t) && s.t[j] <= b; j++ {
		if !ok {
			ageMs = float64(s.t[j]-a) / 1e6
		}
		visit(s.t[j], s.v[j])
		ok = true
	}
	return ageMs, ok
}

// overlap apportions counter deltas to the lifetime [a, b]: each interval
// (t[k-1], t[k]] contributes its delta times the fraction of the interval
// that lies inside [a, b] (the counter is taken as linear within an
// interval), so a burst in an interval that straddles the request's end
// is given to the request only in the share of the interval it ran
// through. It returns the apportioned sum, the covered part of the lifetime
// in seconds (so sum/coveredS is the mean rate over the lifetime), and the
// age in ms: how far the covering data falls short of b (0 when it reaches
// past b). ok is false when no interval overlaps the lifetime. A lifetime
// shorter than the clock's resolution (b <= a) counts as 1 ns, so that its
// rates and ratios are those of the interval it fell in and its counts
// are (nearly) nothing.
func (s *series) overlap(a, b uint64) (sum, coveredS, ageMs float64, ok bool) {
	if b <= a {
		b = a + 1
	}
	var hi, covered uint64
	for k := sort.Search(len(s.t), func(i int) bool { return s.t[i] > a }); k < len(s.t); k++ {
		if k == 0 {
			continue // the opening point covers no interval
		}
		start, end := s.t[k-1], s.t[k]
		if start >= b {
			break
		}
		// start < b and end > a: the overlap [from, to] is not empty.
		from, to := max(start, a), min(end, b)
		covered += to - from
		sum += s.v[k] * (float64(to-from) / float64(end-start))
		hi = end
		ok = true
	}
	if !ok {
		return math.NaN(), 0, math.NaN(), false
	}
	ageMs = 0
	if hi < b {
		ageMs = float64(b-hi) / 1e6
	}
	return sum, float64(covered) / 1e9, ageMs, true
}

// deltas sums the whole deltas of the intervals (t[k-1], t[k]] that
// overlap the lifetime [a, b] (b <= a counts as 1 ns, as in overlap). A
// ratio of two counters over the same intervals is then a ratio of real
// counts: apportioned (overlap), an interval in which no request finished
// but prompts were prefilled gives its whole numerator to a denominator of
// a neighbour's sliver, and tokens per finished request reached millions.
func (s *series) deltas(a, b uint64) (sum float64, ok bool) {
	if b <= a {
		b = a + 1
	}
	for k := sort.Search(len(s.t), func(i int) bool { return s.t[i] > a }); k < len(s.t); k++ {
		if k == 0 {
			continue
		}
		if s.t[k-1] >= b {
			break
		}
		sum += s.v[k]
		ok = true
	}
	return sum, ok
}

// max returns the largest value over the whole retained series.
func (s *series) max() float64 {
	m := math.NaN()
	for _, v := range s.v {
		if math.IsNaN(m) || v > m {
			m = v
		}
	}
	return m
}
