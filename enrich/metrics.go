package enrich

import "github.com/tailcause/tailcause/internal/obs"

// CounterFields describes every field of Counters for /metrics
// (obs.StructValues): its HELP text. All are counters.
func CounterFields() map[string]obs.Field {
	return map[string]obs.Field{
		"SpanRecords":       {Help: "Span records read from the span topic by the enricher's consumer group."},
		"MetricRecords":     {Help: "Metric records read by the broadcast readers that feed the join."},
		"SampleRecords":     {Help: "Metric records read by the samples consumer group (raw samples to ClickHouse)."},
		"Requests":          {Help: "Request rows written to ClickHouse."},
		"Stalls":            {Help: "Token-stall rows written to ClickHouse."},
		"Samples":           {Help: "GPU and engine sample rows written to ClickHouse."},
		"Rejected":          {Help: "Records given a rejected_input row (undecodable, outside the accepted event time, or rows ClickHouse refused)."},
		"DeadLettered":      {Help: "Dead letters written to the dead-letter topic."},
		"InsertRetries":     {Help: "Writes retried after a retriable failure (ClickHouse or the dead-letter topic)."},
		"InsertFailures":    {Help: "Rows ClickHouse refused for good (each sent to rejected_input and the dead-letter topic)."},
		"DeadLetterDropped": {Help: "Dead letters the dead-letter topic refused on every try: counted, logged and skipped."},
		"RejectedDropped":   {Help: "rejected_input rows the table refused: counted and skipped."},
		"Commits":           {Help: "Offset commits of the span consumer group."},
		"UnknownMetrics":    {Help: "Metric points of names the normalizer does not know (ignored)."},
		"IgnoredSpans":      {Help: "Spans the normalizer ignored (not a request or step span it knows)."},
		"OutOfBounds":       {Help: "Requests, steps and samples dropped for an event time outside [now - max event age, now + max event skew]."},
		"SharedDecodes":     {Help: "Metric records decoded once for both of this process's readers of the metric topic (samples group and broadcast readers)."},
	}
}

// JoinStatsFields describes every field of join.Stats (Pipeline.JoinStats)
// for /metrics: its HELP text, and the state fields as gauges.
func JoinStatsFields() map[string]obs.Field {
	return map[string]obs.Field{
		"Requests":          {Help: "Requests the join received."},
		"Emitted":           {Help: "Requests the join emitted as rows."},
		"ForcedByWait":      {Help: "Requests emitted when the span stream passed their end by max wait, before every metric family caught up."},
		"ForcedByCapacity":  {Help: "Requests emitted early because the pending set was full."},
		"Flushed":           {Help: "Requests emitted incomplete by the idle flush (no input for the idle-flush time)."},
		"Steps":             {Help: "Step spans the join received."},
		"OrphanSteps":       {Help: "Step spans whose request never arrived (dropped)."},
		"LateSteps":         {Help: "Step spans that arrived after their request was emitted (dropped)."},
		"DuplicateRequests": {Help: "Requests received again (same uid; the duplicate is dropped)."},
		"Samples":           {Help: "Metric samples the join received."},
		"DuplicateSamples":  {Help: "Metric samples received again (same series and time; dropped)."},
		"TooOldSamples":     {Help: "Metric samples older than the retention behind the stream time (dropped)."},
		"DroppedSamples":    {Help: "Samples of a new host or entity refused at the join's host or entity cap."},
		"EvictedHosts":      {Help: "Idle hosts removed from the join's state."},
		"EvictedEntities":   {Help: "Idle engines and GPUs removed from the join's state."},
		"EvictedSeries":     {Help: "Idle metric series removed from the join's state."},
		"Pending":           {Help: "Requests waiting in the join now.", Gauge: true},
		"Traces":            {Help: "Traces whose steps the join holds now.", Gauge: true},
		"Hosts":             {Help: "Hosts the join tracks now.", Gauge: true},
		"EngineSeries":      {Help: "Engine metric series the join holds now.", Gauge: true},
		"GPUSeries":         {Help: "GPU metric series the join holds now.", Gauge: true},
	}
}
