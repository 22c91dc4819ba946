package eval

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/tailcause/tailcause/lab/faultlab"
)

// tally counts the hits of one row of the report.
type tally struct {
	n, top1, top3, ctop1, ctop3 int
	base                        map[string]*[2]int // method → cause-level top-1, top-3
}

func newTally() *tally {
	t := &tally{base: map[string]*[2]int{}}
	for _, m := range baselineMethods {
		t.base[m] = &[2]int{}
	}
	return t
}

func (t *tally) add(r Run) {
	t.n++
	t.top1 += b2i(r.Hit.At(1))
	t.top3 += b2i(r.Hit.At(3))
	t.ctop1 += b2i(r.Hit.CauseAt(1))
	t.ctop3 += b2i(r.Hit.CauseAt(3))
	for _, m := range baselineMethods {
		h := r.Baselines[m]
		t.base[m][0] += b2i(h.CauseAt(1))
		t.base[m][1] += b2i(h.CauseAt(3))
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func rate(a, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f (%d/%d)", float64(a)/float64(n), a, n)
}

// Scored says whether a run counts in the accuracy figures: a fault run
// that did not fail and whose fault showed in its own entity's P99.
func (r Run) Scored() bool { return r.Error == "" && !r.FaultFree && !r.Weak && !r.Ended }

// Report writes the evaluation's tables: for each seed set and question,
// per cause and overall, the strict top-1 and top-3 of tailcause (cause and
// entity), its cause-level top-1 and top-3, and the two baselines' (which
// name causes only, so they are scored at the cause level); the confounded
// runs; false incidents per simulated day on the fault-free runs; then the
// detector replay when there is one.
func Report(w io.Writer, runs []Run) {
	sets := []string{"tune", "holdout"}
	for _, set := range sets {
		for _, q := range Questions() {
			var rs []Run
			for _, r := range runs {
				if r.Set == set && r.Question == q {
					rs = append(rs, r)
				}
			}
			if len(rs) == 0 {
				continue
			}
			reportBlock(w, set, q, rs)
		}
	}
	for _, set := range sets {
		var rs []Run
		for _, r := range runs {
			if r.Set == set && r.Detector != nil && r.Error == "" {
				rs = append(rs, r)
			}
		}
		if len(rs) > 0 {
			reportDetector(w, set, rs)
		}
	}
}

func questionText(q Question) string {
	switch q {
	case NoEarlierData:
		return "window = the whole run, no data before it"
	case HealthyBefore:
		return "window = the run's second half, its fault-free first half before it"
	case FaultBefore:
		return "window = the run's last fifth, the fault on before it, its fault-free first half before that"
	}
	return string(q)
}

func seedRange(rs []Run) string {
	var ss []uint64
	for _, r := range rs {
		ss = append(ss, r.Seed)
	}
	slices.Sort(ss)
	ss = slices.Compact(ss)
	if len(ss) == 0 {
		return ""
	}
	if int(ss[len(ss)-1]-ss[0])+1 == len(ss) {
		return fmt.Sprintf("seeds %d–%d", ss[0], ss[len(ss)-1])
	}
	return fmt.Sprintf("%d seeds from %d to %d", len(ss), ss[0], ss[len(ss)-1])
}

func reportBlock(w io.Writer, set string, q Question, rs []Run) {
	byCause := map[string]*tally{}
	all, conf := newTally(), newTally()
	var free, errs, weak, ended, falseInc, unrelated, baseErrs int
	var freeDays, faultDays float64
	for _, r := range rs {
		switch {
		case r.Error != "":
			errs++
			continue
		case r.FaultFree:
			free++
			freeDays += r.WindowDays
			falseInc += len(r.Breaches)
			continue
		case r.Weak:
			weak++
			continue
		case r.Ended:
			ended++
			continue
		}
		faultDays += r.WindowDays
		unrelated += r.Unrelated
		if r.BaselineError != "" {
			baseErrs++
		}
		if byCause[r.Cause] == nil {
			byCause[r.Cause] = newTally()
		}
		byCause[r.Cause].add(r)
		all.add(r)
		if r.Confounded {
			conf.add(r)
		}
	}
	fmt.Fprintf(w, "\n== %s set (%s), question %s: %s\n", set, seedRange(rs), q, questionText(q))
	fmt.Fprintf(w, "%d fault runs scored, %d fault-free, %d with a fault too weak to show in its own entity's P99 (not scored), %d failed\n",
		all.n, free, weak, errs)
	if ended > 0 {
		fmt.Fprintf(w, "%d runs whose fault (or its XIDs' effects) ended before the window (not scored)\n", ended)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "cause\truns\ttop-1\ttop-3\tcause top-1\tcause top-3\tunadjusted top-1\tunadjusted top-3\trobust-z top-1\trobust-z top-3")
	row := func(name string, t *tally) {
		u, z := t.base[baselineMethods[0]], t.base[baselineMethods[1]]
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, t.n,
			rate(t.top1, t.n), rate(t.top3, t.n), rate(t.ctop1, t.n), rate(t.ctop3, t.n),
			rate(u[0], t.n), rate(u[1], t.n), rate(z[0], t.n), rate(z[1], t.n))
	}
	for _, c := range faultlab.Causes() {
		if t := byCause[c.ID]; t != nil {
			row(c.ID, t)
		}
	}
	row("all", all)
	row("confounded", conf)
	tw.Flush()
	if baseErrs > 0 {
		fmt.Fprintf(w, "the baselines could not be computed on %d of the scored runs (counted as misses; see baseline_error in --json)\n", baseErrs)
	}
	fi := "-"
	if freeDays > 0 {
		fi = fmt.Sprintf("%.1f per simulated day (%d in %.3f days)", float64(falseInc)/freeDays, falseInc, freeDays)
	}
	fmt.Fprintf(w, "false incidents on fault-free runs: %s\n", fi)
	if faultDays > 0 {
		fmt.Fprintf(w, "breaches on fault runs that touch none of the fault's engines: %.1f per simulated day (%d in %.3f days)\n",
			float64(unrelated)/faultDays, unrelated, faultDays)
	}
	// The misses, for reading.
	var miss []string
	for _, r := range rs {
		if r.Scored() && !r.Hit.At(1) {
			miss = append(miss, fmt.Sprintf("  seed %d %s on %s: top %s — %s", r.Seed, r.Cause, entityLabel(r.Entity), orNone(strings.Join(r.Ranking[:min(2, len(r.Ranking))], ", ")), orNone(r.Hit.Why)))
		}
		if r.Error == "" && r.FaultFree && len(r.Breaches) > 0 {
			miss = append(miss, fmt.Sprintf("  seed %d fault-free: %d breach(es), first %s", r.Seed, len(r.Breaches), r.Breaches[0].Where))
		}
		if r.Error != "" {
			miss = append(miss, fmt.Sprintf("  seed %d: error: %s", r.Seed, r.Error))
		}
	}
	if len(miss) > 0 {
		fmt.Fprintln(w, "not top-1:")
		sort.Strings(miss)
		for _, m := range miss {
			fmt.Fprintln(w, m)
		}
	}
}

func reportDetector(w io.Writer, set string, rs []Run) {
	var n, top1, top3, none, falseOpen, changed, changedRuns int
	var days float64
	var delays []float64
	for _, r := range rs {
		d := r.Detector
		days += d.WindowDays
		falseOpen += d.FalseOpened
		changed += len(d.Changed)
		changedRuns += b2i(len(d.Changed) > 0)
		if !r.Scored() {
			continue
		}
		n++
		if d.FirstAt.IsZero() {
			none++
			continue
		}
		top1 += b2i(d.Hit.At(1))
		top3 += b2i(d.Hit.At(3))
		delays = append(delays, d.DelayS)
	}
	slices.Sort(delays)
	med := "-"
	if len(delays) > 0 {
		med = fmt.Sprintf("%.0f s", delays[len(delays)/2])
	}
	fmt.Fprintf(w, "\n== %s set (%s), the scheduled detector replayed over the healthy-before runs\n", set, seedRange(rs))
	fmt.Fprintf(w, "first incident after onset: top-1 %s, top-3 %s; no incident in %d; median delay from onset %s; incidents opened before onset or on fault-free runs: %d in %.3f simulated days\n",
		rate(top1, n), rate(top3, n), none, med, falseOpen, days)
	fmt.Fprintf(w, "top culprit changed in an open incident (a page naming another culprit): %d times in %d runs\n", changed, changedRuns)
}
