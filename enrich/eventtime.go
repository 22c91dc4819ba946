package enrich

import (
	"fmt"
	"time"

	"github.com/tailcause/tailcause/enrich/normalize"
)

// eventBounds is the event time the enricher accepts, in Unix ns: [lo, hi]
// (lo 0: no lower bound). The join's clocks are the newest event times seen
// (DESIGN.md, "Event time bounded on input"), so one point far in the future
// would otherwise decide for every host: a span in 2100 made every later
// sample "too old", a metric point in 2100 paused its partition's reader
// for good.
type eventBounds struct{ lo, hi uint64 }

// bounds are the accepted event times now: [now − MaxEventAge, now +
// MaxEventSkew].
func (p *Pipeline) bounds() eventBounds {
	now := p.now()
	b := eventBounds{hi: uint64(now.Add(p.cfg.MaxEventSkew).UnixNano())}
	if p.cfg.MaxEventAge > 0 {
		b.lo = uint64(max(0, now.Add(-p.cfg.MaxEventAge).UnixNano()))
	}
	return b
}

func (b eventBounds) in(ns uint64) bool { return ns >= b.lo && ns <= b.hi }

func (b eventBounds) String() string {
	lo := "any time"
	if b.lo > 0 {
		lo = fmtNs(b.lo)
	}
	return "[" + lo + ", " + fmtNs(b.hi) + "]"
}

func fmtNs(ns uint64) string { return time.Unix(0, int64(ns)).UTC().Format(time.RFC3339) }

// spans removes from bt the requests and steps whose start or end lies
// outside the bounds. It returns how many it removed and, when it did, a
// detail naming the bounds and the first of them.
func (b eventBounds) spans(bt *normalize.Batch) (int, string) {
	var first string
	dropped := 0
	keep := bt.Requests[:0]
	for _, r := range bt.Requests {
		if b.in(r.StartNs) && b.in(r.EndNs) {
			keep = append(keep, r)
			continue
		}
		if dropped == 0 {
			first = fmt.Sprintf("request %s (host %q) from %s to %s", r.UID, r.Placement.Host, fmtNs(r.StartNs), fmtNs(r.EndNs))
		}
		dropped++
	}
	clear(bt.Requests[len(keep):])
	bt.Requests = keep
	steps := bt.Steps[:0]
	for _, s := range bt.Steps {
		if b.in(s.StartNs) && b.in(s.EndNs) {
			steps = append(steps, s)
			continue
		}
		if dropped == 0 {
			first = fmt.Sprintf("step %s of trace %s from %s to %s", s.SpanID, s.TraceID, fmtNs(s.StartNs), fmtNs(s.EndNs))
		}
		dropped++
	}
	clear(bt.Steps[len(steps):])
	bt.Steps = steps
	if dropped == 0 {
		return 0, ""
	}
	return dropped, fmt.Sprintf("%d spans outside the accepted event time %s (--max-event-age, --max-event-skew); the first: %s", dropped, b, first)
}

// samples is s without the samples whose time lies outside the bounds (s
// itself when none does; s is never written), how many were removed, and
// a detail as for spans.
func (b eventBounds) samples(s []normalize.Sample) ([]normalize.Sample, int, string) {
	var keep []normalize.Sample // a copy, once one is dropped: s may be shared (metricDecodes)
	var first string
	dropped := 0
	for i, x := range s {
		if b.in(x.TimeNs) {
			if keep != nil {
				keep = append(keep, x)
			}
			continue
		}
		if keep == nil {
			keep = append(make([]normalize.Sample, 0, len(s)-1), s[:i]...)
		}
		dropped++
		if first == "" {
			first = fmt.Sprintf("%s of host %q at %s", x.Metric, x.Placement.Host, fmtNs(x.TimeNs))
		}
	}
	if dropped == 0 {
		return s, 0, ""
	}
	return keep, dropped, fmt.Sprintf("%d samples outside the accepted event time %s (--max-event-age, --max-event-skew); the first: %s", dropped, b, first)
}
