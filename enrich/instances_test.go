package enrich

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/internal/otlpfixture"
	"github.com/tailcause/tailcause/internal/testkit"
)

// runPipelines starts n enricher instances in one consumer group and
// returns a stop function that waits for them.
func runPipelines(t *testing.T, n int, cfg Config, st RowWriter) ([]*Pipeline, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ps []*Pipeline
	for i := 0; i < n; i++ {
		p, err := New(cfg, st, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Run(ctx); err != nil {
				t.Errorf("instance %d: %v", i, err)
			}
		}()
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
	}
	t.Cleanup(stop)
	return ps, stop
}

// waitGroupMembers waits until the consumer group is stable with n members.
func waitGroupMembers(t *testing.T, addr, group string, n int) {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(addr), Timeout: 10 * time.Second, Transport: tr}
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := client.DescribeGroups(context.Background(), &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
		if err == nil && len(resp.Groups) == 1 && resp.Groups[0].GroupState == "Stable" && len(resp.Groups[0].Members) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s did not become stable with %d members: %+v %v", group, n, resp, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestTwoInstancesOnRealKafka proves the join is correct when the span
// partitions are split between two enrichers: each instance reads every
// metric partition (broadcast), so every request meets its host's samples
// whichever instance owns its trace.
func TestTwoInstancesOnRealKafka(t *testing.T) {
	addr := testkit.Kafka(t)
	st := chstoretest.Fresh(t)
	brokers := []string{addr}
	spans := testkit.FreshTopic(t, addr, 4)
	metrics := testkit.FreshTopic(t, addr, 2)
	dlq := testkit.FreshTopic(t, addr, 1)
	cfg := testConfig(brokers, spans, metrics, dlq)
	ps, stop := runPipelines(t, 2, cfg, st)
	// Both members must have joined the group before the data arrives, so
	// that the partitions are really split.
	waitGroupMembers(t, addr, cfg.GroupID, 2)
	produceFixture(t, brokers, spans, metrics)
	want := uint64(otlpfixture.Requests + 1)
	waitFor(t, "all requests in ClickHouse", 120*time.Second, func() bool {
		return count(t, st, "SELECT count() FROM requests FINAL") >= want
	})
	time.Sleep(time.Second) // let commits land
	stop()
	if a, b := ps[0].C.SpanRecords.Load(), ps[1].C.SpanRecords.Load(); a == 0 || b == 0 {
		t.Fatalf("span records per instance: %d and %d: the group did not split the partitions", a, b)
	}
	if a, b := ps[0].C.MetricRecords.Load(), ps[1].C.MetricRecords.Load(); a == 0 || b == 0 {
		t.Fatalf("metric records per instance: %d and %d: both must read every metric partition", a, b)
	}
	if n := count(t, st, "SELECT count() FROM requests FINAL"); n != want {
		t.Errorf("requests = %d, want %d", n, want)
	}
	if n := count(t, st, "SELECT count() FROM engine_samples FINAL"); n != 8*otlpfixture.EngineScrapes {
		t.Errorf("engine samples = %d: written once by the samples group, not once per instance", n)
	}
	otlpfixture.CheckRows(t, st.Conn())
}
