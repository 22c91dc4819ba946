package enrich

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/tailcause/tailcause/enrich/join"
	"github.com/tailcause/tailcause/enrich/normalize"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/internal/otlpfixture"
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

// BenchmarkRowEncoding is one enriched row appended to a request block
// (the encoder's buffers reused from block to block, as in the sink).
func BenchmarkRowEncoding(b *testing.B) {
	r := join.Row{UID: "0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", Model: "llama-3-8b", Host: "node-1", AttrKeys: []string{"a"}, AttrValues: []string{"b"}}
	in := requestIn{Row: &r, enrichedAt: time.Now()}
	e := newBlockEncoder(requestCols)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r.StartNs++ // a new request: its own times
		e.add(&in)
		if e.len() == 10000 {
			e.reset()
		}
	}
	if blk := e.block(); len(blk) != len(requestsTable.Columns) {
		b.Fatalf("%d columns for %d", len(blk), len(requestsTable.Columns))
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
// the real broker and ClickHouse — a 16-host fleet's spans (one record per
// trace) and metric points produced to Kafka, joined, written — next to the
// raw clickhouse-go insert of the same request rows measured in the same
// iteration (the ceiling; ratio = spans/s ÷ raw rows/s). With -benchtime Nx
// each figure is the median of the N iterations (the ratio the median of
// the iterations' own ratios). See e2e_bench_test.go.
func BenchmarkEndToEnd(b *testing.B) {
	w := e2eWorkload{
		load:           otlpfixture.Load{Hosts: 16, Duration: 10 * time.Minute, Requests: 100000, Seed: 3},
		spansPerExport: 100, spanPartitions: 3, metricParts: 2,
	}
	var runs []map[string]float64
	for i := 0; i < b.N; i++ {
		r := runEndToEnd(b, w)
		if !r.haveReq {
			b.Fatal("no sustained window: the requests were written in one flush")
		}
		raw, blk := r.rawRate(r.rawWall, requestsTable), r.rawRate(r.blockWall, requestsTable)
		runs = append(runs, map[string]float64{
			"spans/s":              r.requests.perSecond(),
			"spans/s/core":         r.requests.perCore(),
			"raw-insert-rows/s":    raw,
			"ratio":                r.requests.perSecond() / raw,
			"ratio-cpu":            r.requests.perCPU() / r.rawPerCPU(r.rawCPU, requestsTable),
			"block-insert-rows/s":  blk,
			"ratio-block":          r.requests.perSecond() / blk,
			"ratio-cpu-block":      r.requests.perCPU() / r.rawPerCPU(r.blockCPU, requestsTable),
			"enrich-cores":         r.requests.cores("self"),
			"clickhouse-cores":     r.requests.cores("clickhouse"),
			"kafka-cores":          r.requests.cores("kafka"),
			"raw-clickhouse-cores": r.rawCores("clickhouse", requestsTable),
			"s-total":              r.total.Seconds(),
		})
	}
	reportMedians(b, runs)
}

// BenchmarkEndToEndMetrics is BenchmarkEndToEnd for the metric path: a
// 1000-host fleet's engine and DCGM scrapes (one record per resource, as
// partition_metrics_by_resource_attributes writes them) with a light span
// stream, so that the broadcast readers decode every point too; points/s
// are the gpu_samples and engine_samples rows written, next to the raw
// insert of the same rows (ratio = points/s ÷ raw rows/s).
func BenchmarkEndToEndMetrics(b *testing.B) {
	w := e2eWorkload{
		load:           otlpfixture.Load{Hosts: 1000, Duration: 5 * time.Minute, Requests: 5000, Seed: 4},
		spansPerExport: 100, spanPartitions: 3, metricParts: 2,
	}
	var runs []map[string]float64
	for i := 0; i < b.N; i++ {
		r := runEndToEnd(b, w)
		if !r.haveSmp {
			b.Fatal("no sustained window: the samples were written in one flush")
		}
		raw, blk := r.rawRate(r.rawWall, gpuSamplesTable, engineSamplesTable), r.rawRate(r.blockWall, gpuSamplesTable, engineSamplesTable)
		runs = append(runs, map[string]float64{
			"points/s":             r.samples.perSecond(),
			"points/s/core":        r.samples.perCore(),
			"raw-insert-rows/s":    raw,
			"ratio":                r.samples.perSecond() / raw,
			"ratio-cpu":            r.samples.perCPU() / r.rawPerCPU(r.rawCPU, gpuSamplesTable, engineSamplesTable),
			"block-insert-rows/s":  blk,
			"ratio-block":          r.samples.perSecond() / blk,
			"ratio-cpu-block":      r.samples.perCPU() / r.rawPerCPU(r.blockCPU, gpuSamplesTable, engineSamplesTable),
			"enrich-cores":         r.samples.cores("self"),
			"clickhouse-cores":     r.samples.cores("clickhouse"),
			"kafka-cores":          r.samples.cores("kafka"),
			"raw-clickhouse-cores": r.rawCores("clickhouse", gpuSamplesTable, engineSamplesTable),
			"s-total":              r.total.Seconds(),
			"shared-decodes":       r.shared,
		})
	}
	reportMedians(b, runs)
}

// BenchmarkSinkInsert writes one 2,000-row block of a fleet's request rows
// to ClickHouse through the row path (chstore.Store.Insert of a []any per
// row: the sink's insert before the columnar blocks) and through the
// columnar one (Store.InsertBlock), alternately in one process against one
// server: client-cpu-ns/row is this process's CPU per row (the encoding
// excluded: BenchmarkRowEncoding), clickhouse-cpu-ns/row the server's.
func BenchmarkSinkInsert(b *testing.B) {
	l := otlpfixture.Load{Hosts: 4, Duration: 2 * time.Minute, Requests: 2000, Seed: 11}
	spans, samples := loadBatches(b, l)
	j, err := join.New(join.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	j.AddSamples(samples)
	for k := range spans {
		j.AddSpans(&spans[k], join.Ref{Offset: int64(k)})
	}
	outs := j.Emit(true)
	e := newBlockEncoder(requestCols)
	now := time.Now().UTC().Truncate(time.Second)
	for i := range outs {
		e.add(&requestIn{Row: &outs[i].Row, enrichedAt: now})
	}
	blk := e.block()
	rows := blk.Rows()
	st := chstoretest.Fresh(b)
	meter := testkit.NewCPUMeter(map[string]string{"clickhouse": testkit.ClickHouse(b)})
	ctx := context.Background()
	for _, path := range []struct {
		name   string
		insert func() error
	}{
		{"rows", func() error { return st.Insert(ctx, requestsTable, rows) }},
		{"block", func() error { return st.InsertBlock(ctx, requestsTable, blk) }},
	} {
		b.Run(path.name, func(b *testing.B) {
			b.ReportAllocs()
			c0 := meter.Read()
			for i := 0; i < b.N; i++ {
				if err := path.insert(); err != nil {
					b.Fatal(err)
				}
			}
			d := meter.Read().Since(c0)
			n := float64(b.N * len(rows))
			b.ReportMetric(float64(d["self"].Nanoseconds())/n, "client-cpu-ns/row")
			b.ReportMetric(float64(d["clickhouse"].Nanoseconds())/n, "clickhouse-cpu-ns/row")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/row")
		})
	}
}
