package enrich

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/tailcause/tailcause/enrich/join"
	"github.com/tailcause/tailcause/enrich/normalize"
	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/otlpfixture"
	"github.com/tailcause/tailcause/internal/otlpkafka"
	"github.com/tailcause/tailcause/internal/testkit"
)

func loadBatches(b *testing.B, l otlpfixture.Load) (spans []normalize.Batch, samples []normalize.Sample) {
	b.Helper()
	for _, md := range l.Metrics() {
		samples = append(samples, normalize.Metrics(md).Samples...)
	}
	for _, td := range l.Traces(100) {
		spans = append(spans, normalize.Traces(td))
	}
	return spans, samples
}

// BenchmarkJoin is the join alone: samples and requests of a 16-host fleet
// in, joined rows out. ns/request is the figure to watch.
func BenchmarkJoin(b *testing.B) {
	l := otlpfixture.Load{Hosts: 16, Duration: 10 * time.Minute, Requests: 20000, Seed: 1}
	spans, samples := loadBatches(b, l)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j, err := join.New(join.DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		j.AddSamples(samples)
		n := 0
		for k := range spans {
			j.AddSpans(&spans[k], join.Ref{Offset: int64(k)})
			if k%10 == 0 {
				n += len(j.Emit(false))
			}
		}
		n += len(j.Emit(true))
		if n != l.Requests {
			b.Fatalf("joined %d of %d", n, l.Requests)
		}
		j.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*l.Requests), "ns/request")
}

// BenchmarkRowEncoding is one enriched row turned into insert values.
func BenchmarkRowEncoding(b *testing.B) {
	r := join.Row{UID: "0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", Model: "llama-3-8b", Host: "node-1", AttrKeys: []string{"a"}, AttrValues: []string{"b"}}
	now := time.Now()
	buf := make([]any, 0, len(requestsTable.Columns))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = requestValues(buf[:0], &r, now)
	}
	if len(buf) != len(requestsTable.Columns) {
		b.Fatalf("%d values for %d columns", len(buf), len(requestsTable.Columns))
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkJoinMemory reports the join's memory per tracked host (one
// engine and one GPU, 15 minutes of samples at 10 s / 30 s scrapes) and per
// in-flight (pending) request.
func BenchmarkJoinMemory(b *testing.B) {
	for i := 0; i < b.N; i++ {
		hosts := 500
		l := otlpfixture.Load{Hosts: hosts, Duration: 15 * time.Minute, Requests: 50000, Seed: 2}
		var samples []normalize.Sample
		for _, md := range l.Metrics() {
			samples = append(samples, normalize.Metrics(md).Samples...)
		}
		var batches []normalize.Batch
		for _, td := range l.Traces(500) {
			batches = append(batches, normalize.Traces(td))
		}
		j, err := join.New(join.DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		h0 := heapInUse()
		j.AddSamples(samples)
		h1 := heapInUse()
		for k := range batches {
			// Requests only: the samples' watermark must not release them.
			batches[k].Samples = nil
			j.AddSpans(&batches[k], join.Ref{Offset: int64(k)})
		}
		h2 := heapInUse()
		b.ReportMetric(float64(int64(h1)-int64(h0))/float64(hosts), "B/host(engine+gpu,15min)")
		b.ReportMetric(float64(int64(h2)-int64(h1))/float64(j.Pending()), "B/pending-request")
		runtime.KeepAlive(batches)
		runtime.KeepAlive(samples)
		j.Close()
	}
}

// BenchmarkEndToEnd measures the sustained rate of the whole enrich path on
// the real broker and ClickHouse — spans and metric points produced to
// Kafka, joined, written — next to the raw clickhouse-go insert rate of the
// same number of request rows measured in the same run (the ceiling).
func BenchmarkEndToEnd(b *testing.B) {
	kafkaAddr := testkit.Kafka(b)
	chAddr := testkit.ClickHouse(b)
	const requests = 100000
	l := otlpfixture.Load{Hosts: 16, Duration: 10 * time.Minute, Requests: requests, Seed: 3}
	points := l.MetricPoints()
	enc, err := otlpkafka.NewEncoder(otlpkafka.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	var spanRecs, metricRecs []kafkax.Record
	for _, md := range l.Metrics() {
		if metricRecs, _, err = enc.AppendMetrics(metricRecs, nil, md); err != nil {
			b.Fatal(err)
		}
	}
	for _, td := range l.Traces(100) {
		if spanRecs, _, err = enc.AppendTraces(spanRecs, nil, td); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < b.N; i++ {
		cfg := chstore.DefaultConfig()
		// No TTL: the fault lab's rows are dated early 2026.
		cfg.Addr, cfg.Database, cfg.TTL = chAddr, testkit.FreshDatabase(b, chAddr), 0
		ctx := context.Background()
		st, err := chstore.Open(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.Migrate(ctx, nil); err != nil {
			b.Fatal(err)
		}
		spans, metrics, dlq := testkit.FreshTopic(b, kafkaAddr, 3), testkit.FreshTopic(b, kafkaAddr, 2), testkit.FreshTopic(b, kafkaAddr, 1)
		pc := kafkax.DefaultConfig()
		pc.Brokers = []string{kafkaAddr}
		prod, err := kafkax.NewProducer(pc)
		if err != nil {
			b.Fatal(err)
		}
		if err := prod.WriteRecords(ctx, metrics, metricRecs); err != nil {
			b.Fatal(err)
		}
		if err := prod.WriteRecords(ctx, spans, spanRecs); err != nil {
			b.Fatal(err)
		}
		prod.Close()
		ecfg := DefaultConfig()
		ecfg.Brokers = []string{kafkaAddr}
		ecfg.SpansTopic, ecfg.MetricsTopic, ecfg.DeadLetterTopic = spans, metrics, dlq
		ecfg.GroupID, ecfg.SamplesGroupID = "g-"+spans, "s-"+spans
		ecfg.IdleFlush = time.Second
		p, err := New(ecfg, st, nil)
		if err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- p.Run(rctx) }()
		// The clock starts at the first written row: consumer-group join
		// and start-up are not throughput.
		var first time.Time
		var firstN int64
		for p.C.Requests.Load() < requests || p.C.Samples.Load() < int64(points) {
			if time.Since(start) > 10*time.Minute {
				b.Fatalf("only %d requests after 10 minutes", p.C.Requests.Load())
			}
			if n := p.C.Requests.Load(); first.IsZero() && n > 0 {
				first, firstN = time.Now(), n
			}
			time.Sleep(20 * time.Millisecond)
		}
		pipeline := time.Since(first)
		b.ReportMetric(time.Since(start).Seconds(), "s-total")
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		// The ceiling: the same number of request rows through clickhouse-go
		// alone, in the pipeline's batch size.
		rows := make([][]any, 0, ecfg.BatchRows)
		row := join.Row{UID: "x", Model: otlpfixture.Model}
		now := time.Now()
		t0 := time.Now()
		for k := 0; k < requests; k++ {
			row.UID = fmt.Sprintf("raw-%d", k)
			rows = append(rows, requestValues(make([]any, 0, len(requestsTable.Columns)), &row, now))
			if len(rows) == ecfg.BatchRows || k == requests-1 {
				if err := st.Insert(ctx, requestsTable, rows); err != nil {
					b.Fatal(err)
				}
				rows = rows[:0]
			}
		}
		raw := time.Since(t0)
		st.Close()
		spansPerS := float64(requests-firstN) / pipeline.Seconds()
		b.ReportMetric(spansPerS, "spans/s")
		b.ReportMetric(float64(points)/pipeline.Seconds(), "points/s")
		b.ReportMetric(float64(requests)/raw.Seconds(), "raw-insert-rows/s")
		b.ReportMetric(spansPerS/(float64(requests)/raw.Seconds()), "ratio")
	}
}
