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
	i := sort.Search(len(s.t), func(i int) bool { return s.t[i] >= cutoff })
	if i <= 1 {
		return
	}
	k := i - 1
	s.t = append(s.t[:0], s.t[k:]...)
	s.v = append(s.v[:0], s.v[k:]...)
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
	i := sort.Search(len(s.t), func(i int) bool { return s.t[i] > a }) - 1
	ageMs = math.NaN()
	if i >= 0 && a-s.t[i] <= maxAgeNs {
		visit(s.v[i])
		ageMs = float64(a-s.t[i]) / 1e6
		ok = true
	}
	for j := i + 1; j < len(s.t) && s.t[j] <= b; j++ {
		if !ok {
			ageMs = float64(s.t[j]-a) / 1e6
		}
		visit(s.v[j])
		ok = true
	}
	return ageMs, ok
}

// overlap sums counter deltas whose intervals (t[k-1], t[k]] overlap
// [a, b] and returns the duration those intervals cover in seconds, and the
// age in ms: how far the covering data falls short of b (0 when it reaches
// past b).
func (s *series) overlap(a, b uint64) (sum, coveredS, ageMs float64, ok bool) {
	lo, hi := uint64(0), uint64(0)
	for k := sort.Search(len(s.t), func(i int) bool { return s.t[i] > a }); k < len(s.t); k++ {
		if k == 0 {
			continue // the opening point covers no interval
		}
		start := s.t[k-1]
		if start >= b {
			break
		}
		if !ok {
			lo = start
		}
		sum += s.v[k]
		hi = s.t[k]
		ok = true
	}
	if !ok {
		return math.NaN(), 0, math.NaN(), false
	}
	ageMs = 0
	if hi < b {
		ageMs = float64(b-hi) / 1e6
	}
	return sum, float64(hi-lo) / 1e9, ageMs, true
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
