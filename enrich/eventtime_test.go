package enrich

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tailcause/tailcause/enrich/normalize"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/internal/otlpfixture"
	"github.com/tailcause/tailcause/internal/testkit"
)

func TestEventBounds(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ns := func(d time.Duration) uint64 { return uint64(now.Add(d).UnixNano()) }
	cfg := testConfig([]string{"127.0.0.1:1"}, "s", "m", "d")
	for _, tc := range []struct {
		age, skew time.Duration
		keep      []time.Duration // of the times below
	}{
		{0, time.Minute, []time.Duration{-400 * 24 * time.Hour, -time.Hour, 0, 59 * time.Second}},
		{30 * 24 * time.Hour, time.Minute, []time.Duration{-time.Hour, 0, 59 * time.Second}},
		{time.Hour, 10 * time.Minute, []time.Duration{-time.Hour, 0, 59 * time.Second, 10 * time.Minute}},
	} {
		cfg.MaxEventAge, cfg.MaxEventSkew = tc.age, tc.skew
		p, err := New(cfg, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		p.now = func() time.Time { return now }
		times := []time.Duration{-400 * 24 * time.Hour, -time.Hour, 0, 59 * time.Second, 10 * time.Minute, 75 * 365 * 24 * time.Hour}
		var b normalize.Batch
		var samples []normalize.Sample
		for _, d := range times {
			b.Requests = append(b.Requests, normalize.Request{UID: d.String(), StartNs: ns(d - time.Second), EndNs: ns(d)})
			b.Steps = append(b.Steps, normalize.Step{SpanID: d.String(), StartNs: ns(d), EndNs: ns(d)})
			samples = append(samples, normalize.Sample{Metric: normalize.MetricKVUsage, TimeNs: ns(d)})
		}
		bounds := p.bounds()
		n, why := bounds.spans(&b)
		kept, m, swhy := bounds.samples(samples)
		var want []string
		for _, d := range tc.keep {
			want = append(want, d.String())
		}
		var got, gotSteps, gotSamples []string
		for _, r := range b.Requests {
			got = append(got, r.UID)
		}
		for _, s := range b.Steps {
			gotSteps = append(gotSteps, s.SpanID)
		}
		for _, s := range kept {
			gotSamples = append(gotSamples, time.Unix(0, int64(s.TimeNs)).Sub(now).String())
		}
		// A request starts a second before its end: the oldest one kept
		// under a one-hour horizon is the step and sample at exactly -1h.
		wantReq := want
		if tc.age == time.Hour {
			wantReq = want[1:]
		}
		if strings.Join(got, " ") != strings.Join(wantReq, " ") || strings.Join(gotSteps, " ") != strings.Join(want, " ") || strings.Join(gotSamples, " ") != strings.Join(want, " ") {
			t.Errorf("age %s skew %s: kept requests %v, steps %v, samples %v; want %v", tc.age, tc.skew, got, gotSteps, gotSamples, want)
		}
		if n != 2*len(times)-len(wantReq)-len(want) || m != len(times)-len(want) {
			t.Errorf("age %s skew %s: dropped %d spans and %d samples", tc.age, tc.skew, n, m)
		}
		if !strings.Contains(why, "spans outside the accepted event time "+bounds.String()) || !strings.Contains(swhy, "samples outside the accepted event time") {
			t.Errorf("details %q, %q", why, swhy)
		}
	}
}

// far is 2100-01-01, the date of the poison records.
var far = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

// poisonSpan is a vLLM request of another host ending in 2100.
func poisonSpan() ptrace.Traces {
	td := otlpfixture.TracesFor(0, 1, false)
	rs := td.ResourceSpans().At(0)
	rs.Resource().Attributes().PutStr("host.name", "evil-host")
	rs.Resource().Attributes().PutStr("k8s.pod.name", "evil-pod")
	sp := rs.ScopeSpans().At(0).Spans().At(0)
	sp.SetTraceID(pcommon.TraceID{0xee, 1})
	sp.SetStartTimestamp(pcommon.NewTimestampFromTime(far))
	sp.SetEndTimestamp(pcommon.NewTimestampFromTime(far.Add(3 * time.Second)))
	return td
}

// poisonMetrics is an engine scrape of another host taken in 2100.
func poisonMetrics() pmetric.Metrics {
	md := pmetric.NewMetrics()
	otlpfixture.Metrics()[0].CopyTo(md)
	rm := md.ResourceMetrics().At(0)
	rm.Resource().Attributes().PutStr("host.name", "evil-host")
	rm.Resource().Attributes().PutStr("k8s.pod.name", "evil-pod")
	ms := rm.ScopeMetrics().At(0).Metrics()
	for i := range ms.Len() {
		m := ms.At(i)
		switch m.Type() {
		case pmetric.MetricTypeGauge:
			m.Gauge().DataPoints().At(0).SetTimestamp(pcommon.NewTimestampFromTime(far))
		case pmetric.MetricTypeSum:
			m.Sum().DataPoints().At(0).SetTimestamp(pcommon.NewTimestampFromTime(far))
		}
	}
	return md
}

// TestEventTimeFarFutureChangesNoOtherHost: a span ending in 2100 and an
// engine scrape taken in 2100, each of another host, are rejected and
// dead-lettered, and every request of the fixture gets exactly its known
// features. Accepted, the span moved the join's clock to 2100 — every sample
// after it was "too old", every feature NaN — and the scrape paused its
// partition's broadcast reader for good, so the samples behind it in the
// partition never reached the join.
func TestEventTimeFarFutureChangesNoOtherHost(t *testing.T) {
	for _, poison := range []string{"traces", "metrics"} {
		t.Run(poison, func(t *testing.T) {
			addr := testkit.Kafka(t)
			st := chstoretest.Fresh(t)
			// One metric partition: the fixture's scrapes sit behind the poison.
			cfg := testConfig([]string{addr}, testkit.FreshTopic(t, addr, 3), testkit.FreshTopic(t, addr, 1), testkit.FreshTopic(t, addr, 1))
			enc, prod := producer(t, cfg.Brokers)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if poison == "metrics" {
				mrecs, _, err := enc.AppendMetrics(nil, nil, poisonMetrics())
				if err != nil {
					t.Fatal(err)
				}
				if err := prod.WriteRecords(ctx, cfg.MetricsTopic, mrecs); err != nil {
					t.Fatal(err)
				}
			}
			produceMetrics(t, cfg.Brokers, cfg.MetricsTopic)
			if poison == "traces" {
				produceTraces(t, cfg.Brokers, cfg.SpansTopic, poisonSpan())
			}
			ps, stop := runPipelines(t, 1, cfg, st)
			if poison == "traces" {
				time.Sleep(2 * time.Second) // the poison is joined first
			}
			produceTraces(t, cfg.Brokers, cfg.SpansTopic, otlpfixture.Traces())

			want := uint64(otlpfixture.Requests + 1)
			waitFor(t, "every request and the poison record rejected", 90*time.Second, func() bool {
				return rows(t, st, false) >= want && count(t, st, "SELECT count() FROM rejected_input WHERE reason = 'event_time'") >= 1
			})
			time.Sleep(time.Second)
			stop()
			if n := rows(t, st, false); n != want {
				t.Errorf("requests %d, want %d (the 2100 one is not among them)", n, want)
			}
			otlpfixture.CheckRows(t, st.Conn())
			if n := count(t, st, "SELECT count() FROM rejected_input WHERE reason = 'event_time' AND signal = '"+poison+"' AND detail LIKE '%2100-01-01%'"); n != 1 {
				t.Errorf("%d event_time rejects naming 2100, want 1", n)
			}
			if n := count(t, st, "SELECT count() FROM engine_samples WHERE host = 'evil-host'"); n != 0 {
				t.Errorf("%d engine samples of 2100 written", n)
			}
			if dl := deadLetters(t, cfg.Brokers, cfg.DeadLetterTopic, 1); header(dl[0], "tailcause.reason") != "event_time" {
				t.Errorf("dead letter %s: reason %q", dl[0].Key, header(dl[0], "tailcause.reason"))
			}
			if n := ps[0].C.OutOfBounds.Load(); n < 1 {
				t.Errorf("out of bounds counted %d", n)
			}
		})
	}
}
