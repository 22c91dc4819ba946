package faultlab

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/tailcause/tailcause/lab/faultlab/sink"
)

// BenchmarkSimulate16GPU measures simulated seconds per wall second for the
// default 16-GPU fleet at production request rates, with the telemetry
// built and dropped (discard) or encoded as OTLP-JSON lines (file).
// The target — one simulated hour in ≤ 2 minutes on 2 cores — is
// ≥ 30 sim-s/wall-s.
func BenchmarkSimulate16GPU(b *testing.B) {
	for _, bc := range []struct {
		name string
		sink func() Sink
	}{
		{"discard", func() Sink { return sink.Discard{} }},
		{"file", func() Sink { return sink.NewFile(io.Discard) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := scenarioConfig(b, "thermal_throttle", 10*time.Minute, 1)
			b.ReportAllocs()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				cfg.Seed = uint64(i + 1)
				if _, err := Run(context.Background(), cfg, bc.sink()); err != nil {
					b.Fatal(err)
				}
			}
			wall := time.Since(start).Seconds()
			b.ReportMetric(float64(b.N)*cfg.Duration.Seconds()/wall, "sim-s/wall-s")
		})
	}
}
