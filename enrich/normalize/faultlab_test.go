package normalize

import (
	"context"
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tailcause/tailcause/lab/faultlab"
)

// normalizingSink normalizes everything the simulator emits, as the
// enricher would, and keeps the counts.
type normalizingSink struct {
	requests, steps, samples int
	ignored                  map[string]int
	rejects                  []Reject
	bad                      []string
	metrics                  map[Metric]int
	stepsWithRequest         int
}

func (s *normalizingSink) add(b Batch) {
	s.requests += len(b.Requests)
	s.steps += len(b.Steps)
	s.samples += len(b.Samples)
	s.rejects = append(s.rejects, b.Rejects...)
	for k, v := range b.Ignored {
		s.ignored[k] += v
	}
	for _, r := range b.Requests {
		switch {
		case r.Model == "" || r.Service == "" || r.Placement.Host == "" || r.Placement.Pod == "":
			s.bad = append(s.bad, "request without model/service/host/pod: "+r.UID)
		case math.IsNaN(r.E2EMs) || math.IsNaN(r.TTFTMs) || r.PromptTokens <= 0 || r.CompletionTokens < 0:
			s.bad = append(s.bad, "request without latencies or token counts: "+r.UID)
		case r.Source == SourceVLLM && (math.IsNaN(r.QueueMs) || math.IsNaN(r.DecodeMs) || r.RequestID == "" || r.FinishReason == ""):
			s.bad = append(s.bad, "vLLM request without queue/decode/request id/finish reason: "+r.UID)
		}
	}
	for _, st := range b.Steps {
		// The root span usually ends (and is exported) after its steps,
		// so steps are tied to their request by trace id in the join.
		if st.TraceID != "" && st.EndNs >= st.StartNs && st.Kind != "" {
			s.stepsWithRequest++
		}
	}
	for _, sm := range b.Samples {
		s.metrics[sm.Metric]++
		if sm.Placement.Host == "" || (sm.Family == FamilyGPU && (sm.Placement.GPU == "" || sm.Placement.Pod == "")) ||
			(sm.Family == FamilyEngine && (sm.Model == "" || sm.Placement.Pod == "")) {
			s.bad = append(s.bad, "sample without placement: "+string(sm.Metric))
		}
	}
}

func (s *normalizingSink) Traces(_ context.Context, td ptrace.Traces) error {
	s.add(Traces(td))
	return nil
}

func (s *normalizingSink) Metrics(_ context.Context, md pmetric.Metrics) error {
	s.add(Metrics(md))
	return nil
}

// TestFaultLabOutputNormalizes runs the fault lab and feeds everything it
// emits through the normalizers: nothing is rejected, no metric is unknown,
// and every request, step and sample carries the fields the join needs.
func TestFaultLabOutputNormalizes(t *testing.T) {
	sc, err := faultlab.LoadScenario("thermal_throttle")
	if err != nil {
		t.Fatal(err)
	}
	cfg := faultlab.DefaultConfig()
	cfg.Scenario = sc
	cfg.Duration = 5 * time.Minute
	cfg.Seed = 7
	sink := &normalizingSink{ignored: map[string]int{}, metrics: map[Metric]int{}}
	if _, err := faultlab.Run(context.Background(), cfg, sink); err != nil {
		t.Fatal(err)
	}
	if len(sink.rejects) > 0 {
		t.Fatalf("%d rejects, first: %+v", len(sink.rejects), sink.rejects[0])
	}
	if sink.ignored[IgnoredUnknownMetric] > 0 {
		t.Errorf("%d unknown metric points", sink.ignored[IgnoredUnknownMetric])
	}
	if len(sink.bad) > 0 {
		t.Fatalf("%d incomplete items, first: %s", len(sink.bad), sink.bad[0])
	}
	if sink.requests < 1000 || sink.steps == 0 || sink.stepsWithRequest != sink.steps {
		t.Errorf("requests %d steps %d (well-formed %d)", sink.requests, sink.steps, sink.stepsWithRequest)
	}
	for _, m := range []Metric{MetricRunning, MetricWaiting, MetricKVUsage, MetricPreemptions, MetricPrefixQueries, MetricPrefixHits,
		MetricPromptTokens, MetricGenerationTokens, MetricSMClock, MetricGPUTemp, MetricPower, MetricDRAMActive, MetricPCIeTx,
		MetricPCIeRx, MetricClockReasons, MetricXID} {
		if sink.metrics[m] == 0 {
			t.Errorf("no %s samples", m)
		}
	}
}
