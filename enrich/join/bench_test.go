package join

import (
	"fmt"
	"testing"

	"github.com/tailcause/tailcause/enrich/normalize"
)

// BenchmarkJoinIdleTick is one emit tick of an idle join holding hosts
// (the enricher ticks every 50 ms): with "at cap", the 10,000 hosts a
// flood of made-up names leaves before the event clock moves on.
func BenchmarkJoinIdleTick(b *testing.B) {
	for _, hosts := range []int{1, DefaultConfig().MaxHosts} {
		b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
			j, err := New(DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			ss := make([]normalize.Sample, hosts)
			for i := range ss {
				ss[i] = gpuSample(normalize.MetricSMClock, base(), 1980)
				ss[i].Placement.Host = fmt.Sprintf("fake-%05d", i)
			}
			j.AddSamples(ss)
			j.Emit(true)
			b.ReportAllocs()
			for b.Loop() {
				j.Emit(false)
			}
		})
	}
}
