package enrich

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/tailcause/tailcause/enrich/join"
	"github.com/tailcause/tailcause/enrich/normalize"
	"github.com/tailcause/tailcause/internal/otlpfixture"
)

func TestPartitionMarksHold(t *testing.T) {
	var pm partitionMarks
	if h := pm.hold(); h != 0 {
		t.Fatalf("before the announcement hold = %d, want 0 (nothing known complete)", h)
	}
	pm.update(metricRec{partitions: []int{0, 1, 2}})
	if h := pm.hold(); h != 0 {
		t.Fatalf("announced, nothing read: hold = %d, want 0", h)
	}
	pm.update(metricRec{partition: 2}) // empty from the start: not behind
	at := func(ts ...uint64) []normalize.Sample {
		var s []normalize.Sample
		for _, x := range ts {
			s = append(s, normalize.Sample{TimeNs: x})
		}
		return s
	}
	pm.update(metricRec{partition: 0, samples: at(50, 70), behind: true})
	pm.update(metricRec{partition: 1, samples: at(30), behind: true})
	if h := pm.hold(); h != 30 {
		t.Errorf("hold = %d, want 30 (the slowest partition still behind)", h)
	}
	pm.update(metricRec{partition: 1, samples: at(20), behind: true}) // an older record does not move it back
	if h := pm.hold(); h != 30 {
		t.Errorf("hold = %d, want 30", h)
	}
	pm.update(metricRec{partition: 1, samples: at(90), behind: false}) // caught up
	if h := pm.hold(); h != 70 {
		t.Errorf("hold = %d, want 70", h)
	}
	pm.update(metricRec{partition: 0, time: 200, behind: true}) // paused ahead of the spans at a record starting at 200
	if h := pm.hold(); h != 200 {
		t.Errorf("hold = %d, want 200", h)
	}
	pm.update(metricRec{partition: 0, behind: false})
	if h := pm.hold(); h != math.MaxUint64 {
		t.Errorf("all caught up: hold = %d, want none", h)
	}
	pm.update(metricRec{partition: 7, behind: true}) // not announced: ignored
	if h := pm.hold(); h != math.MaxUint64 {
		t.Errorf("an unannounced partition moved the hold to %d", h)
	}
	first, last, ok := sampleSpan(at(40, 10, 30))
	if !ok || first != 10 || last != 40 {
		t.Errorf("sampleSpan = %d, %d, %v", first, last, ok)
	}
	if _, _, ok := sampleSpan(nil); ok {
		t.Error("sampleSpan of nothing reported a span")
	}
}

// The join loop with the fixture's engine scrapes in metric partition 0
// and its DCGM scrapes in partition 1, delivered engine first (the order
// that once joined every request without its GPU): nothing is emitted
// while partition 1 has delivered nothing, and every row then carries its
// GPU's features.
func TestJoinLoopWaitsForALaggingPartition(t *testing.T) {
	jl := startJoinLoop(t, time.Hour) // only event time may release rows here
	engineRecs, gpuRecs := fixtureMetricRecs(t)
	for _, m := range engineRecs {
		jl.metricIn <- m
	}
	if got := jl.rows(time.Second); len(got) != 0 {
		t.Fatalf("%d rows emitted while the GPU partition had delivered nothing", len(got))
	}
	for _, m := range gpuRecs {
		jl.metricIn <- m
	}
	got := jl.rows(2 * time.Second)
	jl.stop()
	// Of the fixture's 13 requests the newest waits for later spans (step
	// grace), which only the idle flush would release here.
	if len(got) != otlpfixture.Requests {
		t.Fatalf("%d rows once every partition delivered, want %d", len(got), otlpfixture.Requests)
	}
	for _, o := range got {
		if o.Row.GPUMatch == "none" || math.IsNaN(o.Row.SMClockMinMHz) {
			t.Errorf("request %s joined without its GPU (match %s, sm clock %v)", o.Row.UID, o.Row.GPUMatch, o.Row.SMClockMinMHz)
		}
	}
}

// Records without samples (a scrape's own series) keep coming while a
// Collector runs; they are progress, not input, so the idle flush still
// releases the request that waits for later spans.
func TestJoinLoopIdleFlushIgnoresEmptyRecords(t *testing.T) {
	jl := startJoinLoop(t, 300*time.Millisecond)
	engineRecs, gpuRecs := fixtureMetricRecs(t)
	for _, m := range append(engineRecs, gpuRecs...) {
		jl.metricIn <- m
	}
	var got []join.Output
	for deadline := time.Now().Add(10 * time.Second); len(got) < otlpfixture.Requests+1 && time.Now().Before(deadline); {
		jl.metricIn <- metricRec{partition: 0}
		got = append(got, jl.rows(50*time.Millisecond)...)
	}
	jl.stop()
	if len(got) != otlpfixture.Requests+1 {
		t.Fatalf("%d rows, want %d: empty metric records held off the idle flush", len(got), otlpfixture.Requests+1)
	}
}

// fixtureMetricRecs: the fixture's engine scrapes as partition 0, its DCGM
// scrapes as partition 1, each partition's last record caught up.
func fixtureMetricRecs(t *testing.T) (engine, gpu []metricRec) {
	t.Helper()
	for _, md := range otlpfixture.Metrics() {
		b := normalize.Metrics(md)
		if len(b.Samples) == 0 {
			t.Fatal("a fixture scrape normalized to no samples")
		}
		if b.Samples[0].Family == normalize.FamilyGPU {
			gpu = append(gpu, metricRec{partition: 1, samples: b.Samples, behind: true})
		} else {
			engine = append(engine, metricRec{partition: 0, samples: b.Samples, behind: true})
		}
	}
	engine[len(engine)-1].behind = false
	gpu[len(gpu)-1].behind = false
	return engine, gpu
}

// joinLoopRun is a running join loop fed by hand: the fixture's spans are
// in, the metric partitions 0 and 1 announced.
type joinLoopRun struct {
	metricIn chan metricRec
	sinkIn   chan sinkItem
	stop     func()
}

func startJoinLoop(t *testing.T, idleFlush time.Duration) *joinLoopRun {
	t.Helper()
	cfg := DefaultConfig()
	cfg.IdleFlush = idleFlush
	p, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	spanIn := make(chan spanRec, 1)
	jl := &joinLoopRun{metricIn: make(chan metricRec, 64), sinkIn: make(chan sinkItem, 64)}
	var spanTime atomic.Uint64
	done := make(chan error, 1)
	go func() {
		done <- p.joinLoop(ctx, spanIn, jl.metricIn, &spanTime, jl.sinkIn, &lockedTracker{t: newOffsetTracker()})
	}()
	stopped := false
	jl.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(jl.stop)
	spanIn <- spanRec{msg: kafka.Message{Partition: 0, Offset: 0}, batch: normalize.Traces(otlpfixture.Traces())}
	jl.metricIn <- metricRec{partitions: []int{0, 1}}
	return jl
}

// rows collects what the loop hands the sink for wait.
func (jl *joinLoopRun) rows(wait time.Duration) []join.Output {
	var out []join.Output
	deadline := time.After(wait)
	for {
		select {
		case it := <-jl.sinkIn:
			out = append(out, it.outs...)
		case <-deadline:
			return out
		}
	}
}
