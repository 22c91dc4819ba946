package causal

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"gonum.org/v1/gonum/floats"

	"github.com/tailcause/tailcause/causal/dag"
)

// The shared aggregates of attribute (DESIGN.md, "The shared aggregates
// from the frame"): through a snapshot with the Go fits, the frame is read
// before them, with four more atoms — the outcome, the uid hash the
// quantile grids sample by, the placement group and the window's pruning
// bound — and the quantile grids, the placement counts, the affected
// quantiles and the cut of the slowest window rows are computed from it in
// Go, each as ClickHouse computes it (quantilesDeterministic's sampler,
// quantileExact's rank, countIf), instead of four more scans of the
// snapshot. Only the slowest rows themselves (trace ids) are still read,
// above the cut.

// checkSharedSQL makes every run that computes the shared aggregates from
// the frame also run their queries and fail unless the answers are the
// same (bit for bit, NaN equal to NaN); set by the tests.
var checkSharedSQL bool

// sharedAtoms are the frame's atoms the shared aggregates read.
type sharedAtoms struct {
	y     string // Float64 atom of the outcome
	hash  string // the uid hash the grids sample by (colFrame.hash)
	place string // label atom: the placement group (placeExpr)
	win   string // Float64 atom of the window indicator ("": every row)
	prune string // Float64 atom of the window's start_time bound ("": every row)
	// sampled: the frame samples the rows at or below the tail threshold
	// tailT (colFrame.sampleBits).
	sampled bool
	tailT   float64

	terms    map[string]*colTerm // compiled node expressions, by SQL
	groups   [][5]string         // per place code − 1: host, pod, engine, gpu, model
	winY     []float64           // y of the window rows winWhere selects
	affected []float64           // queryAffected's values (framePlacements)
	scratch  []float64
}

// placeExpr is the placement group of a row as one label: its GROUP BY
// columns joined by the unit separator 0x1F (a label that does not split into five
// parts sends the run to the queries).
const placeExpr = "concat(toString(host), '\\x1F', toString(pod), '\\x1F', toString(engine), '\\x1F', toString(gpu), '\\x1F', toString(model))"

// uidHashExpr is what the frame reads of the uid hash: its bits as a
// Float64 (colFrame.store keeps intHash64 of it, as the sampler does).
func (r *run) uidHashExpr() string { return "reinterpretAsFloat64(" + r.a.uidHash() + ")" }

// sharedFromFrame reports whether this run's shared aggregates come from
// the frame, and reads the frame (the atoms every design and they need)
// when they do. A frame that cannot be read sends the fits to SQL too.
func (r *run) sharedFromFrame() (bool, error) {
	if !r.goFitsOn() || r.gofit.err != nil || r.gofit.frame != nil {
		return false, nil
	}
	if r.base != nil && r.base.Start.Before(r.win.End) && r.win.Start.Before(r.base.End) {
		return false, nil // the baseline rows are then not the others
	}
	tc := r.termCompiler()
	y := tc.compile(r.y)
	if y.kind != termAtom {
		return false, nil
	}
	sa := &sharedAtoms{y: y.atom, hash: r.uidHashExpr(), place: "toString(" + placeExpr + ")"}
	if r.base != nil {
		sa.win = tc.compile(r.inWin01()).atom
		sa.prune = "toFloat64(" + prune(r.win) + ")"
	}
	nums, labels := map[string]bool{sa.y: true, sa.hash: true}, map[string]bool{sa.place: true}
	if sa.win != "" {
		nums[sa.win], nums[sa.prune] = true, true
	}
	sa.terms = map[string]*colTerm{}
	r.newFrame(tc, nums, labels)
	r.gofit.frame.hashAtom = sa.hash
	r.gofit.frame.derive = true
	if bits := r.sampleBits(); bits > 0 {
		if t := tc.compile(r.tailExpr()); t.kind == termAtom {
			f := r.gofit.frame
			f.sampleBits, f.tailAtom = bits, t.atom
			f.sample = "(" + r.y + " > " + dag.FormatFloat(r.tailT) + " OR " + samplerKeeps(r.a.uidHash(), bits) + ")"
			sa.sampled, sa.tailT = true, r.tailT
		}
	}
	if err := r.readFrame(nums, labels); err != nil {
		r.note("the fits run in SQL: %v", err)
		r.gofit.err = fmt.Errorf("%w: %w: %v", errNoGoFit, errFrameRead, err)
		r.gofit.frame = nil
		return false, nil
	}
	if f := r.gofit.frame; f.sampleBits > 0 {
		rows := 0
		for _, n := range f.chunks {
			rows += n
		}
		r.note("the fits read every request slower than %s ms and one in %d of the others, weighted %d (%d of %d requests; Config.SampleRows %d)",
			fmtNum(r.tailT), 1<<f.sampleBits, 1<<f.sampleBits, rows, r.nWin+r.nBase, r.cfg.SampleRows)
	}
	lc := r.gofit.frame.labels[sa.place]
	sa.groups = make([][5]string, len(lc.dict))
	for i, l := range lc.dict {
		g := strings.Split(l, "\x1f")
		if len(g) != 5 {
			// A 0x1F in a label: the frame's placement codes are kept, but
			// the shared aggregates come from the queries.
			return false, nil
		}
		copy(sa.groups[i][:], g)
	}
	r.gofit.shared = sa
	return true, nil
}

// sampleBits is the s of a frame that samples the rows below the tail
// (Config.SampleRows; 0: every row): the smallest with at most SampleRows
// pooled rows kept by the hash alone. (The quantile grids come out exact
// when the window's and the baseline's rows so kept number more than a
// reservoir, as they do unless one of them holds less than about a
// twelfth of the pooled rows; otherwise their query runs: frameQuantiles.)
func (r *run) sampleBits() int {
	rows := int64(r.nWin)
	if r.base != nil {
		rows += int64(r.nBase)
	}
	if r.cfg.SampleRows <= 0 || rows <= r.cfg.SampleRows {
		return 0
	}
	return bits.Len64(uint64((rows - 1) / r.cfg.SampleRows)) // ⌈log2(rows / SampleRows)⌉
}

// samplerKeeps is the SQL condition that the sampler hash of uid hash h
// (intHash64 of it, colFrame.hash) has its s low bits zero: ClickHouse's
// SQL intHash64 salts its argument, so the function is written out.
func samplerKeeps(h string, s int) string {
	return "bitAnd(" + samplerHashSQL(h) + ", " + strconv.Itoa(1<<s-1) + ") = 0"
}

// samplerHashSQL is intHash64 (the Go function) of the UInt64 h in SQL.
func samplerHashSQL(h string) string {
	x := h
	for _, m := range []string{"18397679294719823053", "14181476777654086739", ""} {
		x = "bitXor(" + x + ", bitShiftRight(" + x + ", 33))"
		if m != "" {
			x = "(" + x + " * toUInt64(" + m + "))"
		}
	}
	return x
}

// frameCol decodes chunk ci of numeric atom a into dst.
func (f *colFrame) frameCol(a string, ci int, dst []float64) []float64 {
	n := f.chunks[ci]
	dst = dst[:n]
	if a == "" {
		for i := range dst {
			dst[i] = 1
		}
		return dst
	}
	p := f.nums[a][ci]
	switch {
	case p.u8 != nil:
		for i, x := range p.u8 {
			dst[i] = float64(x)
		}
	case p.f32 != nil:
		for i, x := range p.f32 {
			dst[i] = float64(x)
		}
	default:
		copy(dst, p.f64)
	}
	return dst
}

// term is the compiled SQL expression e (memoized).
func (sa *sharedAtoms) term(tc termCompiler, e string) *colTerm {
	t, ok := sa.terms[e]
	if !ok {
		t = tc.compile(e)
		sa.terms[e] = t
	}
	return t
}

// evalTerm evaluates t over chunk ci into dst, as block.term does over a
// block.
func (f *colFrame) evalTerm(t *colTerm, ci int, dst []float64) []float64 {
	n := f.chunks[ci]
	dst = dst[:n]
	switch t.kind {
	case termAtom:
		return f.frameCol(t.atom, ci, dst)
	case termConst:
		for i := range dst {
			dst[i] = t.v
		}
	case termEq:
		lc := f.labels[t.atom]
		want, ok := lc.code[t.lit]
		for i, c := range lc.parts[ci] {
			if ok && c == want {
				dst[i] = 1
			} else {
				dst[i] = 0
			}
		}
	case termHinge:
		hinge(dst, t.v, f.evalTerm(t.args[0], ci, dst))
	case termGuard:
		for i, v := range f.evalTerm(t.args[0], ci, dst) {
			if v-v != 0 {
				v = 0
			}
			dst[i] = v
		}
	case termProd:
		f.evalTerm(t.args[0], ci, dst)
		tmp := make([]float64, n)
		for _, a := range t.args[1:] {
			for i, v := range f.evalTerm(a, ci, tmp) {
				dst[i] *= v
			}
		}
	case termOneMinus:
		for i, v := range f.evalTerm(t.args[0], ci, dst) {
			dst[i] = 1 - v
		}
	case termFinite:
		for i, v := range f.evalTerm(t.args[0], ci, dst) {
			if v-v == 0 {
				dst[i] = 1
			} else {
				dst[i] = 0
			}
		}
	}
	return dst
}

// frameBufs is a set of chunk-sized buffers.
func (f *colFrame) frameBufs(k int) [][]float64 {
	most := 0
	for _, n := range f.chunks {
		most = max(most, n)
	}
	out := make([][]float64, k)
	for i := range out {
		out[i] = make([]float64, most)
	}
	return out
}

// frameQuantiles computes queryQuantiles' grids from the frame: for each
// node, quantilesDeterministicIf over the baseline, window and pooled rows
// where its value is finite. ClickHouse's sampler keeps, of the values
// inserted, those whose hash has its skip_degree low bits zero, for the
// smallest skip_degree that leaves at most 8192 (whatever the order of
// insertion and merging), sorts them by (value, hash) and interpolates
// linearly at level·(n − 1). The nodes are spread over GOMAXPROCS workers.
//
// A sampled frame (sampleBits s) holds every row whose hash has s low zero
// bits, whatever its outcome: a grid whose sampler keeps more than s bits
// (its rows with s zero bits number more than reservoirSize) is exact, and
// its count (nBase, nWin) estimated as 2^s times those rows. It reports
// false, and computes nothing, when some grid would not be exact: the
// query computes them.
func (r *run) frameQuantiles(names []string) (map[string]*nodeQuantiles, bool) {
	f, sa := r.gofit.frame, r.gofit.shared
	tc := r.termCompiler()
	covs := make([]*colTerm, len(names))
	for i, name := range names {
		n, _ := r.a.dag.Node(name)
		covs[i] = sa.term(tc, n.Covariate())
	}
	out := make([]*nodeQuantiles, len(names))
	ix := f.gridIndex(sa.win, r.base != nil)
	if f.sampleBits > 0 && ix.lo <= f.sampleBits {
		return nil, false
	}
	workers := max(1, min(runtime.GOMAXPROCS(0), len(names)))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := f.frameBufs(2)
			for i := w; i < len(names); i += workers {
				if out[i] = f.nodeGridsIndexed(covs[i], ix, buf); out[i] == nil && f.sampleBits == 0 {
					out[i] = f.nodeGrids(covs[i], sa.win, r.base != nil, buf)
				}
			}
		}()
	}
	wg.Wait()
	if slices.Contains(out, nil) {
		return nil, false
	}
	quant := make(map[string]*nodeQuantiles, len(names))
	for i, name := range names {
		quant[name] = out[i]
	}
	return quant, true
}

// gridIndex is what the grids of every node share: each row's set
// (gridWin, gridBase or neither), the degree histograms of the three sets
// over all rows, and the rows whose hash has at least lo low zero bits,
// lo the smallest of the sets' degrees. A node's finite values are fewer,
// so its degrees are at most these; when none is below lo, its samples
// are all among those rows (nodeGridsIndexed).
type gridIndex struct {
	hist [3][33]int
	set  [][]uint8
	lo   int
	rows [][]int32
}

const (
	gridBase = 1 << iota
	gridWin
)

func (f *colFrame) gridIndex(win string, base bool) *gridIndex {
	ix := &gridIndex{set: make([][]uint8, len(f.chunks)), rows: make([][]int32, len(f.chunks))}
	buf := make([]float64, 0, frameChunk)
	for ci := range f.chunks {
		w := f.frameCol(win, ci, buf[:cap(buf)])
		set := make([]uint8, len(w))
		for i, hv := range f.hash[ci] {
			c := bits.TrailingZeros32(hv)
			ix.hist[2][c]++
			if w[i] != 0 {
				set[i] = gridWin
				ix.hist[1][c]++
			} else if base {
				set[i] = gridBase
				ix.hist[0][c]++
			}
		}
		ix.set[ci] = set
	}
	ix.lo = 32
	for s := range ix.hist {
		if d, n := degree(&ix.hist[s]); n > 0 {
			ix.lo = min(ix.lo, d)
		}
	}
	for ci := range f.chunks {
		var rows []int32
		for i, hv := range f.hash[ci] {
			if bits.TrailingZeros32(hv) >= ix.lo {
				rows = append(rows, int32(i))
			}
		}
		ix.rows[ci] = rows
	}
	return ix
}

// degree is the smallest skip degree d whose kept values (hash with d low
// zero bits) number at most reservoirSize, and the number of values.
func degree(hist *[33]int) (deg, n int) {
	deg, kept := 32, 0
	for d := 32; d >= 0; d-- {
		if kept += hist[d]; kept > reservoirSize {
			break
		}
		deg = d
	}
	for _, c := range hist {
		n += c
	}
	return deg, n
}

// nodeGridsIndexed is nodeGrids through ix: the histograms less the rows
// where cov is not finite, then the samples from ix.rows alone; nil when
// a set's degree falls below ix.lo (nodeGrids then).
func (f *colFrame) nodeGridsIndexed(cov *colTerm, ix *gridIndex, buf [][]float64) *nodeQuantiles {
	hist := ix.hist
	for ci := range f.chunks {
		hs, set := f.hash[ci], ix.set[ci]
		f.nonFinite(cov, ci, buf[0], func(i int) {
			c := bits.TrailingZeros32(hs[i])
			hist[2][c]--
			switch set[i] {
			case gridWin:
				hist[1][c]--
			case gridBase:
				hist[0][c]--
			}
		})
	}
	var mask [3]uint32
	var cnt [3]float64
	for s := range hist {
		deg, n := degree(&hist[s])
		if n > 0 && deg < ix.lo {
			return nil
		}
		if sb := f.sampleBits; sb > 0 {
			// Of a sampled frame only the rows with sb zero bits are all
			// there: the degree must be above sb (which a set of no row
			// there does not say), and the count is estimated from them.
			if deg <= sb {
				return nil
			}
			kept := 0
			for _, c := range hist[s][sb:] {
				kept += c
			}
			n = kept << sb
		}
		mask[s] = math.MaxUint32
		if deg < 32 {
			mask[s] = 1<<deg - 1
		}
		cnt[s] = float64(n)
	}
	var samples [3][]gridSample
	for ci, rows := range ix.rows {
		hs, set := f.hash[ci], ix.set[ci]
		for _, i := range rows {
			x := f.termAt(cov, ci, int(i))
			if x-x != 0 {
				continue
			}
			h := hs[i]
			if h&mask[2] == 0 {
				samples[2] = append(samples[2], gridSample{x, h})
			}
			switch set[i] {
			case gridWin:
				if h&mask[1] == 0 {
					samples[1] = append(samples[1], gridSample{x, h})
				}
			case gridBase:
				if h&mask[0] == 0 {
					samples[0] = append(samples[0], gridSample{x, h})
				}
			}
		}
	}
	return gridsOf(samples, cnt)
}

// gridSample is one value the sampler keeps, with its hash.
type gridSample struct {
	v float64
	h uint32
}

// gridsOf sorts each set's samples by (value, hash) and interpolates
// them at gridProbs; cnt are the sets' numbers of values.
func gridsOf(samples [3][]gridSample, cnt [3]float64) *nodeQuantiles {
	var grids [3][]float64
	for s, ss := range samples {
		slices.SortFunc(ss, func(a, b gridSample) int {
			switch {
			case a.v < b.v:
				return -1
			case a.v > b.v:
				return 1
			}
			return cmp.Compare(a.h, b.h)
		})
		g := make([]float64, len(gridProbs))
		for i, p := range gridProbs {
			g[i] = interpolated(len(ss), p, func(k int) float64 { return ss[k].v })
		}
		grids[s] = g
	}
	return &nodeQuantiles{base: grids[0], win: grids[1], pooled: grids[2], nBase: cnt[0], nWin: cnt[1]}
}

// nonFinite calls visit with every row of chunk ci where t is not finite:
// an atom's (or 1 − an atom's) stored values are scanned as they are.
func (f *colFrame) nonFinite(t *colTerm, ci int, buf []float64, visit func(i int)) {
	a := t
	if a.kind == termOneMinus {
		a = a.args[0]
	}
	if a.kind == termAtom {
		p := f.nums[a.atom][ci]
		switch {
		case p.u8 != nil:
		case p.f32 != nil:
			for i, x := range p.f32 {
				if x-x != 0 {
					visit(i)
				}
			}
		default:
			for i, x := range p.f64 {
				if x-x != 0 {
					visit(i)
				}
			}
		}
		return
	}
	for i, x := range f.evalTerm(t, ci, buf) {
		if x-x != 0 {
			visit(i)
		}
	}
}

// termAt is t at row i of chunk ci, as evalTerm computes it.
func (f *colFrame) termAt(t *colTerm, ci, i int) float64 {
	switch t.kind {
	case termAtom:
		p := f.nums[t.atom][ci]
		switch {
		case p.u8 != nil:
			return float64(p.u8[i])
		case p.f32 != nil:
			return float64(p.f32[i])
		}
		return p.f64[i]
	case termConst:
		return t.v
	case termEq:
		lc := f.labels[t.atom]
		if want, ok := lc.code[t.lit]; ok && lc.parts[ci][i] == want {
			return 1
		}
		return 0
	case termHinge:
		if d := f.termAt(t.args[0], ci, i) - t.v; d > 0 {
			return d
		}
		return 0
	case termGuard:
		if v := f.termAt(t.args[0], ci, i); v-v == 0 {
			return v
		}
		return 0
	case termProd:
		v := f.termAt(t.args[0], ci, i)
		for _, a := range t.args[1:] {
			v *= f.termAt(a, ci, i)
		}
		return v
	case termOneMinus:
		return 1 - f.termAt(t.args[0], ci, i)
	case termFinite:
		if v := f.termAt(t.args[0], ci, i); v-v == 0 {
			return 1
		}
		return 0
	}
	return math.NaN()
}

// nodeGrids is frameQuantiles for one node's values cov: its grids over
// the baseline (set 0, when base), window (1) and pooled (2) rows.
func (f *colFrame) nodeGrids(cov *colTerm, win string, base bool, buf [][]float64) *nodeQuantiles {
	var hist [3][33]int
	for ci := range f.chunks {
		v := f.evalTerm(cov, ci, buf[0])
		w := f.frameCol(win, ci, buf[1])
		hs := f.hash[ci]
		for i, x := range v {
			if x-x != 0 {
				continue
			}
			c := bits.TrailingZeros32(hs[i])
			hist[2][c]++
			if w[i] != 0 {
				hist[1][c]++
			} else if base {
				hist[0][c]++
			}
		}
	}
	var mask [3]uint32
	var cnt [3]float64
	for s := range hist {
		deg, n := degree(&hist[s])
		mask[s] = math.MaxUint32
		if deg < 32 {
			mask[s] = 1<<deg - 1
		}
		cnt[s] = float64(n)
	}
	var samples [3][]gridSample
	for ci := range f.chunks {
		v := f.evalTerm(cov, ci, buf[0])
		w := f.frameCol(win, ci, buf[1])
		hs := f.hash[ci]
		for i, x := range v {
			if x-x != 0 {
				continue
			}
			h := hs[i]
			if h&mask[2] == 0 {
				samples[2] = append(samples[2], gridSample{x, h})
			}
			if w[i] != 0 {
				if h&mask[1] == 0 {
					samples[1] = append(samples[1], gridSample{x, h})
				}
			} else if base && h&mask[0] == 0 {
				samples[0] = append(samples[0], gridSample{x, h})
			}
		}
	}
	return gridsOf(samples, cnt)
}

// reservoirSize is quantilesDeterministic's sample (ClickHouse's
// DEFAULT_MAX_SAMPLE_SIZE).
const reservoirSize = 8192

// interpolated is ReservoirSamplerDeterministic::quantileInterpolated of n
// sorted values at(0) … at(n−1): NaN when empty.
func interpolated(n int, level float64, at func(int) float64) float64 {
	if n == 0 {
		return math.NaN()
	}
	index := math.Max(0, math.Min(float64(n)-1, level*float64(n-1)))
	left := int(index)
	if left+1 == n {
		return at(left)
	}
	lc, rc := float64(left+1)-index, index-float64(left)
	return float64(at(left)*lc) + float64(at(left+1)*rc) // no fused multiply-add, as ClickHouse's build
}

// quantileExact is ClickHouse's quantileExact(level) of vs (reordered):
// the element of rank ⌊level·n⌋ (the last for level 1), NaN when empty.
func quantileExact(vs []float64, level float64) float64 {
	n := len(vs)
	if n == 0 {
		return math.NaN()
	}
	k := n - 1
	if level < 1 {
		k = int(level * float64(n))
	}
	return nthElement(vs, k)
}

// nthElement returns the value of rank k (0-based, ascending) of vs,
// reordering vs (quickselect; vs holds no NaN).
func nthElement(vs []float64, k int) float64 {
	lo, hi := 0, len(vs)-1
	for lo < hi {
		// Median of three as the pivot.
		mid := lo + (hi-lo)/2
		if vs[mid] < vs[lo] {
			vs[mid], vs[lo] = vs[lo], vs[mid]
		}
		if vs[hi] < vs[lo] {
			vs[hi], vs[lo] = vs[lo], vs[hi]
		}
		if vs[hi] < vs[mid] {
			vs[hi], vs[mid] = vs[mid], vs[hi]
		}
		p := vs[mid]
		i, j := lo, hi
		for i <= j {
			for vs[i] < p {
				i++
			}
			for vs[j] > p {
				j--
			}
			if i <= j {
				vs[i], vs[j] = vs[j], vs[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return vs[k]
		}
	}
	return vs[k]
}

// framePlacements computes queryPlacements' rows from the frame: per
// (host, pod, engine, gpu, model) group of the pooled rows, the window and
// baseline counts, their tail counts, the window quantile and every
// active cause's exposure counts; and, in the same pass, queryAffected's
// values (frameAffected). Chunks are spread over the workers; counts and
// order statistics do not depend on the order rows are seen in.
func (r *run) framePlacements(active []*causeRun) []placementRow {
	f, sa := r.gofit.frame, r.gofit.shared
	lc := f.labels[sa.place]
	ng := len(sa.groups)
	tc := r.termCompiler()
	exps := make([]*colTerm, len(active))
	for k, c := range active {
		e := c.node.Treatment()
		if c.continuous {
			e = c.node.Covariate()
		}
		exps[k] = sa.term(tc, e)
	}
	type part struct {
		rows     []placementRow
		seen     []bool
		ys       [][]float64 // per group: y of its window rows
		winY     []float64   // y of the window rows winWhere selects
		affected [][]float64 // per cause: y of those exposed to it
		// A sampled frame's weights of ys and affected.
		yw, affW [][]float64
		buf      [][]float64
		flag     []uint8
	}
	sampled := f.sampleBits > 0
	const (
		fWin = 1 << iota
		fTail
		fWinWhere
	)
	parts := make([]*part, runtime.GOMAXPROCS(0))
	f.parallel(func(w, ci int) {
		pt := parts[w]
		if pt == nil {
			pt = &part{rows: make([]placementRow, ng), seen: make([]bool, ng), ys: make([][]float64, ng), affected: make([][]float64, len(active)), buf: f.frameBufs(4),
				yw: make([][]float64, ng), affW: make([][]float64, len(active))}
			for g := range pt.rows {
				pt.rows[g].exp = make([]expCounts, len(active))
			}
			parts[w] = pt
		}
		y := f.frameCol(sa.y, ci, pt.buf[0])
		win := f.frameCol(sa.win, ci, pt.buf[1])
		pw := f.frameCol(sa.prune, ci, pt.buf[2])
		codes := lc.parts[ci]
		flag := slices.Grow(pt.flag[:0], len(y))[:len(y)]
		pt.flag = flag
		wv := f.weights(ci, 0, len(y))
		for i, yv := range y {
			g := int(codes[i]) - 1
			pt.seen[g] = true
			p := &pt.rows[g]
			tail := yv > r.tailT
			fl := uint8(0)
			if tail {
				fl |= fTail
			}
			wt := 1.0
			if wv != nil {
				wt = wv[i]
			}
			if win[i] != 0 {
				fl |= fWin
				p.nw += wt
				pt.ys[g] = append(pt.ys[g], yv)
				if sampled {
					pt.yw[g] = append(pt.yw[g], wt)
				}
				if pw[i] != 0 {
					fl |= fWinWhere
					pt.winY = append(pt.winY, yv)
				}
				if tail {
					p.nwTail += wt
				}
			} else if r.base != nil {
				p.nb += wt
				if tail {
					p.nbTail += wt
				}
			}
			flag[i] = fl
		}
		for k, c := range active {
			e := f.evalTerm(exps[k], ci, pt.buf[3])
			for i, ev := range e {
				if c.continuous {
					if !(ev > c.elevated) {
						continue
					}
				} else if ev == 0 {
					continue
				}
				x := &pt.rows[int(codes[i])-1].exp[k]
				fl := flag[i]
				wt := 1.0
				if wv != nil {
					wt = wv[i]
				}
				switch {
				case fl&fWin != 0:
					x.wExp += wt
					if fl&fTail != 0 {
						x.wTailExp += wt
					}
					if fl&fWinWhere != 0 {
						pt.affected[k] = append(pt.affected[k], y[i])
						if sampled {
							pt.affW[k] = append(pt.affW[k], wt)
						}
					}
				case r.base != nil:
					x.bExp += wt
					if fl&fTail != 0 {
						x.bTailExp += wt
					}
				}
			}
		}
	})
	rows := make([]placementRow, ng)
	seen := make([]bool, ng)
	ys, yw := make([][]float64, ng), make([][]float64, ng)
	affected, affW := make([][]float64, len(active)), make([][]float64, len(active))
	sa.winY = sa.winY[:0]
	for g := range rows {
		p := &rows[g]
		p.host, p.pod, p.engine, p.gpu, p.model = sa.groups[g][0], sa.groups[g][1], sa.groups[g][2], sa.groups[g][3], sa.groups[g][4]
		p.exp = make([]expCounts, len(active))
	}
	for _, pt := range parts {
		if pt == nil {
			continue
		}
		for g := range rows {
			p, q := &rows[g], &pt.rows[g]
			seen[g] = seen[g] || pt.seen[g]
			p.nw += q.nw
			p.nwTail += q.nwTail
			p.nb += q.nb
			p.nbTail += q.nbTail
			for k := range p.exp {
				p.exp[k].add(q.exp[k])
			}
			ys[g] = append(ys[g], pt.ys[g]...)
			yw[g] = append(yw[g], pt.yw[g]...)
		}
		sa.winY = append(sa.winY, pt.winY...)
		for k := range affected {
			affected[k] = append(affected[k], pt.affected[k]...)
			affW[k] = append(affW[k], pt.affW[k]...)
		}
	}
	sa.affected = make([]float64, 0, 2*len(active))
	for k := range affected {
		if sampled {
			n := floats.Sum(affW[k])
			sa.affected = append(sa.affected, weightedQuantileExact(affected[k], affW[k], n, r.q), n)
			continue
		}
		sa.affected = append(sa.affected, quantileExact(affected[k], r.q), float64(len(affected[k])))
	}
	var out []placementRow
	for g := range rows {
		if sampled {
			// The groups' window and baseline counts are exact (the first
			// read's GROUP BY over every pooled row); the tail counts are
			// too (the tail rows weigh 1), the other exposure counts are
			// weighted estimates.
			n := f.placeN[strings.Join(sa.groups[g][:], "\x1f")]
			if n[0]+n[1] == 0 {
				continue
			}
			rows[g].nw, rows[g].nb = n[0], n[1]
			rows[g].p99w = weightedQuantileExact(ys[g], yw[g], n[0], r.q)
			out = append(out, rows[g])
			continue
		}
		if !seen[g] {
			continue
		}
		rows[g].p99w = quantileExact(ys[g], r.q)
		out = append(out, rows[g])
	}
	return out
}

// weightedQuantileExact is quantileExact(level) of n rows of which vs, with
// weights ws, are a sample that holds every row above some value with
// weight 1: the element of rank ⌊level·n⌋, counted from the top by the
// weights. It is exact when that rank falls among the rows of weight 1
// above the others (a group's P99 in the tail), an estimate otherwise;
// NaN when n < 1 or vs is empty.
func weightedQuantileExact(vs, ws []float64, n, level float64) float64 {
	if len(vs) == 0 || !(n >= 1) {
		return math.NaN()
	}
	rank := math.Min(math.Floor(level*n), math.Floor(n)-1) // 0-based, ascending
	top := math.Floor(n) - rank                            // its place from the top, 1-based
	idx := make([]int, len(vs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(vs[b], vs[a]) })
	cum := 0.0
	for _, i := range idx {
		if cum += ws[i]; cum >= top {
			return vs[i]
		}
	}
	return vs[idx[len(idx)-1]]
}

// frameAffected is queryAffected's values, per active cause the SLO
// quantile and the count of the window rows exposed to it, computed by
// framePlacements (which runs first, over the same active causes).
func (r *run) frameAffected() []float64 { return r.gofit.shared.affected }

// topCut is a lower bound of the m-th largest outcome of the window rows
// (m ≤ their number): every one of the m slowest is at least it. Just
// below the value itself, so that the literal ClickHouse parses cannot
// leave one of them out.
func (sa *sharedAtoms) topCut(m int) (float64, bool) {
	sa.scratch = sa.scratch[:0]
	if sa.sampled {
		// Only the tail rows are all there: the m slowest must be among
		// them.
		for _, y := range sa.winY {
			if y > sa.tailT {
				sa.scratch = append(sa.scratch, y)
			}
		}
	} else {
		sa.scratch = append(sa.scratch, sa.winY...)
	}
	n := len(sa.scratch)
	if m <= 0 || m > n {
		return 0, false
	}
	v := nthElement(sa.scratch, n-m)
	return v - math.Abs(v)*1e-9 - 1e-300, true
}

// sameFloats reports whether a and b are equal bit for bit (NaN equal to
// NaN).
func sameFloats(a, b []float64) bool {
	return slices.EqualFunc(a, b, func(x, y float64) bool {
		return math.Float64bits(x) == math.Float64bits(y) || math.IsNaN(x) && math.IsNaN(y)
	})
}

// intHash64 is ClickHouse's intHash64 (Common/HashTable/Hash.h, the
// function the sampler hashes its determinator with; the SQL function of
// that name salts it first).
func intHash64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}
