package join

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tailcause/tailcause/enrich/normalize"
)

// TestHostDue: a host's due stays at or below every series' second and
// newest point, through points stored in and out of order, trims and
// evictions, so gc skips only hosts on which it would change nothing; and
// gc trims and evicts what it did before it skipped hosts.
func TestHostDue(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	h := newHostState(1)
	metrics := []normalize.Metric{normalize.MetricRunning, normalize.MetricKVUsage, normalize.MetricSMClock}
	trueDue := func() uint64 {
		d := uint64(math.MaxUint64)
		for _, m := range []map[string]*entitySeries{h.engines, h.gpus} {
			for _, es := range m {
				for _, s := range es.metrics {
					d = min(d, s.last())
					if len(s.t) >= 2 {
						d = min(d, s.t[1])
					}
				}
			}
		}
		return d
	}
	for i := range 5000 {
		s := normalize.Sample{Family: normalize.FamilyEngine, Metric: metrics[r.IntN(len(metrics))], Model: "m",
			Placement: normalize.Placement{Host: "h", Pod: []string{"a", "b"}[r.IntN(2)]}, TimeNs: uint64(1000 + i + r.IntN(200) - 150)}
		if r.IntN(3) == 0 {
			s.Family, s.Placement.GPU = normalize.FamilyGPU, "GPU-0"
		}
		h.add(&s, 1, true, nil)
		if d := trueDue(); h.due > d {
			t.Fatalf("after sample %d: due %d above the series' %d", i, h.due, d)
		}
		switch r.IntN(50) {
		case 0:
			h.trim(uint64(i + 900))
		case 1:
			h.evict(uint64(i+900), uint64(i+800))
		default:
			continue
		}
		if d := trueDue(); h.due != d {
			t.Fatalf("after sample %d's trim: due %d, want %d", i, h.due, d)
		}
	}

	// gc over hosts some of which it skips leaves what trimming and
	// evicting every host leaves.
	cfg := DefaultConfig()
	j, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	const sec = uint64(1e9)
	var samples []normalize.Sample
	for host := range 30 {
		for k := range 30 {
			// Host h reports every 10 s for a span of time that ends
			// later for higher h: some hosts are due at the cutoff (20 min), some
			// (from 21 min) not.
			ts := uint64(host)*60*sec + uint64(k)*10*sec
			samples = append(samples, normalize.Sample{Family: normalize.FamilyEngine, Metric: normalize.MetricRunning, Model: "m",
				Placement: normalize.Placement{Host: string(rune('a' + host)), Pod: "p"}, TimeNs: ts, Value: float64(k)})
		}
	}
	j.AddSamples(samples)
	j.metricMax = 20*60*sec + uint64(cfg.Retention)
	j.gc()
	cutoff := j.cutoff()
	for name, h := range j.hosts {
		for _, es := range h.engines {
			for _, s := range es.metrics {
				if len(s.t) >= 2 && s.t[1] < cutoff {
					t.Errorf("host %s: a series' second point %d is before the cutoff %d after gc", name, s.t[1], cutoff)
				}
				if s.last() < cutoff-uint64(cfg.MaxSampleAge) {
					t.Errorf("host %s: a series last seen at %d was kept past the horizon %d", name, s.last(), cutoff-uint64(cfg.MaxSampleAge))
				}
			}
		}
	}
	if len(j.hosts) == 0 || len(j.hosts) == 30 {
		t.Fatalf("%d of 30 hosts kept: the test tests nothing", len(j.hosts))
	}
}
