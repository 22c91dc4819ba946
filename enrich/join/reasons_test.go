package join

import (
	"testing"

	"github.com/tailcause/tailcause/enrich/normalize"
)

// TestJoinDerivedClockReasons: a GPU that does not report
// DCGM_FI_DEV_CLOCKS_EVENT_REASONS (dcgm-exporter's default field set) gets
// its throttle reasons from what it does report: the violation counters,
// else a busy GPU's SM clock below 0.9 of its peak, thermal at 83 °C or
// hotter and the power cap below. A GPU that reports the bitmask keeps it.
func TestJoinDerivedClockReasons(t *testing.T) {
	type point struct{ clock, temp, util float64 }
	healthy := point{1980, 70, 0.8}
	tests := []struct {
		name    string
		during  point // the scrape inside the request's lifetime
		reasons *float64
		powerNs []float64 // cumulative DCGM_FI_DEV_POWER_VIOLATION at 0, 10, 20, 30 s
		want    uint32
	}{
		{name: "healthy", during: healthy, want: 0},
		{name: "hot and slow: thermal", during: point{1500, 88, 0.9}, want: normalize.ThrottleSWThermal},
		{name: "slow and cool: power cap", during: point{1400, 71, 0.9}, want: normalize.ThrottleSWPowerCap},
		{name: "slightly below the peak: nothing", during: point{1800, 88, 0.9}, want: 0},
		{name: "idle clock: nothing", during: point{345, 40, 0}, want: 0},
		{name: "the bitmask when reported", during: point{1400, 71, 0.9}, reasons: new(float64), want: 0},
		{name: "power violation counter", during: point{1400, 71, 0.9}, powerNs: []float64{0, 0, 4e9, 8e9}, want: normalize.ThrottleSWPowerCap},
		{name: "violation counter flat: the gauges are not read", during: point{1400, 88, 0.9}, powerNs: []float64{5, 5, 5, 5}, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := newJoiner(t)
			b := base()
			var ss []normalize.Sample
			for i, p := range []point{healthy, healthy, tc.during, healthy} {
				ts := b + uint64(i)*10*sec
				ss = append(ss, gpuSample(normalize.MetricSMClock, ts, p.clock), gpuSample(normalize.MetricGPUTemp, ts, p.temp),
					gpuSample(normalize.MetricGPUUtil, ts, p.util))
				if tc.reasons != nil {
					ss = append(ss, gpuSample(normalize.MetricClockReasons, ts, *tc.reasons))
				}
				if tc.powerNs != nil {
					s := gpuSample(normalize.MetricPowerViolation, ts, tc.powerNs[i])
					s.Kind, s.StartNs = normalize.Cumulative, b-100*sec
					ss = append(ss, s)
				}
			}
			j.AddSamples(ss)
			j.AddSpans(&normalize.Batch{Requests: []normalize.Request{request("aaaa", b+15*sec, b+25*sec)}}, Ref{Partition: 0, Offset: 1})
			out := j.Emit(true)
			if len(out) != 1 {
				t.Fatalf("got %d outputs, want 1", len(out))
			}
			r := out[0].Row
			if r.ThrottleReasons != tc.want {
				t.Errorf("throttle reasons = %#x, want %#x", r.ThrottleReasons, tc.want)
			}
			if len(out[0].Stalls) > 0 && out[0].Stalls[0].ThrottleReasons&^tc.want != 0 {
				t.Errorf("stall throttle reasons = %#x, want within %#x", out[0].Stalls[0].ThrottleReasons, tc.want)
			}
		})
	}
}
