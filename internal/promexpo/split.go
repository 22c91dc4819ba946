package promexpo

import (
	"context"
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// SplitByTimestamp splits md into one Metrics per distinct point
// timestamp, in time order, keeping resources, scopes and metric metadata:
// each part is what one scrape at that time shows. A scraper keeps only
// the last sample of a series per scrape, so a batch holding several
// scrapes (the fault lab's) must be served as several expositions. It
// costs one copy of md per distinct timestamp; md is not modified.
func SplitByTimestamp(md pmetric.Metrics) []pmetric.Metrics {
	seen := map[pcommon.Timestamp]bool{}
	forEachPoint(md, func(ts pcommon.Timestamp) bool { seen[ts] = true; return false })
	times := make([]pcommon.Timestamp, 0, len(seen))
	for ts := range seen {
		times = append(times, ts)
	}
	slices.Sort(times)
	out := make([]pmetric.Metrics, 0, len(times))
	for _, ts := range times {
		part := pmetric.NewMetrics()
		md.CopyTo(part)
		forEachPoint(part, func(p pcommon.Timestamp) bool { return p != ts })
		prune(part)
		out = append(out, part)
	}
	return out
}

// Metrics queues md as one exposition per distinct timestamp
// (SplitByTimestamp), so *Handler serves as the metrics side of a fault
// lab sink: each simulated scrape reaches the scraper once.
func (h *Handler) Metrics(_ context.Context, md pmetric.Metrics) error {
	return h.Enqueue(SplitByTimestamp(md)...)
}

// forEachPoint calls f with the timestamp of every point of md and removes
// the points for which it returns true.
func forEachPoint(md pmetric.Metrics, f func(pcommon.Timestamp) bool) {
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		sms := rms.At(i).ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				switch m := ms.At(k); m.Type() {
				case pmetric.MetricTypeGauge:
					m.Gauge().DataPoints().RemoveIf(func(p pmetric.NumberDataPoint) bool { return f(p.Timestamp()) })
				case pmetric.MetricTypeSum:
					m.Sum().DataPoints().RemoveIf(func(p pmetric.NumberDataPoint) bool { return f(p.Timestamp()) })
				case pmetric.MetricTypeHistogram:
					m.Histogram().DataPoints().RemoveIf(func(p pmetric.HistogramDataPoint) bool { return f(p.Timestamp()) })
				case pmetric.MetricTypeExponentialHistogram:
					m.ExponentialHistogram().DataPoints().RemoveIf(func(p pmetric.ExponentialHistogramDataPoint) bool { return f(p.Timestamp()) })
				case pmetric.MetricTypeSummary:
					m.Summary().DataPoints().RemoveIf(func(p pmetric.SummaryDataPoint) bool { return f(p.Timestamp()) })
				}
			}
		}
	}
}

// prune drops metrics without points, then empty scopes and resources.
func prune(md pmetric.Metrics) {
	md.ResourceMetrics().RemoveIf(func(rm pmetric.ResourceMetrics) bool {
		rm.ScopeMetrics().RemoveIf(func(sm pmetric.ScopeMetrics) bool {
			sm.Metrics().RemoveIf(func(m pmetric.Metric) bool { return pointCount(m) == 0 })
			return sm.Metrics().Len() == 0
		})
		return rm.ScopeMetrics().Len() == 0
	})
}

func pointCount(m pmetric.Metric) int {
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		return m.Gauge().DataPoints().Len()
	case pmetric.MetricTypeSum:
		return m.Sum().DataPoints().Len()
	case pmetric.MetricTypeHistogram:
		return m.Histogram().DataPoints().Len()
	case pmetric.MetricTypeExponentialHistogram:
		return m.ExponentialHistogram().DataPoints().Len()
	case pmetric.MetricTypeSummary:
		return m.Summary().DataPoints().Len()
	}
	return 0
}
