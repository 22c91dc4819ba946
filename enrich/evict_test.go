package enrich

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/internal/otlpfixture"
	"github.com/tailcause/tailcause/internal/testkit"
)

// fakeHosts is one DCGM scrape of one GPU on each of n made-up hosts, at t.
func fakeHosts(n int, t time.Time) pmetric.Metrics {
	md := pmetric.NewMetrics()
	for i := range n {
		rm := md.ResourceMetrics().AppendEmpty()
		a := rm.Resource().Attributes()
		a.PutStr("service.name", "dcgm-exporter")
		a.PutStr("service.instance.id", fmt.Sprintf("10.9.%d.%d:9400", i/250, i%250))
		m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
		m.SetName("DCGM_FI_DEV_SM_CLOCK")
		dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
		dp.SetTimestamp(pcommon.NewTimestampFromTime(t))
		dp.SetDoubleValue(1980)
		l := dp.Attributes()
		l.PutStr("gpu", "0")
		l.PutStr("UUID", fmt.Sprintf("GPU-fake-%05d", i))
		l.PutStr("Hostname", fmt.Sprintf("fake-%05d", i))
	}
	return md
}

// TestPipelineEvictsFakeHosts: 50k made-up host names on the metric topic
// fill the enricher's join only up to its host cap (the rest dropped and
// counted), and once the event clock has moved on by the retention they
// are evicted: the join's state returns to what the live traffic needs.
// (They used to stay forever, and the join's periodic trim walked them all.)
func TestPipelineEvictsFakeHosts(t *testing.T) {
	addr := testkit.Kafka(t)
	st := chstoretest.Fresh(t)
	cfg := testConfig([]string{addr}, testkit.FreshTopic(t, addr, 1), testkit.FreshTopic(t, addr, 1), testkit.FreshTopic(t, addr, 1))
	const fakes = 50_000
	maxHosts := cfg.Join.MaxHosts

	produceMetrics(t, cfg.Brokers, cfg.MetricsTopic) // node-1 first: it is tracked
	enc, prod := producer(t, cfg.Brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	recs, _, err := enc.AppendMetrics(nil, nil, fakeHosts(fakes, otlpfixture.T0.Add(time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	for len(recs) > 0 {
		n := min(len(recs), 5000)
		if err := prod.WriteRecords(ctx, cfg.MetricsTopic, recs[:n]); err != nil {
			t.Fatalf("produce fake hosts: %v", err)
		}
		recs = recs[n:]
	}
	produceTraces(t, cfg.Brokers, cfg.SpansTopic, otlpfixture.Traces())

	ps, stop := runPipelines(t, 1, cfg, st)
	p := ps[0]
	want := uint64(otlpfixture.Requests + 1)
	waitFor(t, "the flood read and the fixture's requests written", 3*time.Minute, func() bool {
		s := p.JoinStats()
		return s.DroppedSamples >= int64(fakes-maxHosts+1) && rows(t, st, false) >= want
	})
	s := p.JoinStats()
	if s.Hosts != maxHosts || s.DroppedSamples != int64(fakes-maxHosts+1) || s.EvictedHosts != 0 {
		t.Fatalf("after the flood: %d hosts (want the cap %d), %d samples dropped (want %d), %d evicted (want 0)",
			s.Hosts, maxHosts, s.DroppedSamples, fakes-maxHosts+1, s.EvictedHosts)
	}
	otlpfixture.CheckRows(t, st.Conn()) // node-1 was tracked before the flood: its features are whole

	// The event clock moves on: a request of node-1 twenty minutes later.
	late := 150 // starts at T0 + 5 s + 8 s·150 = T0 + 20:05
	produceTraces(t, cfg.Brokers, cfg.SpansTopic, otlpfixture.TracesFor(late, late+1, false))
	waitFor(t, "the idle hosts evicted", 2*time.Minute, func() bool { return p.JoinStats().Hosts == 0 })
	s = p.JoinStats()
	if s.EvictedHosts != int64(maxHosts) || s.EvictedEntities < int64(maxHosts) || s.GPUSeries != 0 || s.EngineSeries != 0 {
		t.Errorf("after the clock moved: %d hosts evicted (want %d), %d entities evicted, %d GPUs and %d engines left (want 0)",
			s.EvictedHosts, maxHosts, s.EvictedEntities, s.GPUSeries, s.EngineSeries)
	}
	waitFor(t, "the late request written", time.Minute, func() bool { return rows(t, st, false) >= want+1 })
	stop()
	if n := rows(t, st, false); n != want+1 {
		t.Errorf("requests %d, want %d", n, want+1)
	}
}
