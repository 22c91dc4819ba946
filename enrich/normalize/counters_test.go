package normalize

import (
	"math"
	"sync"
	"testing"
)

func nan() float64 { return math.NaN() }

func TestCountersObserve(t *testing.T) {
	const s = uint64(1e9) // one second in ns
	p := Placement{Host: "h", Engine: "0"}
	c := NewCounters(0)
	steps := []struct {
		name        string
		in          Sample
		delta, rate float64
		ok          bool
	}{
		{"gauge is not tracked", Sample{Kind: Gauge, Value: 5, TimeNs: 1 * s}, 0, 0, false},
		{"first sample", Sample{Kind: Cumulative, Value: 10, TimeNs: 10 * s, StartNs: 1 * s}, 0, 0, false},
		{"increase", Sample{Kind: Cumulative, Value: 14, TimeNs: 12 * s, StartNs: 1 * s}, 4, 2, true},
		{"duplicate", Sample{Kind: Cumulative, Value: 14, TimeNs: 12 * s, StartNs: 1 * s}, 0, 0, false},
		{"out of order", Sample{Kind: Cumulative, Value: 12, TimeNs: 11 * s, StartNs: 1 * s}, 0, 0, false},
		{"no change", Sample{Kind: Cumulative, Value: 14, TimeNs: 14 * s, StartNs: 1 * s}, 0, 0, true},
		// Value dropped, start unknown: the new value is the increase since the
		// reset, over the interval since the last sample.
		{"reset by value", Sample{Kind: Cumulative, Value: 3, TimeNs: 17 * s}, 3, 1, true},
		{"after reset", Sample{Kind: Cumulative, Value: 9, TimeNs: 20 * s, StartNs: 1 * s}, 6, 2, true},
		// Start moved, value higher than before: still a reset; the rate runs
		// from the new start.
		{"reset by start", Sample{Kind: Cumulative, Value: 12, TimeNs: 30 * s, StartNs: 26 * s}, 12, 3, true},
		{"NaN ignored", Sample{Kind: Cumulative, Value: nan(), TimeNs: 31 * s, StartNs: 26 * s}, 0, 0, false},
		{"negative ignored", Sample{Kind: Cumulative, Value: -1, TimeNs: 31 * s, StartNs: 26 * s}, 0, 0, false},
		{"continues", Sample{Kind: Cumulative, Value: 13, TimeNs: 32 * s, StartNs: 26 * s}, 1, 0.5, true},
	}
	for _, st := range steps {
		st.in.Family, st.in.Metric, st.in.Placement = FamilyEngine, MetricPreemptions, p
		d, r, ok := c.Observe(st.in)
		if d != st.delta || r != st.rate || ok != st.ok {
			t.Errorf("%s: Observe = %v, %v, %v; want %v, %v, %v", st.name, d, r, ok, st.delta, st.rate, st.ok)
		}
	}
	if c.Len() != 1 {
		t.Errorf("Len = %d, want 1", c.Len())
	}
}

func TestCountersSeriesAreSeparate(t *testing.T) {
	c := NewCounters(10)
	base := Sample{Family: FamilyGPU, Metric: MetricPCIeReplay, Kind: Cumulative, TimeNs: 1e9, Value: 1}
	other := []func(*Sample){
		func(s *Sample) { s.Metric = MetricNVLinkBytes },
		func(s *Sample) { s.Model = "m" },
		func(s *Sample) { s.Placement.GPU = "GPU-1" },
		func(s *Sample) { s.Placement.Host = "h2" },
		func(s *Sample) { s.Family = FamilyEngine },
	}
	c.Observe(base)
	for i, f := range other {
		s := base
		f(&s)
		if _, _, ok := c.Observe(s); ok {
			t.Errorf("series %d shares state with the base series", i)
		}
	}
	if c.Len() != 1+len(other) {
		t.Errorf("Len = %d", c.Len())
	}
}

func TestCountersEvictLeastRecentlySeen(t *testing.T) {
	c := NewCounters(2)
	mk := func(gpu string, t, v float64) Sample {
		return Sample{Family: FamilyGPU, Metric: MetricPCIeReplay, Kind: Cumulative,
			Placement: Placement{GPU: gpu}, TimeNs: uint64(t * 1e9), Value: v}
	}
	c.Observe(mk("a", 1, 1))
	c.Observe(mk("b", 1, 1))
	c.Observe(mk("a", 2, 2)) // a is now the most recent
	c.Observe(mk("c", 2, 1)) // evicts b
	if _, _, ok := c.Observe(mk("a", 3, 3)); !ok {
		t.Error("a was evicted; want b evicted")
	}
	if _, _, ok := c.Observe(mk("b", 3, 5)); ok {
		t.Error("b kept its state; want it forgotten")
	}
	if c.Len() != 2 || c.Evicted() != 2 {
		t.Errorf("Len = %d, Evicted = %d; want 2, 2", c.Len(), c.Evicted())
	}
}

// TestCountersEvictWithinPlacement: the series of one placement are
// evicted one by one; a placement whose only series is evicted to make
// room for its own new one keeps the new one.
func TestCountersEvictWithinPlacement(t *testing.T) {
	c := NewCounters(1)
	mk := func(m Metric, t, v float64) Sample {
		return Sample{Family: FamilyGPU, Metric: m, Kind: Cumulative,
			Placement: Placement{Host: "h", GPU: "a"}, TimeNs: uint64(t * 1e9), Value: v}
	}
	c.Observe(mk(MetricPCIeReplay, 1, 1))
	c.Observe(mk(MetricNVLinkBytes, 1, 1)) // evicts the placement's only series
	if d, _, ok := c.Observe(mk(MetricNVLinkBytes, 2, 3)); !ok || d != 2 {
		t.Errorf("the new series: delta %v, ok %v; want 2, true", d, ok)
	}
	if _, _, ok := c.Observe(mk(MetricPCIeReplay, 2, 3)); ok {
		t.Error("the evicted series kept its state")
	}
	if c.Len() != 1 || c.Evicted() != 2 {
		t.Errorf("Len = %d, Evicted = %d; want 1, 2", c.Len(), c.Evicted())
	}
}

func TestCountersFixtureReset(t *testing.T) {
	// vllm_metrics.json: preemptions 10 → 14 → 3 with a new start (restart).
	b := loadMetrics(t, "vllm_metrics.json")
	c := NewCounters(100)
	var deltas, rates []float64
	for _, s := range b.Samples {
		if s.Metric != MetricPreemptions {
			continue
		}
		if d, r, ok := c.Observe(s); ok {
			deltas, rates = append(deltas, d), append(rates, r)
		}
	}
	// 14-10 over 15 s; then 3 since the restart 10 s before the 3rd scrape.
	if len(deltas) != 2 || deltas[0] != 4 || deltas[1] != 3 || math.Abs(rates[0]-4.0/15) > 1e-12 || math.Abs(rates[1]-0.3) > 1e-12 {
		t.Errorf("deltas %v rates %v; want [4 3] [0.2667 0.3]", deltas, rates)
	}
}

func TestCountersConcurrent(t *testing.T) {
	c := NewCounters(16)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 1; i <= 500; i++ {
				c.Observe(Sample{Family: FamilyGPU, Metric: MetricPCIeReplay, Kind: Cumulative,
					Placement: Placement{GPUIndex: string(rune('0' + (i+g)%32))}, TimeNs: uint64(i), Value: float64(i)})
			}
		}(g)
	}
	wg.Wait()
	if c.Len() > 16 {
		t.Errorf("Len = %d past the bound", c.Len())
	}
}
