package causal

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/causal/sqlgen"
	"github.com/tailcause/tailcause/causal/stats"
	"github.com/tailcause/tailcause/schemas"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.Table = "requests; DROP TABLE x"
	c.Level = 1
	c.Causes = []Cause{"nope"}
	c.SplitShare = 0.9
	c.QueueDemandRise = -1
	c.SweepParallel = 0
	c.SweepCopyRows = -1
	c.MinEntityExcess = math.NaN()
	err := c.Validate()
	for _, want := range []string{"table", "level", "nope", "split share", "queue demand rise", "sweep parallel 0", "sweep copy rows", "min entity excess"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
	if _, err := NewAnalyzer(nil, DefaultConfig()); err == nil {
		t.Error("nil querier accepted")
	}
}

func TestIncidentIDStable(t *testing.T) {
	at := time.Date(2026, 3, 14, 9, 5, 30, 0, time.UTC)
	a := IncidentID(map[string]string{"model": "m", "service": "s"}, at)
	b := IncidentID(map[string]string{"service": "s", "model": "m"}, at.In(time.FixedZone("x", 3600)))
	if a != b || !strings.HasPrefix(a, "inc-20260314-0905-") || len(a) != len("inc-20260314-0905-")+8 {
		t.Errorf("ids %q %q", a, b)
	}
	if a == IncidentID(map[string]string{"model": "other"}, at) {
		t.Error("scopes collide")
	}
	if got := ScopeString(map[string]string{"service": "s", "model": "m"}); got != "model=m,service=s" {
		t.Errorf("ScopeString = %q", got)
	}
	if got := EntityString(Entity{GPU: "g", Host: "h", Model: "m"}); got != "host=h,gpu=g,model=m" {
		t.Errorf("EntityString = %q", got)
	}
}

// Quantile mapping: a window whose values are the baseline's plus 100
// maps every value back by 100.
func TestQuantileMapping(t *testing.T) {
	base := make([]float64, len(gridProbs))
	win := make([]float64, len(gridProbs))
	for i, p := range gridProbs {
		base[i] = 1000 * p
		win[i] = 1000*p + 100
	}
	nq := &nodeQuantiles{base: base, win: win, pooled: base, nBase: 1, nWin: 1}
	for _, v := range []float64{150, 600, 1099} {
		if d := nq.delta(v); math.Abs(d-100) > 1e-9 {
			t.Errorf("delta(%v) = %v, want 100", v, d)
		}
	}
	if d := nq.delta(math.NaN()); d != 0 {
		t.Errorf("delta(NaN) = %v", d)
	}
	all, aff := nq.meanDelta()
	if math.Abs(all-100) > 1e-9 || math.Abs(aff-100) > 1e-9 {
		t.Errorf("meanDelta = %v, %v", all, aff)
	}
	// No shift: nothing to undo.
	same := &nodeQuantiles{base: base, win: base, pooled: base, nBase: 1, nWin: 1}
	if all, _ := same.meanDelta(); all != 0 {
		t.Errorf("meanDelta without a shift = %v", all)
	}
	// Knots: distinct, strictly inside the range.
	steps := make([]float64, len(gridProbs))
	for i := range steps {
		steps[i] = math.Floor(gridProbs[i] * 2) // 0, 0, …, 1, 1, 2
	}
	k := (&nodeQuantiles{pooled: steps}).knots([]float64{0.25, 0.5, 0.75, 0.9})
	if len(k) != 1 || k[0] != 1 {
		t.Errorf("knots %v, want [1]", k)
	}
}

// AssembleSuffStats from per-group sums equals the statistics of the rows
// with explicit indicator columns.
func TestAssembleFactors(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	levels := []string{"a", "b", "c"}
	d := sqlgen.Design{Table: "t", Regressors: []string{"1", "x"}, Outcomes: []string{"y"}, Sums: []string{"w"},
		Factors: []sqlgen.Factor{{Name: "g", Expr: "g", Levels: levels[1:]}}}
	groups := map[string]*sqlgen.GroupRow{}
	want := stats.NewSuffStats(4, nil)
	var wsum float64
	for i := 0; i < 500; i++ {
		g := rng.IntN(3)
		x := rng.NormFloat64()
		y := 2*x + float64(g) + rng.NormFloat64()
		row := []float64{1, x, 0, 0}
		if g > 0 {
			row[1+g] = 1
		}
		want.Add(row, y)
		wsum += x
		gr := groups[levels[g]]
		if gr == nil {
			gr = &sqlgen.GroupRow{Labels: []string{levels[g]}, Values: make([]float64, len(d.SuffStatsColumns()))}
			groups[levels[g]] = gr
		}
		v := gr.Values
		// n, xx_0_0, xx_0_1, xx_1_1, x_0, x_1, xy_0_0, xy_0_1, y_0, yy_0, s_0
		for k, add := range []float64{1, 1, x, x * x, 1, x, y, x * y, y, y * y, x} {
			v[k] += add
		}
	}
	var rows []sqlgen.GroupRow
	for _, l := range levels {
		rows = append(rows, *groups[l])
	}
	got, sums, err := d.AssembleSuffStats(rows)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].N != want.N || math.Abs(got[0].YtY-want.YtY) > 1e-9 || math.Abs(sums[0]-wsum) > 1e-9 {
		t.Fatalf("n %v yy %v sum %v, want %v %v %v", got[0].N, got[0].YtY, sums[0], want.N, want.YtY, wsum)
	}
	if !mat.EqualApprox(got[0].XtX, want.XtX, 1e-9) || !mat.EqualApprox(got[0].XtY, want.XtY, 1e-9) {
		t.Errorf("XᵀX\n%v\nwant\n%v", mat.Formatted(got[0].XtX), mat.Formatted(want.XtX))
	}
	// Keep drops a level and a regressor consistently.
	k := d.Keep([]int{0, 1, 3})
	if k.P() != 3 || len(k.Factors[0].Levels) != 1 || k.Factors[0].Levels[0] != "c" || strings.Join(k.ColumnNames(), ",") != "1,x,g=c" {
		t.Errorf("Keep: %+v %v", k, k.ColumnNames())
	}
	// The factor terms of the second pass are transform() lookups.
	f, err := stats.FitOLS(got[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	q, err := d.MeatSQL([]*stats.OLS{f}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(q, "transform(tc_f0, ['b', 'c'], [") || strings.Contains(q, "JOIN") {
		t.Errorf("meat SQL:\n%s", q)
	}
}

func TestQuoteString(t *testing.T) {
	for in, want := range map[string]string{"a": "'a'", "it's": `'it\'s'`, `a\b`: `'a\\b'`, "": "''"} {
		if got := dag.QuoteString(in); got != want {
			t.Errorf("QuoteString(%q) = %s, want %s", in, got, want)
		}
	}
}

// The scope's own time scan (tailScan) on the counts of a tuning run
// (seed 805, no earlier data): XID errors on the model's only host came
// and went from minute 12 to 24, so the per-bucket P99 series alternated
// and no change point paid its penalty; the requests above the window's
// P99 and P95 gather in stretches 4–7 all the same. A scope whose tail is
// spread evenly, as chance spreads it, has no such stretch.
func TestScopeScan(t *testing.T) {
	counts := func(n []float64, k0, k1 []float64) (b [2][scanBuckets]bucketCounts) {
		for i := range scanBuckets {
			b[0][i] = bucketCounts{n: n[i], k: k0[i]}
			b[1][i] = bucketCounts{n: n[i], k: k1[i]}
		}
		return b
	}
	alpha := scopeScanAlpha(DefaultConfig().EntityAlpha, 1)
	if want := DefaultConfig().EntityAlpha / float64(2*scanBuckets*(scanBuckets+1)); alpha != want || scopeScanAlpha(DefaultConfig().EntityAlpha, 0) != want {
		t.Errorf("one scope's scan level %.3g, want %.3g", alpha, want)
	}
	// A sweep of three models shares the rate among them.
	if got := scopeScanAlpha(DefaultConfig().EntityAlpha, 3); math.Abs(got-alpha/3) > 1e-12 {
		t.Errorf("three scopes' scan level %.3g, want %.3g", got, alpha/3)
	}
	xid := counts([]float64{588, 633, 571, 718, 399, 655, 435, 377, 497, 617},
		[]float64{0, 0, 0, 0, 13, 15, 12, 14, 0, 0}, []float64{3, 5, 1, 5, 55, 71, 76, 54, 3, 1})
	tails := [2]float64{0.01, 0.05}
	if lo, hi, p, ok := scopeScan(xid, tails, 1, alpha, nil); lo != 4 || hi != 7 || !ok || !(p < alpha) {
		t.Errorf("XID bursts: stretches %d–%d at p %.3g (%v), want 4–7 below %.3g", lo, hi, p, ok, alpha)
	}
	// A run may not be shorter than minLen stretches.
	if lo, hi, _, ok := scopeScan(xid, tails, 5, alpha, nil); !ok || hi-lo+1 < 5 {
		t.Errorf("minLen 5: stretches %d–%d (%v)", lo, hi, ok)
	}
	// The breach's extent, not its worst part: a power cap from the second
	// stretch to the end (seed 856), whose last stretch alone is the most
	// significant (over the P99), is found whole (over the P95).
	pcap := counts([]float64{623, 611, 690, 575, 700, 577, 522, 584, 609, 637},
		[]float64{0, 2, 3, 5, 8, 3, 2, 10, 0, 28}, []float64{8, 15, 27, 32, 43, 18, 25, 38, 23, 77})
	if lo, hi, _, ok := scopeScan(pcap, tails, 1, alpha, nil); !ok || lo != 1 || hi != 9 {
		t.Errorf("power cap: stretches %d–%d (%v), want 1–9", lo, hi, ok)
	}
	// A fault-free fleet's bursty traffic (tuning seed 6173, no earlier
	// data): stretches 2–3 against the quiet first two, p 10⁻⁵ under the
	// MinCV floor; the other stretches swing as much (11 over the P99 in
	// stretch 7): not a breach.
	bursty := counts([]float64{530, 615, 607, 713, 568, 623, 511, 519, 511, 552},
		[]float64{4, 0, 10, 19, 6, 3, 1, 11, 1, 2}, []float64{24, 16, 49, 58, 29, 29, 13, 25, 12, 32})
	if lo, hi, p, ok := scopeScan(bursty, tails, 2, alpha, nil); ok {
		t.Errorf("bursty traffic: stretches %d–%d at p %.3g, want no breach", lo, hi, p)
	}
	// A handful of requests above the P99 at the window's end, the P95
	// unmoved (a fault-free tuning run, seed 902): not a breach.
	outliers := counts([]float64{531, 540, 597, 565, 711, 601, 568, 622, 636, 616},
		[]float64{1, 4, 6, 5, 9, 2, 2, 5, 6, 19}, []float64{26, 25, 22, 29, 48, 27, 21, 27, 41, 33})
	if lo, hi, p, ok := scopeScan(outliers, tails, 1, alpha, nil); ok {
		t.Errorf("P99 outliers alone: stretches %d–%d at p %.3g, want no breach", lo, hi, p)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 200 {
		n, k0, k1 := make([]float64, scanBuckets), make([]float64, scanBuckets), make([]float64, scanBuckets)
		for i := range scanBuckets {
			n[i] = float64(400 + rng.IntN(300))
			for range int(n[i]) {
				u := rng.Float64()
				if u < 0.01 {
					k0[i]++
				}
				if u < 0.05 {
					k1[i]++
				}
			}
		}
		if _, _, p, ok := scopeScan(counts(n, k0, k1), tails, 1, alpha, nil); ok || p <= alpha {
			t.Fatalf("trial %d: an even tail found at p %.3g ≤ %.3g", trial, p, alpha)
		}
	}
}

// outsideSpread: the stretches outside the run, their spread beyond
// binomial noise; none from fewer than four, or from counts as even as
// binomial draws.
func TestOutsideSpread(t *testing.T) {
	bs := func(n float64, k ...float64) []bucketCounts {
		out := make([]bucketCounts, len(k))
		for i, v := range k {
			out[i] = bucketCounts{n: n, k: v}
		}
		return out
	}
	// Seed 6173's P99 counts (about 570 requests a stretch), stretches 2–3
	// left out: 4, 0, 6, 3, 1, 11, 1, 2 — a CV near 0.9.
	if got := outsideSpread(bs(570, 4, 0, 10, 19, 6, 3, 1, 11, 1, 2), 2, 3); got < 0.8 || got > 1 {
		t.Errorf("bursty stretches: spread %.3f, want about 0.9", got)
	}
	if got := outsideSpread(bs(570, 6, 5, 10, 19, 6, 5, 6, 5, 6, 5), 2, 3); got != 0 {
		t.Errorf("even stretches: spread %.3f, want 0", got)
	}
	if got := outsideSpread(bs(570, 4, 0, 10, 19, 6, 3, 1, 11, 1, 2), 0, 6); got != 0 {
		t.Errorf("three stretches outside: spread %.3f, want 0", got)
	}
	if got := outsideSpread(bs(570, 0, 0, 10, 19, 0, 0, 0, 0, 0, 0), 2, 3); got != 0 {
		t.Errorf("no tail outside: spread %.3f, want 0", got)
	}
}

// breachInside's second look (baselineTailScan): the window's stretches
// against a healthy baseline before it. A three-minute prefix-cache fault
// on a model's single engine (a tuning run, seed 1301, ~6.9 requests/s)
// put about 6% of its requests above the baseline's P99 and 15% above its
// P95; the whole window's P99 stayed within the rule, and the stretch's
// interval did not clear the baseline's. Against the baseline's rate the
// stretch is found, the first stretches of the window too (they have no
// past of their own); tails as even as the baseline's are not.
func TestScopeScanAgainstBaseline(t *testing.T) {
	alpha := scopeScanAlpha(DefaultConfig().EntityAlpha, 3)
	tails := [2]float64{0.01, 0.05}
	base := [2]bucketCounts{{n: 6200, k: 62}, {n: 6200, k: 310}}
	fault := func(at int) (b [2][scanBuckets]bucketCounts) {
		for i := range scanBuckets {
			b[0][i], b[1][i] = bucketCounts{n: 620, k: 6}, bucketCounts{n: 620, k: 31}
			if i == at || i == at+1 {
				b[0][i], b[1][i] = bucketCounts{n: 620, k: 38}, bucketCounts{n: 620, k: 93}
			}
		}
		return b
	}
	if lo, hi, p, ok := scopeScan(fault(4), tails, 2, alpha, &base); !ok || lo != 4 || hi != 5 || !(p < alpha) {
		t.Errorf("a fault in stretches 4–5: found %d–%d at p %.3g (%v), want 4–5 below %.3g", lo, hi, p, ok, alpha)
	}
	if lo, hi, _, ok := scopeScan(fault(0), tails, 2, alpha, &base); !ok || lo != 0 || hi != 1 {
		t.Errorf("a fault in stretches 0–1: found %d–%d (%v), want 0–1", lo, hi, ok)
	}
	if _, _, _, ok := scopeScan(fault(0), tails, 2, alpha, nil); ok {
		t.Errorf("a fault in stretches 0–1 without a baseline: found, but they have no past to be judged against")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for trial := range 200 {
		var b [2][scanBuckets]bucketCounts
		for i := range scanBuckets {
			n := float64(400 + rng.IntN(300))
			b[0][i].n, b[1][i].n = n, n
			for range int(n) {
				u := rng.Float64()
				if u < 0.01 {
					b[0][i].k++
				}
				if u < 0.05 {
					b[1][i].k++
				}
			}
		}
		if lo, hi, p, ok := scopeScan(b, tails, 2, alpha, &base); ok {
			t.Fatalf("trial %d: tails as even as the baseline's found in %d–%d at p %.3g", trial, lo, hi, p)
		}
	}
}

// The entity a focused analysis is about (its time scan found it worse
// than its peers or its past in a stretch) is examined for entity.degraded
// whatever its health over the window: in a tuning run (seed 855) a host
// whose engines rose to the tail rate of two always slower hosts scored a
// health of 0.34, above DegradedHealth, so no culprit acted on it and the
// breach was dropped.
func TestDegradedHostsTakesTheFocus(t *testing.T) {
	cfg := DefaultConfig()
	r := &run{cfg: cfg, engines: map[string]*entityStats{}, hosts: map[string]*entityStats{}}
	add := func(host, pod string, nw, tail float64) {
		k := host + "/" + pod + "/0"
		r.engines[k] = &entityStats{key: k, host: host, pod: pod, engine: "0", nw: nw, nwTail: tail}
		h := r.hosts[host]
		if h == nil {
			h = &entityStats{key: host, host: host, healthOK: true, health: 0.9}
			r.hosts[host] = h
		}
		h.nw, h.nwTail = h.nw+nw, h.nwTail+tail
	}
	add("node-2", "p0", 926, 6)
	add("node-2", "p1", 926, 6)
	add("node-3", "p4", 926, 12)
	add("node-3", "p5", 926, 11)
	add("node-5", "p2", 926, 13)
	add("node-5", "p3", 926, 15)
	r.hosts["node-5"].health = 0.34
	if hs := r.degradedHosts(); len(hs) != 0 {
		t.Fatalf("no focus: %d degraded hosts, want none (health above %v)", len(hs), cfg.DegradedHealth)
	}
	r.req.Focus = &Where{Level: LevelHost, Entity: Entity{Host: "node-5"}}
	hs := r.degradedHosts()
	if len(hs) != 1 || hs[0].es.key != "node-5" {
		t.Fatalf("focus on node-5: degraded hosts %+v, want node-5", hs)
	}
	// An engine focus is not its host's.
	r.req.Focus = &Where{Level: LevelEngine, Entity: Entity{Host: "node-5", Pod: "p2", Engine: "0"}}
	if hs := r.degradedHosts(); len(hs) != 0 {
		t.Errorf("focus on an engine: %d degraded hosts", len(hs))
	}
	if !r.focusOn(kindEngine, r.engines["node-5/p2/0"]) || r.focusOn(kindEngine, r.engines["node-5/p3/0"]) {
		t.Error("focusOn: the focused engine only")
	}
}

// TestSlowestFirst: the m slowest rows, slowest first, ties in the order
// the server sent them (what ORDER BY … DESC LIMIT m gives up to its
// arbitrary order of ties).
func TestSlowestFirst(t *testing.T) {
	rows := []topRow{{y: 3, trace: "a"}, {y: 9, trace: "b"}, {y: 5, trace: "c"}, {y: 9, trace: "d"}, {y: 0, trace: "e"}, {y: 5, trace: "f"}, {y: 7, trace: "g"}}
	for m, want := range map[int]string{0: "", 1: "b", 3: "bdg", 5: "bdgcf", 7: "bdgcfae", 9: "bdgcfae"} {
		got := ""
		for _, r := range slowestFirst(rows, m) {
			got += r.trace
		}
		if got != want {
			t.Errorf("m = %d: %q, want %q", m, got, want)
		}
	}
}

// A breach that only the count of tail requests makes significant
// (ReasonTailCount) is no breach when its top culprit is the demand: a
// fault-free tuning fleet (seed 1778) had such a breach on each question,
// named a queue that more work built and prefills crowding decodes. A
// breach the quantile's interval establishes, or one whose top culprit is
// a mechanism, stands.
func TestDemandOnly(t *testing.T) {
	culprits := func(causes ...schemas.Cause) (cs []Culprit) {
		for _, c := range causes {
			cs = append(cs, Culprit{Cause: c})
		}
		return cs
	}
	count := []string{ReasonTailCount}
	for _, tc := range []struct {
		reasons []string
		cs      []Culprit
		want    bool
	}{
		{count, culprits(schemas.CauseQueueSaturation), true},
		{count, culprits(schemas.CausePrefillInterference, schemas.CausePrefixMiss), true},
		{count, culprits(schemas.CausePrefixMiss, schemas.CauseQueueSaturation), false},
		{count, nil, false},
		{[]string{"baseline"}, culprits(schemas.CauseQueueSaturation), false},
	} {
		if got := demandOnly(tc.reasons, tc.cs); got != tc.want {
			t.Errorf("demandOnly(%v, %v) = %v, want %v", tc.reasons, tc.cs, got, tc.want)
		}
	}
}

// TestUnexplainedCount: a breach on its tail count alone with no culprit
// is not reported; one with a culprit, or one of the quantile rule
// without any, is.
func TestUnexplainedCount(t *testing.T) {
	count := []string{ReasonTailCount}
	for _, tc := range []struct {
		reasons []string
		cs      []Culprit
		want    bool
	}{
		{count, nil, true},
		{[]string{"baseline", ReasonTailCount}, nil, true},
		{count, []Culprit{{Cause: schemas.CauseKVPreemption}}, false},
		{[]string{"baseline"}, nil, false},
		{[]string{"slo"}, nil, false},
	} {
		if got := unexplainedCount(tc.reasons, tc.cs); got != tc.want {
			t.Errorf("unexplainedCount(%v, %v) = %v, want %v", tc.reasons, tc.cs, got, tc.want)
		}
	}
}

// TestLoadSwing: a breach of the whole scope led by its own demand, its
// quantile up by less than SwingMaxRise and the queue under
// SwingQueueShare of the tail (its interval reaching below it), is a load
// swing; a queue that holds more of the tail, a bigger rise, an entity's
// demand, a focused or SLO-threshold breach, or no baseline is not. The
// demand of a one-engine model's engine is the scope's.
func TestLoadSwing(t *testing.T) {
	model := Entity{Model: "m", Service: "m"}
	pod := Entity{Model: "m", Service: "m", Host: "h", Pod: "p", Engine: "0"}
	c := func(cause schemas.Cause, e Entity, af float64) Culprit {
		return Culprit{Cause: cause, Entity: e, AttributableFraction: af}
	}
	queue, prefill := schemas.CauseQueueSaturation, schemas.CausePrefillInterference
	// arrivals sets the scope's arrivals in the window to x times the
	// baseline's rate (over equal spans).
	arrivals := func(x float64) func(r *run) {
		return func(r *run) {
			r.placements = []placementRow{{nw: 1000 * x, nb: 1000}}
			r.spans = []float64{180, 180}
		}
	}
	for _, tc := range []struct {
		name    string
		rise    float64
		cs      []Culprit
		mod     func(r *run)
		want    bool
		wantQAF float64
	}{
		{"queue first, little of the tail", 1.26, []Culprit{c(queue, model, 0.07), c(prefill, model, 0.55)}, nil, true, 0.07},
		{"prefill first, no queue culprit", 1.2, []Culprit{c(prefill, model, 0.6)}, nil, true, 0},
		{"queue holds the tail", 1.29, []Culprit{c(queue, model, 0.21), c(prefill, model, 0.83)}, nil, false, 0.21},
		{"rise of half again", 1.5, []Culprit{c(queue, model, 0.07)}, nil, false, 0},
		{"an engine's queue", 1.2, []Culprit{c(queue, pod, 0.07)}, nil, false, 0},
		// A one-engine model: its engine's demand is the scope's (seed 5509).
		{"the only engine's queue", 1.2, []Culprit{c(queue, pod, 0.07), c(prefill, pod, 0.5)}, func(r *run) {
			r.causes = []*causeRun{{cand: Candidate{Cause: queue, Entity: pod, Culprit: true, WholeScope: true}}, {cand: Candidate{Cause: prefill, Entity: pod, Culprit: true, WholeScope: true}}}
		}, true, 0.07},
		{"the only engine's queue holds the tail", 1.29, []Culprit{c(prefill, pod, 0.5), c(queue, pod, 0.21)}, func(r *run) {
			r.causes = []*causeRun{{cand: Candidate{Cause: queue, Entity: pod, Culprit: true, WholeScope: true, Estimate: stats.CauseEstimate{Attributed: stats.Fraction{Value: 0.21, CI: [2]float64{0.16, 0.26}}}}}, {cand: Candidate{Cause: prefill, Entity: pod, Culprit: true, WholeScope: true}}}
		}, false, 0.21},
		// The queue's share is judged by its interval: a 2-minute burst's
		// 0.16 [0.02, 0.30] is not clearly past SwingQueueShare (tuning
		// seed 5555); 0.21 [0.16, 0.26] is.
		{"queue share not significantly past", 1.43, []Culprit{c(queue, model, 0.16), c(prefill, model, 0.82)}, func(r *run) {
			r.causes = []*causeRun{{cand: Candidate{Cause: queue, Entity: model, Culprit: true, Estimate: stats.CauseEstimate{Attributed: stats.Fraction{Value: 0.16, CI: [2]float64{0.02, 0.30}}}}}}
		}, true, 0.16},
		{"queue share significantly past", 1.29, []Culprit{c(queue, model, 0.21), c(prefill, model, 0.82)}, func(r *run) {
			r.causes = []*causeRun{{cand: Candidate{Cause: queue, Entity: model, Culprit: true, Estimate: stats.CauseEstimate{Attributed: stats.Fraction{Value: 0.21, CI: [2]float64{0.16, 0.26}}}}}}
		}, false, 0.21},
		// A queue that no more arrivals built (a symptom) is no sign of
		// capacity exceeded when the demand leads (fresh fault-free tuning
		// seed 6079); the same queue as demand is.
		{"a symptom queue behind the demand", 1.27, []Culprit{c(prefill, model, 0.48), c(queue, model, 0.39)}, func(r *run) {
			r.causes = []*causeRun{{cand: Candidate{Cause: queue, Entity: model, Culprit: true, Symptom: true, Estimate: stats.CauseEstimate{Attributed: stats.Fraction{Value: 0.39, CI: [2]float64{0.28, 0.50}}}}}}
		}, true, 0},
		{"the same queue as demand", 1.27, []Culprit{c(prefill, model, 0.48), c(queue, model, 0.39)}, func(r *run) {
			r.causes = []*causeRun{{cand: Candidate{Cause: queue, Entity: model, Culprit: true, Estimate: stats.CauseEstimate{Attributed: stats.Fraction{Value: 0.39, CI: [2]float64{0.28, 0.50}}}}}}
		}, false, 0},
		// Past half again, a burst of arrivals served without a queue is
		// still a swing (fresh fault-free tuning seeds 5905, 5757); a rise
		// with as many arrivals as before, or a queue estimated at its
		// share, is not.
		{"burst past half again", 2.97, []Culprit{c(prefill, model, 1)}, arrivals(1.42), true, 0},
		{"burst past half again, arrivals ×1.19", 1.62, []Culprit{c(prefill, model, 1)}, arrivals(1.19), true, 0},
		{"past half again, arrivals flat", 2.97, []Culprit{c(prefill, model, 1)}, arrivals(1.05), false, 0},
		{"past half again, arrivals unknown", 2.97, []Culprit{c(prefill, model, 1)}, nil, false, 0},
		{"past half again, queue estimated at its share", 1.59, []Culprit{c(queue, model, 0.22), c(prefill, model, 0.8)}, func(r *run) {
			arrivals(1.46)(r)
			r.causes = []*causeRun{{cand: Candidate{Cause: queue, Entity: model, Culprit: true, Estimate: stats.CauseEstimate{Attributed: stats.Fraction{Value: 0.22, CI: [2]float64{0.14, 0.30}}}}}}
		}, false, 0},
		{"past half again, a queue below its share", 1.7, []Culprit{c(prefill, model, 0.9), c(queue, model, 0.1)}, arrivals(1.3), true, 0.1},
		{"a mechanism first", 1.2, []Culprit{c(schemas.CausePrefixMiss, model, 0.5), c(queue, model, 0.07)}, nil, false, 0},
		{"focused on an entity", 1.2, []Culprit{c(queue, model, 0.07)}, func(r *run) { r.req.Focus = &Where{} }, false, 0},
		{"SLO threshold", 1.2, []Culprit{c(queue, model, 0.07)}, func(r *run) { r.req.SLO.ThresholdMS = 100 }, false, 0},
		{"no baseline", 1.2, []Culprit{c(queue, model, 0.07)}, func(r *run) { r.base = nil }, false, 0},
		{"rule off", 1.2, []Culprit{c(queue, model, 0.07)}, func(r *run) { r.cfg.SwingQueueShare = 0 }, false, 0},
		{"no culprit", 1.2, nil, nil, false, 0},
	} {
		// spans of 0: the arrival rise cannot be told unless a case sets it.
		r := &run{cfg: DefaultConfig(), base: &Interval{}, baseQ: stats.QuantileCI{Estimate: 1000}, winQ: stats.QuantileCI{Estimate: 1000 * tc.rise}, spans: []float64{0, 0}}
		if tc.mod != nil {
			tc.mod(r)
		}
		q, got := r.loadSwing(tc.cs)
		if got != tc.want || (got && q != tc.wantQAF) {
			t.Errorf("%s: loadSwing = %v, %v; want %v, %v", tc.name, q, got, tc.wantQAF, tc.want)
		}
	}
}

func TestIsCulprit(t *testing.T) {
	est := func(beta, af, afLo, effLo float64) stats.CauseEstimate {
		return stats.CauseEstimate{Log: stats.Effect{Beta: beta, SE: 0.1}, Attributed: stats.Fraction{Value: af, CI: [2]float64{afLo, af + 0.1}}, EffectCI: [2]float64{effLo, 800}}
	}
	for _, tc := range []struct {
		name  string
		cause Cause
		e     stats.CauseEstimate
		want  bool
	}{
		{"mechanism", schemas.CausePowerCap, est(0.1, 0.4, 0.2, 100), true},
		// A mechanism's latency interval may cross zero: its tail
		// probability (the fraction) is the evidence.
		{"mechanism, effect interval across zero", schemas.CausePowerCap, est(0.1, 0.4, 0.2, -50), true},
		{"negative effect", schemas.CausePowerCap, est(-0.1, 0.4, 0.2, 100), false},
		{"fraction under MinAF", schemas.CausePowerCap, est(0.1, 0.04, 0.01, 100), false},
		{"fraction not significant", schemas.CausePowerCap, est(0.1, 0.4, -0.01, 100), false},
		{"degraded and slower", schemas.CauseEntityDegraded, est(0.1, 0.4, 0.2, 100), true},
		{"degraded, not significantly slower", schemas.CauseEntityDegraded, est(0.01, 0.57, 0.3, -373), false},
		{"degraded, interval at zero", schemas.CauseEntityDegraded, est(0.01, 0.57, 0.3, 0), false},
	} {
		if got := isCulprit(tc.cause, tc.e, 0.05); got != tc.want {
			t.Errorf("%s: isCulprit = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHostWideNoise(t *testing.T) {
	// Tuning seed 4734's fault-before window: other hosts' GPUs' DRAM
	// rises around a median of 0.0025, the fault's host's largest 0.0227.
	others := []float64{0.0082, -0.0091, -0.0065, 0.0161, -0.0053, -0.0102, 0.0277, -0.0298, 0.0085, 0.0085, 0.0085, 0.0085,
		0.0025, 0.0233, -0.02, -0.0172, -0.013, 0.0354, 0.0186, 0.0046, -0.0185, -0.0185, -0.0185, -0.0185}
	ref := stats.Median(others)
	noise := hostWideNoise(others, ref)
	if !(0.0227-ref <= noise) {
		t.Errorf("noise %.4f: a rise of %.4f over %.4f is not within it", noise, 0.0227-ref, ref)
	}
	// A host's power cap drops its GPUs' clocks by hundreds of MHz: far
	// beyond the same drift.
	if !(0.3-ref > noise) {
		t.Errorf("noise %.4f swallows a rise of 0.3", noise)
	}
	// Too few other GPUs to measure a spread: no noise bound.
	if n := hostWideNoise(others[:HostWideNoiseMin-1], ref); n != 0 {
		t.Errorf("noise of %d GPUs = %v, want 0", HostWideNoiseMin-1, n)
	}
}

// minAF in a focused analysis: a cause acting on the breached pod is
// material when it explains MinAF of the pod's tail (tuning seed 5007: a
// prefix-cache loss on one pod of 23, 0.044 of the model's tail); a cause
// acting on the whole scope keeps the scope's bar, as does every cause
// without a focus.
func TestMinAFFocusedEntity(t *testing.T) {
	pod := Entity{Host: "node-4", Engine: "0", Pod: "p-11", Model: "m"}
	r := &run{cfg: DefaultConfig(), nWinTail: 400, engines: map[string]*entityStats{
		"node-4/p-11/0": {key: "node-4/p-11/0", host: "node-4", pod: "p-11", engine: "0", nwTail: 40},
		"node-1/p-0/0":  {key: "node-1/p-0/0", host: "node-1", pod: "p-0", engine: "0", nwTail: 360},
	}, hosts: map[string]*entityStats{}}
	onPod := &causeRun{cand: Candidate{Cause: schemas.CausePrefixMiss, Entity: Entity{Host: "node-4", Engine: "0", Pod: "p-11", GPU: "GPU-1", Model: "m"}}}
	onModel := &causeRun{cand: Candidate{Cause: schemas.CauseLongPrompts, Entity: Entity{Model: "m"}}}
	onHost := &causeRun{cand: Candidate{Cause: schemas.CausePCIeContention, Entity: Entity{Host: "node-4", Model: "m"}}}
	if share := r.focusTailShare(); share != 0 {
		t.Fatalf("share without a focus = %v, want 0", share)
	}
	if got := r.minAF(onPod, 0); got != 0.05 {
		t.Errorf("no focus: minAF %v, want 0.05", got)
	}
	r.req.Focus = &Where{Level: LevelEngine, Entity: pod}
	share := r.focusTailShare()
	if share != 0.1 {
		t.Fatalf("the pod's share of the tail = %v, want 0.1", share)
	}
	for _, tc := range []struct {
		name string
		c    *causeRun
		want float64
	}{
		{"on the pod", onPod, 0.005},
		{"on its host", onHost, 0.005},
		{"on the model", onModel, 0.05},
	} {
		if got := r.minAF(tc.c, share); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: minAF %v, want %v", tc.name, got, tc.want)
		}
	}
	// A host focus: the host's tail.
	r.hosts["node-4"] = &entityStats{key: "node-4", host: "node-4", nwTail: 100}
	r.req.Focus = &Where{Level: LevelHost, Entity: Entity{Host: "node-4", Model: "m"}}
	if share := r.focusTailShare(); share != 0.25 {
		t.Errorf("the host's share = %v, want 0.25", share)
	}
}

// The scope's change point frames a focused analysis only when it shares
// time with the entity's stretch (tuning seed 5052); the GPU
// samples of a focused analysis are read over the stretch when the window
// runs on past it (5098).
func TestFocusFraming(t *testing.T) {
	at := func(m int) time.Time { return time.Date(2026, 1, 5, 14, m, 0, 0, time.UTC) }
	stretch := Interval{Start: at(9), End: at(27)}
	for _, tc := range []struct {
		name string
		cp   Interval
		want bool
	}{
		{"before it", Interval{Start: at(2), End: at(9)}, false},
		{"a third of it", Interval{Start: at(2), End: at(15)}, true},
		{"inside it", Interval{Start: at(21), End: at(23)}, true},
		{"all of it", Interval{Start: at(5), End: at(30)}, true},
		{"after it", Interval{Start: at(27), End: at(30)}, false},
	} {
		if got := overlaps(tc.cp, stretch); got != tc.want {
			t.Errorf("%s: overlaps = %v, want %v", tc.name, got, tc.want)
		}
	}
	r := &run{win: Interval{Start: at(9), End: at(30)}}
	if _, ok := r.focusStretch(); ok {
		t.Error("a stretch without a focus")
	}
	r.req.Focus = &Where{Level: LevelEngine, Stretch: &stretch}
	if st, ok := r.focusStretch(); !ok || st != stretch {
		t.Errorf("focusStretch = %v, %v; want %v", st, ok, stretch)
	}
	r.win = Interval{Start: at(10), End: at(30)} // the stretch begins before the window
	if _, ok := r.focusStretch(); ok {
		t.Error("a stretch outside the window is used")
	}
}

// The engine an entity breach is about takes a cause whose exposure is
// its own (concentrated) even when a peer carries SplitShare of the
// affected tail by its natural exposure: with one peer, a few of the
// peer's tail requests above the baseline's P95 are a fifth of a weak
// fault's (tuning seed 5591: a pod's prefill interference, exposed on 11%
// of its window requests against its peer's 2.2%, 12 affected tail
// requests against the peer's 5, stayed on the model and the pod was
// named entity.degraded). Without the focus, or without the concentration,
// the cause stays the scope's.
func TestLocalizeFocusedEngineBesidePeer(t *testing.T) {
	mk := func(focus bool, peerExp float64) *causeRun {
		a := &entityStats{key: "node-4/p-0/0", host: "node-4", pod: "p-0", engine: "0", model: "m", nw: 2847, nb: 1129,
			exp: []expCounts{{wTailExp: 12, wExp: 316, bExp: 50}}}
		b := &entityStats{key: "node-2/p-1/0", host: "node-2", pod: "p-1", engine: "0", model: "m", nw: 2601, nb: 1114,
			exp: []expCounts{{wTailExp: 5, wExp: peerExp, bExp: 53}}}
		r := &run{cfg: DefaultConfig(), base: &Interval{}, nWin: 5448, nWinTail: 76, outcome: dag.Node{Name: "e2e_ms"},
			engines:    map[string]*entityStats{a.key: a, b.key: b},
			placements: []placementRow{{host: "node-4", pod: "p-0", engine: "0", nb: 1129}, {host: "node-2", pod: "p-1", engine: "0", nb: 1114}}}
		if focus {
			r.req.Focus = &Where{Level: LevelEngine, Entity: Entity{Host: "node-4", Engine: "0", Pod: "p-0", Model: "m"}}
		}
		c := &causeRun{kind: kindEngine, continuous: true, label: "prefill_load above 9.16 (baseline P95)",
			cand: Candidate{Cause: schemas.CausePrefillInterference}, exp: expCounts{wTailExp: 17, wExp: 316 + peerExp, bExp: 103}}
		r.localize(c)
		return c
	}
	for _, tc := range []struct {
		name    string
		focus   bool
		peerExp float64
		want    string
	}{
		{"the focused pod", true, 57, "node-4/p-0/0"},
		{"no focus", false, 57, ""},
		{"the peer exposed alike", true, 290, ""},
	} {
		if got := mk(tc.focus, tc.peerExp).entityKey; got != tc.want {
			t.Errorf("%s: entity %q, want %q", tc.name, got, tc.want)
		}
	}
}

// minuteRiseLow: the lower end of an arrival rise's interval, from the
// whole minutes of the window and the baseline.
func TestMinuteRiseLow(t *testing.T) {
	t0 := time.Date(2026, 1, 5, 14, 0, 0, 0, time.UTC)
	at := func(m float64) time.Time { return t0.Add(time.Duration(m * float64(time.Minute))) }
	counts := func(from int, ns ...float64) map[int64]float64 {
		out := map[int64]float64{}
		for i, n := range ns {
			out[at(float64(from+i)).Unix()/60] = n
		}
		return out
	}
	merge := func(a, b map[int64]float64) map[int64]float64 {
		for k, v := range b {
			a[k] = v
		}
		return a
	}
	// Tuning seed 5652: three quiet baseline minutes, an ordinary window.
	quiet := merge(counts(0, 148, 148, 212), counts(3, 171, 212, 151, 259, 170, 192, 264, 198, 215, 212, 139, 273, 148, 275, 277, 180, 197))
	// A surge: ×1.5 of a steady load for ten minutes.
	surge := merge(counts(0, 200, 210, 190, 205, 195, 200, 215, 185, 200, 205, 195, 210, 190, 200, 200), counts(15, 300, 310, 290, 305, 295, 300, 290, 310, 300, 300))
	for _, tc := range []struct {
		name         string
		counts       map[int64]float64
		win, base    Interval
		rise         float64
		ok           bool
		loMin, loMax float64
	}{
		{"an ordinary window after a quiet baseline", quiet, Interval{at(3), at(20.25)}, Interval{at(0), at(3)}, 1.21, true, 0.8, 1},
		{"a surge", surge, Interval{at(15), at(25)}, Interval{at(0), at(15)}, 1.5, true, 1.3, 1.5},
		{"partial minutes are left out", surge, Interval{at(14.5), at(25)}, Interval{at(0.5), at(14.5)}, 1.5, true, 1.3, 1.5},
		{"a baseline hour with data in its last 15 minutes", surge, Interval{at(15), at(25)}, Interval{at(-45), at(15)}, 1.5, true, 1.3, 1.5},
		{"too few baseline minutes", surge, Interval{at(15), at(25)}, Interval{at(0), at(2)}, 1.5, false, 0, 0},
		{"no whole baseline minute", surge, Interval{at(15), at(25)}, Interval{at(0.2), at(0.9)}, 1.5, false, 0, 0},
	} {
		lo, ok := minuteRiseLow(tc.counts, tc.win, tc.base, tc.rise)
		if ok != tc.ok || ok && !(lo >= tc.loMin && lo <= tc.loMax) {
			t.Errorf("%s: lower end %.3f ok %v, want ok %v in [%v, %v]", tc.name, lo, ok, tc.ok, tc.loMin, tc.loMax)
		}
	}
}
