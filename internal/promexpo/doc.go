// Package promexpo renders pmetric.Metrics as Prometheus text exposition
// (format 0.0.4, what vLLM, SGLang and dcgm-exporter serve on /metrics) and
// serves it over HTTP, so that the fault lab or a test can put what it
// simulates behind a real scrape: a Collector's prometheus receiver, or any
// Prometheus, then reads it exactly as it reads a real engine.
//
// Mapping, in the direction opposite to the prometheus receiver's:
//
//   - Gauge → gauge.
//   - Sum, monotonic and cumulative → counter; the name gets a "_total"
//     suffix unless it has one (vllm:num_preemptions_total stays as is).
//   - Sum, not monotonic and cumulative → gauge.
//   - Histogram (cumulative) → histogram: _bucket{le=…} (cumulative counts,
//     ending with le="+Inf"), _sum, _count.
//   - Summary → summary: {quantile=…}, _sum, _count.
//   - Delta sums and histograms, and exponential histograms, have no text
//     form: Append fails with ErrUnsupported naming the metric.
//
// Metric names are kept verbatim when valid (colons included); point
// attributes become labels, with names outside [a-zA-Z_][a-zA-Z0-9_]*
// sanitised to underscores. Resource and scope attributes are not written:
// a scraper derives the resource from its own target (job, instance,
// service-discovery labels), as it does for a real engine. Points flagged
// NoRecordedValue are skipped. All series of one name form one family
// (one # TYPE line), whichever resource they came from.
//
// Each sample carries its point's timestamp in milliseconds, unless
// Options.OmitTimestamps is set: a scraper that honours timestamps (the
// prometheus receiver's honor_timestamps, true by default) then keeps the
// simulated event time instead of stamping the scrape time.
//
// A scraper keeps one sample per series and scrape, so a batch that holds
// several scrapes is served as several expositions: SplitByTimestamp cuts
// it by point time, and Handler.Enqueue (or Handler.Metrics, the metrics
// half of a fault-lab sink) serves each exactly once, in order.
package promexpo
