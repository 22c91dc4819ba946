package enrich

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/tailcause/tailcause/enrich/join"
	"github.com/tailcause/tailcause/enrich/normalize"
	"github.com/tailcause/tailcause/internal/chstore"
)

// The row encoders as they were before the columnar blocks (each row a
// []any of its values, as chstore.Store.Insert takes it): the reference
// every block's rows must equal.

func strsRef(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func requestValuesRef(r *join.Row, now time.Time) []any {
	return []any{
		r.UID, r.TraceID, r.SpanID, r.ParentSpanID, r.RequestID, r.Source, r.SpanName, r.Service, r.Model,
		r.Host, r.Pod, r.Namespace, r.ServiceInstance, r.Engine, r.GPU, r.GPUIndex,
		r.StartNs, r.EndNs, secs(r.StartNs), b2u(r.Error), r.FinishReason,
		r.E2EMs, r.TTFTMs, r.QueueMs, r.PrefillMs, r.DecodeMs, r.InferenceMs, r.TPOTMs, r.KVTransferMs,
		r.PromptTokens, r.CompletionTokens, r.CachedTokens, r.MaxTokens,
		r.TimelineSource, r.ITLP50Ms, r.ITLP99Ms, r.ITLMaxMs, r.StallCount, r.StallMs, r.Retracts,
		r.EngineMatch, r.GPUMatch,
		r.RunningAtArrival, r.RunningAgeMs, r.WaitingAtArrival, r.WaitingAgeMs,
		r.KVUsageAtArrival, r.KVUsageMax, r.KVUsageAgeMs, r.PreemptionsDuring, r.PreemptAgeMs,
		r.PrefixHitRatio, r.PrefixAgeMs, r.EnginePromptTPS, r.EngineGenTPS, r.EngineTPSAgeMs,
		r.EngineMeanPromptTokens, r.EngineMeanOutputTokens, r.EngineStepTokens,
		r.SMClockMinMHz, r.SMClockNormMHz, r.SMClockRatio, r.SMClockAgeMs,
		r.ThrottleReasons, r.ThrottleAgeMs, r.GPUTempMaxC, r.GPUTempAgeMs, r.PowerMaxW, r.PowerAgeMs,
		r.DRAMActiveMax, r.DRAMActiveAgeMs, r.PCIeBytesPerSMax, r.PCIeAgeMs, r.XIDLast, r.XIDAgeMs,
		strsRef(r.AttrKeys), strsRef(r.AttrValues), r.KafkaPartition, r.KafkaOffset, now,
	}
}

func stallValuesRef(s *join.Stall) []any {
	return []any{
		s.RequestUID, s.TraceID, s.Service, s.Model, s.Host, s.Pod, s.Engine, s.GPU, s.TokenIndex,
		s.StartNs, s.EndNs, secs(s.StartNs), s.DurationMs, s.Preemptions, s.Retracts, s.KVUsageMax,
		s.ThrottleReasons, s.SMClockMinMHz, s.XIDLast, s.EnginePromptTPS, strsRef(s.Events),
	}
}

func gpuSampleValuesRef(s *normalize.Sample) []any {
	return []any{s.Placement.Host, s.Placement.GPU, s.Placement.GPUIndex, s.Placement.Pod, s.Placement.Namespace,
		string(s.Metric), s.TimeNs, secs(s.TimeNs), s.Value}
}

func engineSampleValuesRef(s *normalize.Sample, delta, rate float64) []any {
	return []any{s.Placement.Host, s.Placement.Pod, s.Model, s.Placement.Engine, s.Placement.ServiceInstance,
		string(s.Metric), s.TimeNs, secs(s.TimeNs), s.Value, delta, rate}
}

// sameValues reports how got differs from want: each value of the same
// dynamic type and the same value (floats bit for bit).
func sameValues(t *testing.T, what string, got, want []any) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if reflect.TypeOf(got[i]) != reflect.TypeOf(want[i]) {
			t.Fatalf("%s: column %d is a %T, want %T", what, i, got[i], want[i])
		}
		if f, ok := want[i].(float64); ok {
			if math.Float64bits(got[i].(float64)) != math.Float64bits(f) {
				t.Fatalf("%s: column %d is %v, want %v (bits)", what, i, got[i], f)
			}
			continue
		}
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("%s: column %d is %#v, want %#v", what, i, got[i], want[i])
		}
	}
}

// TestBlockEncoderValues: the rows of the blocks the encoders build —
// NaN, 0 and -0, nil and empty arrays, repeated and changed values — are
// each exactly the reference rows, in order, and reusing an encoder's
// buffers after a reset gives the next block's rows exactly too.
func TestBlockEncoderValues(t *testing.T) {
	nan := math.NaN()
	negZero := math.Copysign(0, -1)
	now := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	base := join.Row{UID: "u1", TraceID: "t", SpanID: "s", Model: "m", Host: "h", StartNs: 1767607200e9, EndNs: 1767607201e9,
		E2EMs: 1000, TTFTMs: nan, QueueMs: 0, PromptTokens: 5, StallCount: 2, KVUsageMax: 0.5, ThrottleReasons: 4,
		AttrKeys: []string{"a"}, AttrValues: []string{"b"}, KafkaPartition: 1, KafkaOffset: 7}
	reqs := []join.Row{base, base, base, base, base}
	reqs[1].UID, reqs[1].QueueMs, reqs[1].AttrKeys, reqs[1].AttrValues = "u2", negZero, nil, nil
	reqs[2].UID, reqs[2].QueueMs, reqs[2].TTFTMs, reqs[2].Error, reqs[2].Host = "u3", 0, 12.5, true, "h2"
	reqs[3].UID, reqs[3].StartNs, reqs[3].AttrKeys, reqs[3].AttrValues = "u4", base.StartNs+5e8, []string{}, []string{}
	reqs[4].UID, reqs[4].TTFTMs, reqs[4].KafkaOffset = "u5", math.Inf(1), 1<<40
	st := []join.Stall{{RequestUID: "u1", TokenIndex: 3, StartNs: 1767607200e9, DurationMs: 40, Preemptions: nan, Events: []string{"x"}},
		{RequestUID: "u1", TokenIndex: 9, StartNs: 1767607200e9, DurationMs: 40, Preemptions: nan},
		{RequestUID: "u2", TokenIndex: 9, StartNs: 1767607203e9, DurationMs: negZero, Preemptions: 1}}
	gpu := normalize.Sample{Family: normalize.FamilyGPU, Metric: normalize.MetricSMClock, TimeNs: 1767607200e9,
		Placement: normalize.Placement{Host: "h", GPU: "GPU-1", GPUIndex: "0"}, Value: 1400}
	gpus := []normalize.Sample{gpu, gpu, gpu}
	gpus[1].Placement.GPU, gpus[1].Placement.GPUIndex = "GPU-2", "1"
	gpus[2].Metric, gpus[2].Value, gpus[2].TimeNs = normalize.MetricGPUTemp, negZero, gpu.TimeNs+1
	eng := normalize.Sample{Family: normalize.FamilyEngine, Metric: normalize.MetricRunning, TimeNs: 1767607200e9, Model: "m",
		Placement: normalize.Placement{Host: "h", Pod: "p", Engine: "0"}, Value: 3}
	engs := make([]engineIn, 4)
	for i, dr := range [][2]float64{{nan, nan}, {nan, nan}, {2, 0.2}, {0, negZero}} {
		s := eng
		s.Value = float64(i)
		engs[i] = engineIn{Sample: &s, delta: dr[0], rate: dr[1]}
	}

	re, se := newBlockEncoder(requestCols), newBlockEncoder(stallCols)
	ge, ee := newBlockEncoder(gpuSampleCols), newBlockEncoder(engineSampleCols)
	check := func(round string) {
		t.Helper()
		var got, want [][]any
		for i := range reqs {
			re.add(&requestIn{Row: &reqs[i], enrichedAt: now})
			want = append(want, requestValuesRef(&reqs[i], now))
		}
		got = append(got, re.block().Rows()...)
		for i := range st {
			se.add(&st[i])
			want = append(want, stallValuesRef(&st[i]))
		}
		got = append(got, se.block().Rows()...)
		for i := range gpus {
			ge.add(&gpus[i])
			want = append(want, gpuSampleValuesRef(&gpus[i]))
		}
		got = append(got, ge.block().Rows()...)
		for i := range engs {
			ee.add(&engs[i])
			want = append(want, engineSampleValuesRef(engs[i].Sample, engs[i].delta, engs[i].rate))
		}
		got = append(got, ee.block().Rows()...)
		if len(got) != len(want) {
			t.Fatalf("%s: %d rows, want %d", round, len(got), len(want))
		}
		for i := range want {
			sameValues(t, round+": row "+string(rune('a'+i)), got[i], want[i])
		}
		re.reset()
		se.reset()
		ge.reset()
		ee.reset()
	}
	check("first block")
	// The second round reuses the buffers, with other values in them.
	for i := range reqs {
		reqs[i].UID, reqs[i].E2EMs, reqs[i].AttrKeys = reqs[i].UID+"-2", reqs[i].E2EMs+1, nil
	}
	st[0].Events, st[1].TokenIndex = nil, 11
	gpus[0].Value, gpus[1].Placement.Host = nan, "h3"
	check("after a reset")
}

// TestBlockTables: each table's columns are its encoder's, one value per
// column, in the order of schemas/clickhouse (the rows' reference).
func TestBlockTables(t *testing.T) {
	f := func(tb chstore.Table, cols int, row []any) {
		t.Helper()
		if len(tb.Columns) != cols || len(row) != cols {
			t.Errorf("%s: %d columns, %d encoder columns, %d reference values", tb.Name, len(tb.Columns), cols, len(row))
		}
	}
	now := time.Now()
	f(requestsTable, len(requestCols), requestValuesRef(&join.Row{}, now))
	f(stallsTable, len(stallCols), stallValuesRef(&join.Stall{}))
	f(gpuSamplesTable, len(gpuSampleCols), gpuSampleValuesRef(&normalize.Sample{}))
	f(engineSamplesTable, len(engineSampleCols), engineSampleValuesRef(&normalize.Sample{}, 0, 0))
}
