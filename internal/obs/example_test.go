package obs_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tailcause/tailcause/internal/obs"
)

// Counters a role already keeps, as enrich.Pipeline.C does.
type Counters struct {
	SpanRecords, Requests atomic.Int64
	Pending               int
}

// A role exposes its counters and readiness; main passes the registry and
// the checks (obs.ClickHouseCheck(store), obs.KafkaCheck(brokers, topics...)).
func Example() {
	var c Counters
	c.SpanRecords.Add(42)
	c.Pending = 3

	reg := prometheus.NewRegistry() // obs.NewRegistry() adds Go and process metrics
	reg.MustRegister(obs.NewFuncCollector("tailcause_enrich", func() []obs.Value {
		return obs.StructValues(&c, map[string]obs.Field{
			"SpanRecords": {Help: "Span records read from Kafka."},
			"Requests":    {Help: "Request rows written to ClickHouse."},
			"Pending":     {Help: "Requests waiting for their join.", Gauge: true},
		})
	}))
	ready := obs.Check{Name: "clickhouse", Run: func(context.Context) error { return nil }}
	s, err := obs.New(obs.DefaultConfig(), reg, []obs.Check{ready}, nil)
	if err != nil {
		panic(err)
	}
	// In a role: s.Start(ctx) and, on the way out, s.Shutdown(ctx).
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, path := range []string{"/metrics", "/readyz"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if line != "" && !strings.HasPrefix(line, "#") {
				fmt.Println(path, line)
			}
		}
	}
	// Output:
	// /metrics tailcause_enrich_pending 3
	// /metrics tailcause_enrich_requests_total 0
	// /metrics tailcause_enrich_span_records_total 42
	// /readyz [+]clickhouse ok
	// /readyz ready
}
