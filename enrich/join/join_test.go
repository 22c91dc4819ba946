package join

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/enrich/normalize"
)

const sec = uint64(time.Second)

func base() uint64 { return uint64(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC).UnixNano()) }

func engineSample(m normalize.Metric, kind normalize.SampleKind, t uint64, v float64) normalize.Sample {
	return normalize.Sample{Family: normalize.FamilyEngine, Metric: m, Kind: kind, Model: "llama-3-8b",
		Placement: normalize.Placement{Host: "node-1", Pod: "vllm-0", Engine: "0"}, TimeNs: t, StartNs: base() - 100*sec, Value: v}
}

func gpuSample(m normalize.Metric, t uint64, v float64) normalize.Sample {
	return normalize.Sample{Family: normalize.FamilyGPU, Metric: m, Kind: normalize.Gauge,
		Placement: normalize.Placement{Host: "node-1", Pod: "vllm-0", GPU: "GPU-aaaa", GPUIndex: "0"}, TimeNs: t, Value: v}
}

func request(uid string, start, end uint64) normalize.Request {
	return normalize.Request{UID: uid, TraceID: uid, SpanID: "01", Source: normalize.SourceVLLM, Service: "vllm", Model: "llama-3-8b",
		Placement: normalize.Placement{Host: "node-1", Pod: "vllm-0"}, StartNs: start, EndNs: end,
		E2EMs: float64(end-start) / 1e6, TTFTMs: 200, QueueMs: 20, PrefillMs: 180, DecodeMs: float64(end-start)/1e6 - 200,
		InferenceMs: math.NaN(), KVTransferMs: math.NaN(), PromptTokens: 1000, CompletionTokens: 101, CachedTokens: -1, MaxTokens: -1,
		TimelineSource: normalize.TimelineAggregate}
}

func near(t *testing.T, name string, got, want float64) {
	t.Helper()
	if math.IsNaN(want) {
		if !math.IsNaN(got) {
			t.Errorf("%s = %v, want NaN", name, got)
		}
		return
	}
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}

func newJoiner(t *testing.T) *Joiner {
	t.Helper()
	j, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Close)
	return j
}

func TestJoinFeaturesAndStaleness(t *testing.T) {
	j := newJoiner(t)
	b := base()
	var ss []normalize.Sample
	for i, v := range []struct{ run, wait, kv, pre, hits, queries, done, prompt float64 }{
		{4, 0, 0.50, 10, 100, 1000, 100, 0},     // t=0
		{6, 2, 0.70, 10, 300, 2000, 110, 10000}, // t=10
		{8, 5, 0.97, 15, 400, 3000, 130, 30000}, // t=20
		{3, 0, 0.60, 15, 900, 4000, 140, 40000}, // t=30
	} {
		ts := b + uint64(i)*10*sec
		ss = append(ss,
			engineSample(normalize.MetricRunning, normalize.Gauge, ts, v.run),
			engineSample(normalize.MetricWaiting, normalize.Gauge, ts, v.wait),
			engineSample(normalize.MetricKVUsage, normalize.Gauge, ts, v.kv),
			engineSample(normalize.MetricPreemptions, normalize.Cumulative, ts, v.pre),
			engineSample(normalize.MetricPrefixHits, normalize.Cumulative, ts, v.hits),
			engineSample(normalize.MetricPrefixQueries, normalize.Cumulative, ts, v.queries),
			engineSample(normalize.MetricRequestSuccess, normalize.Cumulative, ts, v.done),
			engineSample(normalize.MetricPromptTokens, normalize.Cumulative, ts, v.prompt),
		)
	}
	ss = append(ss,
		gpuSample(normalize.MetricSMClock, b, 1980), gpuSample(normalize.MetricClockReasons, b, 0),
		gpuSample(normalize.MetricSMClock, b+15*sec, 1200), gpuSample(normalize.MetricClockReasons, b+15*sec, float64(normalize.ThrottleSWThermal)),
		gpuSample(normalize.MetricGPUTemp, b, 70), gpuSample(normalize.MetricGPUTemp, b+15*sec, 88),
		gpuSample(normalize.MetricSMClock, b+30*sec, 1980), gpuSample(normalize.MetricClockReasons, b+30*sec, 0), gpuSample(normalize.MetricGPUTemp, b+30*sec, 70),
	)
	j.AddSamples(ss)
	req := request("aaaa", b+12*sec, b+25*sec)
	j.AddSpans(&normalize.Batch{Requests: []normalize.Request{req}}, Ref{Partition: 2, Offset: 7})
	if out := j.Emit(false); len(out) != 0 {
		t.Fatalf("emitted before the span stream passed the step grace: %d rows", len(out))
	}
	// A later request moves span time past end + grace.
	later := request("bbbb", b+26*sec, b+31*sec)
	j.AddSpans(&normalize.Batch{Requests: []normalize.Request{later}}, Ref{Partition: 2, Offset: 8})
	out := j.Emit(false)
	if len(out) != 1 {
		t.Fatalf("got %d outputs, want 1 (the first request)", len(out))
	}
	r := out[0].Row
	if r.UID != "aaaa" || r.EngineMatch != "pod" || r.GPUMatch != "pod" || r.Engine != "0" || r.GPU != "GPU-aaaa" {
		t.Fatalf("identity/placement: %+v", r)
	}
	near(t, "running_at_arrival", r.RunningAtArrival, 6)
	near(t, "running_age_ms", r.RunningAgeMs, 2000)
	near(t, "waiting_at_arrival", r.WaitingAtArrival, 2)
	near(t, "kv_usage_at_arrival", r.KVUsageAtArrival, 0.70)
	near(t, "kv_usage_max", r.KVUsageMax, 0.97)
	near(t, "kv_usage_age_ms", r.KVUsageAgeMs, 2000)
	// Intervals (10,20] (+5 preemptions) and (20,30] (+0) overlap [12,25]
	// by 8 s of 10 and 5 s of 10: each delta counts in that share.
	near(t, "preemptions_during", r.PreemptionsDuring, 0.8*5)
	near(t, "preemptions_age_ms", r.PreemptAgeMs, 0)
	// Prefix: hits 0.8·100 + 0.5·500 over queries 0.8·1000 + 0.5·1000.
	near(t, "prefix_hit_ratio", r.PrefixHitRatio, 330.0/1300.0)
	// Mix: the whole intervals' (20000 + 10000) prompt tokens over their
	// (20 + 10) finished requests.
	near(t, "engine_mean_prompt_tokens", r.EngineMeanPromptTokens, 30000.0/30)
	// The rate over the 13 s lifetime.
	near(t, "engine_prompt_tps", r.EnginePromptTPS, 21000.0/13)
	near(t, "engine_mean_output_tokens (no generation counter)", r.EngineMeanOutputTokens, math.NaN())
	near(t, "sm_clock_min", r.SMClockMinMHz, 1200)
	near(t, "sm_clock_norm", r.SMClockNormMHz, 1980)
	near(t, "sm_clock_ratio", r.SMClockRatio, 1200.0/1980.0)
	near(t, "sm_clock_age_ms", r.SMClockAgeMs, 12000)
	near(t, "gpu_temp_max", r.GPUTempMaxC, 88)
	if r.ThrottleReasons != normalize.ThrottleSWThermal {
		t.Errorf("throttle reasons = %#x", r.ThrottleReasons)
	}
	near(t, "dram (no samples)", r.DRAMActiveMax, math.NaN())
	near(t, "tpot", r.TPOTMs, (13000.0-200)/100)
	if r.TimelineSource != "aggregate" || r.KafkaPartition != 2 || r.KafkaOffset != 7 {
		t.Errorf("timeline/kafka: %q %d %d", r.TimelineSource, r.KafkaPartition, r.KafkaOffset)
	}
	if len(out[0].Done) != 1 || out[0].Done[0] != (Ref{2, 7}) {
		t.Errorf("done refs = %v", out[0].Done)
	}
}

func TestJoinWaitsForGPUWatermarkThenForcesAfterMaxWait(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GPUWait = 0 // wait for the GPU's next scrape, as for any series
	j, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Close)
	b := base()
	j.AddSamples([]normalize.Sample{
		engineSample(normalize.MetricRunning, normalize.Gauge, b, 1),
		engineSample(normalize.MetricRunning, normalize.Gauge, b+60*sec, 1),
		gpuSample(normalize.MetricSMClock, b, 1980), // DCGM then goes silent
	})
	j.AddSpans(&normalize.Batch{Requests: []normalize.Request{request("r1", b+5*sec, b+10*sec)}}, Ref{0, 1})
	j.AddSpans(&normalize.Batch{Requests: []normalize.Request{request("r2", b+40*sec, b+50*sec)}}, Ref{0, 2})
	if out := j.Emit(false); len(out) != 0 {
		t.Fatalf("emitted %d while the GPU stream is behind", len(out))
	}
	j.AddSpans(&normalize.Batch{Requests: []normalize.Request{request("r3", b+125*sec, b+131*sec)}}, Ref{0, 3})
	out := j.Emit(false)
	if len(out) != 1 || out[0].Row.UID != "r1" {
		t.Fatalf("want r1 forced after max wait, got %d", len(out))
	}
	if s := j.Stats(); s.ForcedByWait != 1 {
		t.Errorf("forced by wait = %d", s.ForcedByWait)
	}
	out = j.Emit(true)
	if len(out) != 2 {
		t.Fatalf("flush emitted %d, want 2", len(out))
	}
}

// TestJoinGPUWait: once the metric input is caught up and the spans have
// passed a request's end by GPUWait, the request is joined without its
// GPU's next scrape (dcgm-exporter's comes every 30 s), with the GPU's
// gauges up to its end, as waiting would give them. It still waits while a
// metric partition is behind, and for a GPU with violation counters
// (apportioned over the interval after the end).
func TestJoinGPUWait(t *testing.T) {
	b := base()
	setup := func(t *testing.T, counters bool) *Joiner {
		j := newJoiner(t)
		s := []normalize.Sample{
			engineSample(normalize.MetricRunning, normalize.Gauge, b, 1),
			engineSample(normalize.MetricRunning, normalize.Gauge, b+15*sec, 1),
			engineSample(normalize.MetricRunning, normalize.Gauge, b+30*sec, 1),
			gpuSample(normalize.MetricSMClock, b, 1980),
			gpuSample(normalize.MetricSMClock, b+6*sec, 1200), // inside r1's lifetime
		}
		if counters {
			v := gpuSample(normalize.MetricPowerViolation, b, 0)
			v.Kind, v.StartNs = normalize.Cumulative, b-100*sec
			w := v
			w.TimeNs, w.Value = b+6*sec, 1e9
			s = append(s, v, w)
		}
		j.AddSamples(s)
		j.AddSpans(&normalize.Batch{Requests: []normalize.Request{request("r1", b+5*sec, b+10*sec)}}, Ref{0, 1})
		return j
	}
	t.Run("caught up", func(t *testing.T) {
		j := setup(t, false)
		j.AddSpans(&normalize.Batch{Requests: []normalize.Request{request("r2", b+15*sec, b+19*sec)}}, Ref{0, 2})
		if out := j.Emit(false); len(out) != 0 {
			t.Fatalf("emitted %d before the spans passed r1's end by the GPU wait", len(out))
		}
		j.AddSpans(&normalize.Batch{Requests: []normalize.Request{request("r3", b+16*sec, b+21*sec)}}, Ref{0, 3})
		out := j.Emit(false)
		if len(out) != 1 || out[0].Row.UID != "r1" {
			t.Fatalf("want r1 joined without the GPU's next scrape, got %d", len(out))
		}
		near(t, "sm clock min", out[0].Row.SMClockMinMHz, 1200)
		if s := j.Stats(); s.ForcedByWait != 0 {
			t.Errorf("forced by wait = %d, want 0", s.ForcedByWait)
		}
	})
	t.Run("partition behind", func(t *testing.T) {
		j := setup(t, false)
		j.SetMetricHold(b + 8*sec)
		j.AddSpans(&normalize.Batch{Requests: []normalize.Request{request("r3", b+16*sec, b+21*sec)}}, Ref{0, 3})
		if out := j.Emit(false); len(out) != 0 {
			t.Fatalf("emitted %d while a metric partition is behind r1's end", len(out))
		}
	})
	t.Run("violation counters", func(t *testing.T) {
		j := setup(t, true)
		j.AddSpans(&normalize.Batch{Requests: []normalize.Request{request("r3", b+16*sec, b+21*sec)}}, Ref{0, 3})
		if out := j.Emit(false); len(out) != 0 {
			t.Fatalf("emitted %d before the scrape its violation counters need", len(out))
		}
	})
}

func TestJoinDuplicateRequestIsReleased(t *testing.T) {
	j := newJoiner(t)
	b := base()
	r := request("dup", b, b+sec)
	j.AddSpans(&normalize.Batch{Requests: []normalize.Request{r}}, Ref{0, 1})
	j.AddSpans(&normalize.Batch{Requests: []normalize.Request{r}}, Ref{0, 2})
	if got := j.Released(); len(got) != 1 || got[0] != (Ref{0, 2}) {
		t.Fatalf("released = %v, want the duplicate's record", got)
	}
	out := j.Emit(true)
	if len(out) != 1 || j.Stats().DuplicateRequests != 1 {
		t.Fatalf("outputs %d, duplicates %d", len(out), j.Stats().DuplicateRequests)
	}
}

func TestJoinStepTimelineAndStalls(t *testing.T) {
	j := newJoiner(t)
	b := base()
	j.AddSamples([]normalize.Sample{
		engineSample(normalize.MetricPreemptions, normalize.Cumulative, b, 0),
		engineSample(normalize.MetricPreemptions, normalize.Cumulative, b+10*sec, 2),
		engineSample(normalize.MetricKVUsage, normalize.Gauge, b, 0.99),
		engineSample(normalize.MetricKVUsage, normalize.Gauge, b+10*sec, 0.99),
		gpuSample(normalize.MetricSMClock, b, 1980), gpuSample(normalize.MetricSMClock, b+10*sec, 1980),
	})
	req := request("s1", b+sec, b+sec+1200*uint64(time.Millisecond))
	req.Source = normalize.SourceSGLang
	req.TTFTMs = 100
	var steps []normalize.Step
	// Tokens every 20 ms after the first, with one 500 ms stall after token 10
	// (a retract during it).
	tok := req.StartNs + 100*uint64(time.Millisecond)
	for i := 0; i < 20; i++ {
		if i == 10 {
			steps = append(steps, normalize.Step{TraceID: "s1", Kind: normalize.StepRetract, StartNs: tok + 100*uint64(time.Millisecond), EndNs: tok + 100*uint64(time.Millisecond)})
			tok += 500 * uint64(time.Millisecond)
		} else {
			tok += 20 * uint64(time.Millisecond)
		}
		steps = append(steps, normalize.Step{TraceID: "s1", Kind: normalize.StepDecode, StartNs: tok - uint64(time.Millisecond), EndNs: tok, Tokens: 1})
	}
	j.AddSpans(&normalize.Batch{Steps: steps[:10]}, Ref{1, 1})
	j.AddSpans(&normalize.Batch{Requests: []normalize.Request{req}, Steps: steps[10:]}, Ref{1, 2})
	out := j.Emit(true)
	if len(out) != 1 {
		t.Fatalf("outputs %d", len(out))
	}
	r := out[0].Row
	if r.TimelineSource != "steps" || r.StallCount != 1 || r.Retracts != 1 {
		t.Fatalf("timeline %q stalls %d retracts %d", r.TimelineSource, r.StallCount, r.Retracts)
	}
	near(t, "itl_p50", r.ITLP50Ms, 20)
	near(t, "itl_max", r.ITLMaxMs, 500)
	near(t, "stall_ms", r.StallMs, 500)
	st := out[0].Stalls[0]
	if st.TokenIndex != 11 || st.Retracts != 1 || st.KVUsageMax != 0.99 {
		t.Fatalf("stall: %+v", st)
	}
	want := map[string]bool{"retract": true, "preemption": true, "kv_cache_full": true}
	for _, e := range st.Events {
		delete(want, e)
	}
	if len(want) != 0 {
		t.Errorf("stall events %v miss %v", st.Events, want)
	}
	if len(out[0].Done) != 2 {
		t.Errorf("done refs %v, want both records", out[0].Done)
	}
}

func TestJoinOrphanStepsReleased(t *testing.T) {
	j := newJoiner(t)
	b := base()
	j.AddSpans(&normalize.Batch{Steps: []normalize.Step{{TraceID: "orphan", Kind: normalize.StepDecode, StartNs: b, EndNs: b + 1}}}, Ref{3, 9})
	j.AddSpans(&normalize.Batch{Requests: []normalize.Request{request("late", b+200*sec, b+201*sec)}}, Ref{3, 10})
	for i := 0; i < 16; i++ { // trimming runs on every 16th Emit
		j.Emit(false)
	}
	if got := j.Released(); len(got) != 1 || got[0] != (Ref{3, 9}) {
		t.Fatalf("released %v, want the orphan's record", got)
	}
	if j.Stats().OrphanSteps != 1 {
		t.Errorf("orphans = %d", j.Stats().OrphanSteps)
	}
}

func TestConfigValidate(t *testing.T) {
	c := DefaultConfig()
	c.MaxWait = c.Retention + time.Second
	if err := c.Validate(); err == nil {
		t.Fatal("max wait beyond retention accepted")
	}
}

// TestJoinWaitsForItsOwnEngine: two engines share a host and are scraped
// separately. The other engine's scrape passing a request's end must not
// release it: its counter features need its own engine's next scrape, and
// rows would otherwise depend on the order the scrapes were delivered in.
func TestJoinWaitsForItsOwnEngine(t *testing.T) {
	b := base()
	other := func(m normalize.Metric, kind normalize.SampleKind, ts uint64, v float64) normalize.Sample {
		s := engineSample(m, kind, ts, v)
		s.Placement.Pod = "vllm-1"
		return s
	}
	scrape := func(pod string, ts uint64, prompt float64) []normalize.Sample {
		mk := engineSample
		if pod == "vllm-1" {
			mk = other
		}
		return []normalize.Sample{
			mk(normalize.MetricRunning, normalize.Gauge, ts, 4),
			mk(normalize.MetricPromptTokens, normalize.Cumulative, ts, prompt),
			mk(normalize.MetricRequestSuccess, normalize.Cumulative, ts, prompt/1000),
		}
	}
	gpus := func(ts uint64) []normalize.Sample {
		return []normalize.Sample{gpuSample(normalize.MetricSMClock, ts, 1980), gpuSample(normalize.MetricClockReasons, ts, 0)}
	}
	run := func(order [][]normalize.Sample) (emittedEarly bool, row Output) {
		j := newJoiner(t)
		for _, ss := range order[:len(order)-1] {
			j.AddSamples(ss)
		}
		j.AddSpans(&normalize.Batch{Requests: []normalize.Request{request("aaaa", b+12*sec, b+25*sec), request("zzzz", b+40*sec, b+45*sec)}}, Ref{Partition: 0, Offset: 1})
		early := len(j.Emit(false)) > 0
		j.AddSamples(order[len(order)-1])
		out := j.Emit(false)
		if len(out) == 0 {
			t.Fatal("not emitted once its own engine passed its end")
		}
		return early, out[0]
	}
	// The request's engine (vllm-0) is scraped at 0, 10, 20 and, last, 30;
	// the other engine's 30 s scrape and the GPU's arrive before it.
	early, got := run([][]normalize.Sample{
		scrape("vllm-0", b, 0), scrape("vllm-0", b+10*sec, 10000), scrape("vllm-0", b+20*sec, 20000),
		scrape("vllm-1", b+30*sec, 5000), gpus(b), gpus(b + 30*sec),
		scrape("vllm-0", b+30*sec, 40000),
	})
	if early {
		t.Error("emitted when only the other engine's scrape had passed its end")
	}
	// Delivered in the other order, the row is the same.
	_, want := run([][]normalize.Sample{
		scrape("vllm-1", b+30*sec, 5000), gpus(b), gpus(b + 30*sec),
		scrape("vllm-0", b, 0), scrape("vllm-0", b+10*sec, 10000), scrape("vllm-0", b+20*sec, 20000),
		scrape("vllm-0", b+30*sec, 40000),
	})
	if got.Row.EnginePromptTPS != want.Row.EnginePromptTPS || math.IsNaN(got.Row.EnginePromptTPS) || got.Row.EngineTPSAgeMs != 0 {
		t.Errorf("prompt tps %v (age %v ms) vs %v in the other delivery order", got.Row.EnginePromptTPS, got.Row.EngineTPSAgeMs, want.Row.EnginePromptTPS)
	}
}

// A host whose GPU family sits in a metric partition not read yet looks,
// to the host's series, like a host without GPUs: the metric hold keeps
// the request until that partition delivers, and gives way after MaxWait
// of span time.
func TestJoinMetricHold(t *testing.T) {
	b := base()
	engine := []normalize.Sample{
		engineSample(normalize.MetricRunning, normalize.Gauge, b, 1),
		engineSample(normalize.MetricRunning, normalize.Gauge, b+30*sec, 1),
	}
	spans := func(j *Joiner) {
		j.AddSpans(&normalize.Batch{Requests: []normalize.Request{request("r1", b+5*sec, b+10*sec), request("r2", b+20*sec, b+28*sec)}}, Ref{0, 1})
	}

	j := newJoiner(t)
	j.AddSamples(engine)
	spans(j)
	if out := j.Emit(false); len(out) != 1 || out[0].Row.UID != "r1" || out[0].Row.GPUMatch != "none" {
		t.Fatalf("without a hold the engine family alone releases r1 (no GPU): %d rows", len(out))
	}

	j = newJoiner(t)
	j.SetMetricHold(0) // the GPU partition has delivered nothing yet
	j.AddSamples(engine)
	spans(j)
	if out := j.Emit(false); len(out) != 0 {
		t.Fatalf("emitted %d rows while a metric partition holding records had delivered nothing", len(out))
	}
	j.AddSamples([]normalize.Sample{gpuSample(normalize.MetricSMClock, b, 1500), gpuSample(normalize.MetricSMClock, b+30*sec, 1980)})
	j.SetMetricHold(b + 30*sec)
	out := j.Emit(false)
	if len(out) != 1 || out[0].Row.UID != "r1" || out[0].Row.GPUMatch != "pod" {
		t.Fatalf("after the GPU partition delivered, want r1 joined with its GPU: %d rows %+v", len(out), out)
	}
	near(t, "sm_clock_min", out[0].Row.SMClockMinMHz, 1500)

	// A partition stuck behind r2's end holds it only until the span
	// stream is MaxWait past it.
	j.SetMetricHold(b + 20*sec)
	j.AddSamples([]normalize.Sample{engineSample(normalize.MetricRunning, normalize.Gauge, b+60*sec, 1), gpuSample(normalize.MetricSMClock, b+60*sec, 1980)})
	j.AddSpans(&normalize.Batch{Requests: []normalize.Request{request("r3", b+100*sec, b+140*sec)}}, Ref{0, 2})
	if out := j.Emit(false); len(out) != 0 {
		t.Fatalf("emitted %d rows past a held partition before MaxWait", len(out))
	}
	j.AddSpans(&normalize.Batch{Requests: []normalize.Request{request("r4", b+140*sec, b+148*sec)}}, Ref{0, 3})
	if out := j.Emit(false); len(out) != 1 || out[0].Row.UID != "r2" {
		t.Fatalf("want r2 once span time passed its end by MaxWait, got %d rows", len(out))
	}
}

// TestJoinCounterDeltasApportionedByOverlap: a preemption burst after a
// request's end, in the scrape interval that straddles the end, is given
// to the request only in the share of the interval its lifetime covers —
// not whole. Finer scrapes that separate the burst from the request give it
// none; requests tiling an interval share its delta exactly.
func TestJoinCounterDeltasApportionedByOverlap(t *testing.T) {
	b := base()
	// Cumulative preemptions: nothing until 15 s, then 100 by 20 s (the
	// burst), flat after. Prefix hits/queries: 10% hits before 15 s, 90%
	// during the burst.
	preAt := func(s float64) float64 { return 100 * min(1, max(0, (s-15)/5)) }
	hitsAt := func(s float64) float64 { return 10*min(s, 15) + 90*max(0, s-15) }
	scrapes := func(step float64) []normalize.Sample {
		var ss []normalize.Sample
		for s := 0.0; s <= 30; s += step {
			ts := b + uint64(s*float64(sec))
			ss = append(ss,
				engineSample(normalize.MetricPreemptions, normalize.Cumulative, ts, preAt(s)),
				engineSample(normalize.MetricPrefixHits, normalize.Cumulative, ts, hitsAt(s)),
				engineSample(normalize.MetricPrefixQueries, normalize.Cumulative, ts, 100*s),
				engineSample(normalize.MetricPromptTokens, normalize.Cumulative, ts, 1000*s),
				engineSample(normalize.MetricRequestSuccess, normalize.Cumulative, ts, s),
			)
		}
		return ss
	}
	join := func(step float64, reqs ...normalize.Request) map[string]Row {
		j := newJoiner(t)
		j.AddSamples(scrapes(step))
		j.AddSpans(&normalize.Batch{Requests: reqs}, Ref{0, 1})
		rows := map[string]Row{}
		for _, o := range j.Emit(true) {
			rows[o.Row.UID] = o.Row
		}
		if len(rows) != len(reqs) {
			t.Fatalf("joined %d of %d requests", len(rows), len(reqs))
		}
		return rows
	}

	// 10 s scrapes: the request [11 s, 12 s] ran through 1 s of the
	// interval (10, 20] whose delta is the burst.
	early := request("early", b+11*sec, b+12*sec)
	before := request("before", b+2*sec, b+9*sec)
	rows := join(10, early, before)
	r := rows["early"]
	near(t, "preemptions_during (1 s of the burst's 10 s interval)", r.PreemptionsDuring, 100.0/10)
	near(t, "preemptions_age_ms", r.PreemptAgeMs, 0)
	// Hits (10·5 + 90·5)/10 per second, queries 100 per second, over 1 s.
	near(t, "prefix_hit_ratio", r.PrefixHitRatio, 50.0/100)
	near(t, "engine_prompt_tps", r.EnginePromptTPS, 1000)
	near(t, "engine_mean_prompt_tokens", r.EngineMeanPromptTokens, 1000)
	near(t, "preemptions_during of a request before the interval", rows["before"].PreemptionsDuring, 0)

	// 1 s scrapes see the burst start at 15 s: the request gets none of it,
	// and the hit ratio of its own second.
	r = join(1, early)["early"]
	near(t, "preemptions_during (1 s scrapes)", r.PreemptionsDuring, 0)
	near(t, "prefix_hit_ratio (1 s scrapes)", r.PrefixHitRatio, 0.1)

	// Requests tiling (10, 20] share the burst's 100 preemptions exactly, in
	// proportion to their overlap; one reaching past the last scrape keeps
	// the covered share and an age of the shortfall.
	var tiles []normalize.Request
	for k := uint64(0); k < 4; k++ {
		tiles = append(tiles, request(fmt.Sprintf("tile%d", k), b+10*sec+k*5*sec/2, b+10*sec+(k+1)*5*sec/2))
	}
	past := request("past", b+25*sec, b+34*sec)
	rows = join(10, append(tiles, past)...)
	total := 0.0
	for _, q := range tiles {
		near(t, q.UID+" preemptions", rows[q.UID].PreemptionsDuring, 25)
		total += rows[q.UID].PreemptionsDuring
	}
	near(t, "tiles' total", total, 100)
	near(t, "past: preemptions", rows["past"].PreemptionsDuring, 0)
	near(t, "past: prompt tps over the covered 5 s", rows["past"].EnginePromptTPS, 1000)
	near(t, "past: age (4 s short of its end)", rows["past"].PreemptAgeMs, 4000)

	// A lifetime of zero length counts as 1 ns: the rates and ratios of the
	// interval it fell in, (nearly) no preemptions.
	point := request("point", b+16*sec, b+16*sec)
	r = join(10, point)["point"]
	near(t, "point: prefix_hit_ratio", r.PrefixHitRatio, 0.5)
	near(t, "point: engine_prompt_tps", r.EnginePromptTPS, 1000)
	if r.PreemptionsDuring < 0 || r.PreemptionsDuring > 1e-6 {
		t.Errorf("point: preemptions_during = %v, want ~0", r.PreemptionsDuring)
	}
}

// TestJoinMixOverWholeIntervals: the workload mix is a ratio of whole
// interval deltas. A request that runs through an interval where long
// prompts were prefilled and nothing finished, and 1 s into the next one
// where requests finished, gets the tokens per finished request of the
// two intervals (5200), not most of the first's 50000 tokens over a tenth
// of the second's finishes (apportioned by overlap: 45200 per request).
// With no request finished in its intervals the mix is unknown.
func TestJoinMixOverWholeIntervals(t *testing.T) {
	j := newJoiner(t)
	b := base()
	var ss []normalize.Sample
	for i, v := range []struct{ done, prompt, gen float64 }{{100, 0, 0}, {100, 50000, 400}, {110, 52000, 2400}, {110, 60000, 2600}} {
		ts := b + uint64(i)*10*sec
		ss = append(ss,
			engineSample(normalize.MetricRequestSuccess, normalize.Cumulative, ts, v.done),
			engineSample(normalize.MetricPromptTokens, normalize.Cumulative, ts, v.prompt),
			engineSample(normalize.MetricGenerationTokens, normalize.Cumulative, ts, v.gen),
		)
	}
	j.AddSamples(ss)
	straddle := request("straddle", b+1*sec, b+11*sec)
	idle := request("idle", b+21*sec, b+29*sec)
	j.AddSpans(&normalize.Batch{Requests: []normalize.Request{straddle, idle}}, Ref{0, 1})
	rows := map[string]Row{}
	for _, o := range j.Emit(true) {
		rows[o.Row.UID] = o.Row
	}
	r := rows["straddle"]
	near(t, "engine_mean_prompt_tokens", r.EngineMeanPromptTokens, 52000.0/10)
	near(t, "engine_mean_output_tokens", r.EngineMeanOutputTokens, 2400.0/10)
	r = rows["idle"]
	near(t, "engine_mean_prompt_tokens (no request finished)", r.EngineMeanPromptTokens, math.NaN())
}

// TestJoinStepTokens: the step size a request ran under is the
// token-weighted mean of the step-size histogram over the whole scrape
// intervals it overlaps; NaN without the histogram.
func TestJoinStepTokens(t *testing.T) {
	b := base()
	j := newJoiner(t)
	// Per 10 s: 100 decode steps of ≤16 tokens and 4 budget-sized steps
	// of ≤2048 before 20 s; after it, also 2 steps of ≤8192 each interval.
	var sum, sq float64
	for s := 0; s <= 40; s += 10 {
		ts := b + uint64(s)*sec
		j.AddSamples([]normalize.Sample{
			engineSample(normalize.MetricStepTokens, normalize.Cumulative, ts, sum),
			engineSample(normalize.MetricStepTokensSq, normalize.Cumulative, ts, sq),
			engineSample(normalize.MetricRunning, normalize.Gauge, ts, 4),
		})
		sum += 100*16 + 4*2048
		sq += 100*16*16 + 4*2048*2048
		if s >= 20 {
			sum += 2 * 8192
			sq += 2 * 8192 * 8192
		}
	}
	j.AddSpans(&normalize.Batch{Requests: []normalize.Request{
		request("before", b+11*sec, b+14*sec), request("after", b+31*sec, b+33*sec),
	}}, Ref{0, 1})
	rows := map[string]Row{}
	for _, o := range j.Emit(true) {
		rows[o.Row.UID] = o.Row
	}
	near(t, "before", rows["before"].EngineStepTokens, (100*16*16+4*2048*2048)/(100*16+4*2048.0))
	near(t, "after", rows["after"].EngineStepTokens, (100*16*16+4*2048*2048+2*8192*8192)/(100*16+4*2048+2*8192.0))

	j = newJoiner(t)
	for s := 0; s <= 40; s += 10 {
		j.AddSamples([]normalize.Sample{engineSample(normalize.MetricRunning, normalize.Gauge, b+uint64(s)*sec, 4)})
	}
	j.AddSpans(&normalize.Batch{Requests: []normalize.Request{request("other", b+11*sec, b+14*sec)}}, Ref{0, 1})
	for _, o := range j.Emit(true) {
		if v := o.Row.EngineStepTokens; !math.IsNaN(v) {
			t.Errorf("an engine without the histogram: step tokens %v, want NaN", v)
		}
	}
}

// TestJoinEvictsIdleHosts: a flood of made-up host names fills the join
// only up to MaxHosts (the rest is dropped and counted); once the event
// clock has moved past the retention, the idle hosts are evicted and new
// ones are admitted again. A silent host that a pending request still
// needs keeps its samples until the request is joined.
func TestJoinEvictsIdleHosts(t *testing.T) {
	j := newJoiner(t)
	cfg := DefaultConfig()
	b := base()
	live := func(h string, ts uint64) normalize.Sample {
		s := engineSample(normalize.MetricRunning, normalize.Gauge, ts, 3)
		s.Placement.Host = h
		return s
	}
	gpuOn := func(h string, ts uint64, v float64) normalize.Sample {
		s := gpuSample(normalize.MetricSMClock, ts, v)
		s.Placement.Host = h
		return s
	}
	// Emit runs gc on every 16th call.
	tick := func() []Output {
		var out []Output
		for range 16 {
			out = append(out, j.Emit(false)...)
		}
		return out
	}
	// node-1 reports all along; node-2's GPU reports twice and goes silent,
	// while a long request that arrived just after its last sample is
	// pending.
	j.AddSamples([]normalize.Sample{live("node-1", b), gpuOn("node-2", b, 1980), gpuOn("node-2", b+5*sec, 1500)})
	flood := make([]normalize.Sample, 50_000)
	for i := range flood {
		flood[i] = gpuOn(fmt.Sprintf("fake-%05d", i), b+sec, 1)
	}
	j.AddSamples(flood)
	s := j.Stats()
	if s.Hosts != cfg.MaxHosts || s.GPUSeries != cfg.MaxHosts-1 {
		t.Fatalf("after the flood: %d hosts, %d GPUs; want the cap %d hosts (node-1 and %d GPUs)", s.Hosts, s.GPUSeries, cfg.MaxHosts, cfg.MaxHosts-1)
	}
	if want := int64(50_000 - (cfg.MaxHosts - 2)); s.DroppedSamples != want {
		t.Errorf("dropped samples %d, want %d (the flood past the cap)", s.DroppedSamples, want)
	}
	tick()
	if s := j.Stats(); s.EvictedHosts != 0 || s.EvictedSeries != 0 {
		t.Fatalf("evicted %d hosts, %d series before the clock moved", s.EvictedHosts, s.EvictedSeries)
	}

	long := request("long", b+6*sec, b+15*60*sec)
	long.Placement.Host = "node-2"
	j.AddSpans(&normalize.Batch{Requests: []normalize.Request{long}}, Ref{0, 1})

	// The event clock moves on with node-1 (every 10 s) to 16:50: the
	// fakes (last point at 0:01) fall behind cutoff − MaxSampleAge (0:15),
	// and so does node-2's GPU (0:05), but the long request on node-2
	// arrived at 0:06 and is still pending (until its end + MaxWait, 17:00).
	var got []Output
	for ts := b + 10*sec; ts <= b+(16*60+50)*sec; ts += 10 * sec {
		j.AddSamples([]normalize.Sample{live("node-1", ts)})
		got = append(got, tick()...)
	}
	s = j.Stats()
	if s.Hosts != 2 || s.EvictedHosts != int64(cfg.MaxHosts-2) {
		t.Fatalf("at 16:50: %d hosts (want node-1 and node-2), %d evicted (want %d)", s.Hosts, s.EvictedHosts, cfg.MaxHosts-2)
	}
	if s.GPUSeries != 1 || s.EvictedEntities != int64(cfg.MaxHosts-2) {
		t.Errorf("at 16:50: %d GPUs (want node-2's), %d entities evicted", s.GPUSeries, s.EvictedEntities)
	}
	if len(got) != 0 {
		t.Fatalf("joined %d requests before the long one's max wait", len(got))
	}
	// Past its end + MaxWait the long request is forced out, with the
	// GPU sample it arrived under (eviction did not take it).
	for ts := b + 17*60*sec; ts <= b+18*60*sec; ts += 10 * sec {
		j.AddSamples([]normalize.Sample{live("node-1", ts)})
		got = append(got, tick()...)
	}
	if len(got) != 1 || got[0].Row.UID != "long" {
		t.Fatalf("got %d rows, want the long request", len(got))
	}
	r := got[0].Row
	if r.GPUMatch != "pod" || r.GPU != "GPU-aaaa" {
		t.Errorf("long request joined without its GPU: gpu_match %q gpu %q", r.GPUMatch, r.GPU)
	}
	near(t, "sm_clock_min (as of arrival)", r.SMClockMinMHz, 1500)
	near(t, "sm_clock_age_ms", r.SMClockAgeMs, 1000)
	// Nothing pending holds node-2 any more: it goes at the next gc.
	tick()
	s = j.Stats()
	if s.Hosts != 1 || s.GPUSeries != 0 || s.EngineSeries != 1 {
		t.Errorf("after the long request: %d hosts, %d GPUs, %d engines; want node-1's engine alone", s.Hosts, s.GPUSeries, s.EngineSeries)
	}
	// There is room again: a new host is tracked, not dropped.
	dropped := s.DroppedSamples
	j.AddSamples([]normalize.Sample{gpuOn("node-3", b+18*60*sec, 1980)})
	if s := j.Stats(); s.Hosts != 2 || s.DroppedSamples != dropped {
		t.Errorf("a new host after eviction: %d hosts, dropped %d → %d", s.Hosts, dropped, s.DroppedSamples)
	}
}

// TestJoinEntityCap: past MaxEntities a new engine or GPU is dropped and
// counted; samples of tracked entities still go in.
func TestJoinEntityCap(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxEntities = 2
	j, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Close)
	b := base()
	g := func(id string, ts uint64) normalize.Sample {
		s := gpuSample(normalize.MetricSMClock, ts, 1980)
		s.Placement.GPU = id
		return s
	}
	j.AddSamples([]normalize.Sample{g("GPU-1", b), g("GPU-2", b), g("GPU-3", b), g("GPU-1", b+sec)})
	s := j.Stats()
	if s.GPUSeries != 2 || s.DroppedSamples != 1 || s.DuplicateSamples != 0 {
		t.Errorf("GPUs %d (want 2), dropped %d (want 1: GPU-3), duplicates %d", s.GPUSeries, s.DroppedSamples, s.DuplicateSamples)
	}
}

// TestPlacementKey: the resolve cache's key is the one it always was.
func TestPlacementKey(t *testing.T) {
	r := &normalize.Request{Model: "m", Placement: normalize.Placement{Host: "h", Pod: "p", Engine: "0"}}
	for _, h := range []*hostState{{}, {gen: 7, version: 12}, {gen: math.MaxUint64, version: -1}} {
		want := r.Placement.Host + "\x00" + r.Placement.Pod + "\x00" + r.Model + "\x00" + r.Placement.Engine + "\x00" + fmt.Sprint(h.gen) + "\x00" + fmt.Sprint(h.version)
		if got := placementKey(r, h); got != want {
			t.Errorf("placementKey = %q, want %q", got, want)
		}
	}
}

// TestSortOutputs: by end time, then uid, ties in their order.
func TestSortOutputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 60; n++ {
		out := make([]Output, n)
		for i := range out {
			out[i].Row.EndNs = uint64(rng.IntN(5))
			out[i].Row.UID = fmt.Sprint(rng.IntN(4))
			out[i].Row.KafkaOffset = int64(i) // the original position
		}
		want := slices.Clone(out)
		slices.SortStableFunc(want, func(a, b Output) int {
			return cmp.Or(cmp.Compare(a.Row.EndNs, b.Row.EndNs), strings.Compare(a.Row.UID, b.Row.UID))
		})
		got := sortOutputs(out)
		for i := range want {
			if got[i].Row.KafkaOffset != want[i].Row.KafkaOffset {
				t.Fatalf("n=%d: position %d holds output %d, want %d", n, i, got[i].Row.KafkaOffset, want[i].Row.KafkaOffset)
			}
		}
	}
}
