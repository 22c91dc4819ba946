package enrich

import (
	"testing"
	"time"
)

// TestMetricsAheadDerived: the metric readers' lead follows the join's max
// wait unless set, so a longer max wait is valid as it is (it used to be
// derived in main, per command, and one command forgot).
func TestMetricsAheadDerived(t *testing.T) {
	for _, wait := range []time.Duration{30 * time.Second, 2 * time.Minute, 3 * time.Minute, 10 * time.Minute} {
		cfg := DefaultConfig()
		cfg.Join.MaxWait = wait
		p, err := New(cfg, nil, nil)
		if err != nil {
			t.Fatalf("max wait %s: %v", wait, err)
		}
		if got, want := p.cfg.MetricsAhead, wait+30*time.Second; got != want {
			t.Errorf("max wait %s: metrics ahead %s, want %s", wait, got, want)
		}
	}
	cfg := DefaultConfig()
	cfg.Join.MaxWait, cfg.MetricsAhead = 3*time.Minute, 5*time.Minute
	if p, err := New(cfg, nil, nil); err != nil || p.cfg.MetricsAhead != 5*time.Minute {
		t.Errorf("an explicit metrics ahead was not kept: %v", err)
	}
	cfg.MetricsAhead = time.Minute // below the max wait: the join could stall
	if err := cfg.Validate(); err == nil {
		t.Error("metrics ahead below the max wait accepted")
	}
}
