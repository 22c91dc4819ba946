package causal

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gonum.org/v1/gonum/floats"

	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/causal/sqlgen"
	"github.com/tailcause/tailcause/causal/stats"
)

// The Go fits: the two passes of a Design (SuffStatsSQL, MeatSQL) computed
// in Go from columns read once per analysis, instead of by ClickHouse from
// generated SQL (DESIGN.md, "The fits' sums in Go"). The frame holds the rows of the run's
// pooled scope in its snapshot, one column per atom (colterm.go): the node
// expressions, the outcome's tail indicator and logarithm, the window
// indicator and the factor labels; the regressors (hinges, products,
// guards, indicators) are evaluated from them block by block in the
// passes. The first pass returns the GroupRows the SQL would, the second
// the row of MeatColumns, so everything downstream (AssembleSuffStats,
// FitOLS, ParseMeats) is shared with the SQL path.

const (
	frameChunk = 1 << 16 // rows per chunk of the frame (and per row of a frame read)
	fitBlock   = 1024    // rows per block of the Go passes (the columns of a block stay in L2)
	// frameReadValues bounds the values one frame read carries (the
	// server holds them in groupArray states until the read ends): at
	// most 64M values (512 MiB), in several reads beyond.
	frameReadValues = 64 << 20
	// maxGroupKeys bounds the label combinations of a Go first pass.
	maxGroupKeys = 1 << 20
)

// errNoGoFit says why a design runs in SQL instead (wrapped with the
// reason); errFrameRead that the frame could not be read.
var (
	errNoGoFit   = errors.New("no Go fit")
	errFrameRead = errors.New("read the frame")
)

// goFits is a run's state of the Go fits.
type goFits struct {
	frame  *colFrame
	shared *sharedAtoms  // the shared aggregates come from the frame (colshared.go)
	err    error         // the frame could not be read: SQL for the rest of the run
	time   time.Duration // spent in the Go passes
	sql    int           // passes run in SQL
	// sharedSQL counts the shared aggregates a sampled frame could not
	// give exactly, computed by their queries instead.
	sharedSQL int
}

func (g *goFits) summary() Fits {
	f := Fits{Go: g.time, SQL: g.sql}
	if g.frame != nil {
		f.FrameBytes = g.frame.bytes
		for _, n := range g.frame.chunks {
			f.FrameRows += n
		}
		if g.frame.sampleBits > 0 {
			f.SampleEvery = 1 << g.frame.sampleBits
		}
		f.SharedSQL = g.sharedSQL
	}
	return f
}

// colFrame is the columnar read of one run's rows (Where = base) from its
// snapshot, in chunks of the snapshot's order (read with one thread), each
// chunk's rows then sorted by sortBy. Every read checks the rows and their
// order against the first (per chunk: count and the position-weighted sum
// of start_ns; a Memory table's blocks keep their rows in order, so a
// different order would move whole blocks).
type colFrame struct {
	base   string
	chunks []int // rows per chunk
	check  []uint64
	nums   map[string][]colPart // Float64 atoms, per chunk
	labels map[string]*labelCol // String atoms (toString(expr))
	// sortBy is the label (the DAG's first placement node) by which each
	// chunk's rows are kept sorted, perm the order (perm[ci][p] is the
	// read's row of position p): the rows of one engine are then adjacent,
	// and most blocks of the passes hold one fixed-effect level.
	sortBy string
	perm   [][]int32
	bytes  int64
	reads  int
	// hashAtom is the atom of the uid hash (sharedAtoms.hash): its chunks
	// are kept as the sampler's 32-bit hashes in hash.
	hashAtom string
	hash     [][]uint32
	// derive: the first read numbers each row's placement group (host,
	// pod, engine, gpu, model; placeAtom, one code of at most a few
	// bytes) and computes from it every label that is a function of those
	// columns (derived: per label, its code of each group) instead of
	// reading the label itself.
	derive    bool
	placeAtom string
	derived   map[string][]uint32
	// sampleBits s > 0: the frame holds every row of the tail (tailAtom
	// 1) and the others whose sampler hash (hash) has s low zero bits, with
	// weight 2^s (Config.SampleRows); w is every row's weight, per chunk in
	// the chunk's order, and placeN the exact window and baseline counts of
	// each placement group (its five columns joined by 0x1F), which the
	// first read counts over every pooled row.
	sampleBits int
	sample     string // the SQL condition of the rows kept
	tailAtom   string
	w          [][]float64
	placeN     map[string][2]float64
}

// weights returns the weights of rows [lo, lo+n) of chunk ci, nil when the
// frame holds every row (each weighs 1).
func (f *colFrame) weights(ci, lo, n int) []float64 {
	if f.w == nil {
		return nil
	}
	return f.w[ci][lo : lo+n]
}

// setWeights computes every row's weight from the tail atom after the
// first read: 1 in the tail, 2^s below it.
func (f *colFrame) setWeights() error {
	if f.sampleBits == 0 || f.w != nil {
		return nil
	}
	parts, ok := f.nums[f.tailAtom]
	if !ok || len(parts) != len(f.chunks) {
		return fmt.Errorf("frame read: no tail indicator %s to weigh the sampled rows by", f.tailAtom)
	}
	k := float64(int(1) << f.sampleBits)
	f.w = make([][]float64, len(f.chunks))
	buf := make([]float64, frameChunk)
	for ci := range f.chunks {
		t := f.frameCol(f.tailAtom, ci, buf)
		w := make([]float64, len(t))
		for i, x := range t {
			w[i] = k
			if x == 1 {
				w[i] = 1
			}
		}
		f.w[ci] = w
		f.bytes += int64(8 * len(w))
	}
	return nil
}

// placeColumns are the columns of a placement group.
var placeColumns = [5]string{"host", "pod", "engine", "gpu", "model"}

// placeLabel evaluates label a (toString(E)) of a placement group g when E
// is one of placeColumns or a concat of them and string literals.
func placeLabel(a string, g [5]string) (string, bool) {
	if a == "toString("+placeExpr+")" {
		return strings.Join(g[:], "\x1f"), true
	}
	args, ok := callArgs(a, "toString")
	if !ok || len(args) != 1 {
		return "", false
	}
	e := strings.TrimSpace(args[0])
	parts := []string{e}
	if cs, ok := callArgs(e, "concat"); ok {
		parts = cs
	}
	var b strings.Builder
	for _, p := range parts {
		p = unwrap(strings.TrimSpace(p))
		if in, ok := callArgs(p, "toString"); ok && len(in) == 1 {
			p = strings.TrimSpace(in[0])
		}
		if lit, ok := unquote(p); ok {
			if strings.Contains(strings.NewReplacer(`\\`, "", `\'`, "").Replace(p), `\`) {
				return "", false // an escape unquote does not read as ClickHouse does
			}
			b.WriteString(lit)
			continue
		}
		i := slices.Index(placeColumns[:], p)
		if i < 0 {
			return "", false
		}
		b.WriteString(g[i])
	}
	return b.String(), true
}

// colPart is one chunk of a Float64 column in the narrowest exact type:
// bytes (0/1, or any UInt8 read as one), float32 when every value converts
// back unchanged.
type colPart struct {
	f64 []float64
	f32 []float32
	u8  []uint8
}

type labelCol struct {
	dict  []string          // code i+1 is dict[i]; 0 is never read
	code  map[string]uint32 // dict → code
	parts [][]uint32
}

func (r *run) goFitsOn() bool {
	return !r.cfg.SQLFits && r.a.snap != nil && r.table() == snapshotTable
}

// goDesign is a Design compiled against the frame.
type goDesign struct {
	d       sqlgen.Design
	conds   []*colTerm // the conjuncts of Where beyond the frame's base
	cols    []*colTerm // regressors, outcomes, sums (the order of sqlgen's rowsSQL finite check)
	c, k, m int
	factors []*labelCol
	stride  []int // group key = Σ code_f · stride_f
	keys    int   // number of keys
	levels  [][]int
	atoms   int // distinct atoms (colTerm.aid)
}

// compileDesign compiles d for the Go passes, reading the atoms the frame
// lacks; errNoGoFit when d reads other rows than the frame's.
func (r *run) compileDesign(d sqlgen.Design) (*goDesign, error) {
	if d.Table != snapshotTable {
		return nil, fmt.Errorf("%w: table %s", errNoGoFit, d.Table)
	}
	base := r.pooledWhere()
	rest, ok := strings.CutPrefix(d.Where, base)
	if !ok || (rest != "" && !strings.HasPrefix(rest, " AND ")) {
		return nil, fmt.Errorf("%w: the rows are not the pooled scope's", errNoGoFit)
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	tc := r.termCompiler()
	g := &goDesign{d: d, c: len(d.Regressors), k: len(d.Outcomes), m: len(d.Sums)}
	for _, x := range slices.Concat(d.Regressors, d.Outcomes, d.Sums) {
		g.cols = append(g.cols, tc.compile(x))
	}
	for _, s := range conjuncts(strings.TrimPrefix(rest, " AND ")) {
		t := tc.condition(s)
		// isFinite(x) of an atom that is itself a column: the row's sum
		// is then not finite either, and the row is left out anyway.
		if t.kind == termFinite && t.args[0].kind == termAtom && slices.ContainsFunc(g.cols, func(c *colTerm) bool {
			return c.kind == termAtom && c.atom == t.args[0].atom
		}) {
			continue
		}
		g.conds = append(g.conds, t)
	}
	nums, labels := map[string]bool{}, map[string]bool{}
	for _, t := range slices.Concat(g.conds, g.cols) {
		t.atoms(nums, labels)
	}
	for _, f := range d.Factors {
		labels["toString("+f.Expr+")"] = true
	}
	if r.gofit.frame == nil {
		r.newFrame(tc, nums, labels)
	}
	if err := r.readFrame(nums, labels); err != nil {
		return nil, fmt.Errorf("%w: %w", errFrameRead, err)
	}
	return r.gofit.frame.bind(g)
}

// newFrame starts the run's frame and adds to nums and labels the atoms
// every design of the run may use, so that the first read takes them all.
func (r *run) newFrame(tc termCompiler, nums, labels map[string]bool) {
	r.gofit.frame = &colFrame{base: r.pooledWhere(), nums: map[string][]colPart{}, labels: map[string]*labelCol{}}
	for _, n := range r.a.dag.Nodes() {
		if n.Categorical && n.Expr != "" && !n.Latent {
			r.gofit.frame.sortBy = "toString(" + n.Expr + ")"
			break
		}
	}
	// The first read takes the atoms every design of the run may use,
	// so that later designs find them.
	for _, n := range r.a.dag.Nodes() {
		if n.Latent || n.Role == dag.RoleOutcome || n.Expr == "" {
			continue
		}
		if n.Categorical {
			labels["toString("+n.Expr+")"] = true
			continue
		}
		tc.compile(n.Covariate()).atoms(nums, labels)
		tc.compile(n.Treatment()).atoms(nums, labels)
	}
	for _, x := range []string{r.tailExpr(), r.logExpr(), r.inWin01()} {
		tc.compile(x).atoms(nums, labels)
	}
}

// bind numbers the atoms of g and sets its factors from the frame's
// label columns.
func (fr *colFrame) bind(g *goDesign) (*goDesign, error) {
	d := g.d
	ids := map[string]int{}
	var number func(t *colTerm)
	number = func(t *colTerm) {
		switch t.kind {
		case termAtom, termEq:
			key := t.atom + "\x00" + t.lit
			id, ok := ids[key]
			if !ok {
				id = len(ids)
				ids[key] = id
			}
			t.aid = id
		}
		for _, a := range t.args {
			number(a)
		}
	}
	for _, t := range slices.Concat(g.conds, g.cols) {
		number(t)
	}
	g.atoms = len(ids)
	g.keys = 1
	for _, f := range d.Factors {
		lc := fr.labels["toString("+f.Expr+")"]
		lv := make([]int, len(lc.dict)+1)
		for i := range lv {
			lv[i] = -1
		}
		g.factors = append(g.factors, lc)
		g.stride = append(g.stride, g.keys)
		g.keys *= len(lc.dict) + 1
		if g.keys > maxGroupKeys {
			return nil, fmt.Errorf("%w: %d label combinations", errNoGoFit, g.keys)
		}
		g.levels = append(g.levels, lv)
	}
	at := g.c
	for f, fa := range d.Factors {
		for _, l := range fa.Levels {
			if code, ok := g.factors[f].code[l]; ok {
				g.levels[f][code] = at
			}
			at++
		}
	}
	return g, nil
}

func (r *run) termCompiler() termCompiler {
	labels := map[string]bool{}
	for _, c := range []string{"host", "pod", "engine", "gpu", "model", "service"} {
		labels[c] = true
	}
	for _, n := range r.a.dag.Nodes() {
		if n.Categorical && n.Expr != "" {
			labels[n.Expr] = true
		}
	}
	return termCompiler{labels: labels}
}

// col is one column of a frame read.
type col struct {
	sql   string // selected expression
	num   string // the Float64 atom, or
	label string // the label whose codes it carries
	width int    // bytes per value of a numeric atom: 8, 4 (Float32) or 1 (UInt8)
}

// readFrame reads the atoms the frame lacks.
func (r *run) readFrame(nums, labels map[string]bool) error {
	f := r.gofit.frame
	var newNums, newLabels []string
	for a := range nums {
		if _, ok := f.nums[a]; !ok {
			newNums = append(newNums, a)
		}
	}
	for a := range labels {
		if _, ok := f.labels[a]; !ok {
			newLabels = append(newLabels, a)
		}
	}
	slices.Sort(newNums)
	slices.Sort(newLabels)
	if len(newNums)+len(newLabels) == 0 {
		return nil
	}
	all := "(SELECT * FROM " + snapshotTable + " WHERE " + f.base + ")"
	from := all
	if f.sample != "" {
		from = "(SELECT * FROM " + snapshotTable + " WHERE " + f.base + " AND " + f.sample + ")"
	}
	// The type of each numeric atom's argument (toFloat64(x): x's), asked
	// with the labels: an atom whose values are bytes or float32 is read
	// as such (narrowAtom), an eighth or half of the bytes of a Float64.
	var typed []string // the atoms whose argument's type is asked
	types := map[string]string{}
	var place *col // the first read's placement group codes (derive)
	kept := -1     // the frame's rows, counted with the placement groups
	if f.derive && f.chunks == nil && f.derived == nil {
		var err error
		if place, newLabels, kept, err = r.placeGroups(all, f.sample, newLabels, newNums, types); err != nil {
			return err
		}
	}
	if len(newLabels) > 0 {
		sel := make([]string, len(newLabels))
		for i, a := range newLabels {
			sel[i] = "arraySort(groupUniqArray(" + a + "))"
		}
		for _, a := range newNums {
			if place != nil {
				break // asked with the placement groups
			}
			if args, ok := callArgs(a, "toFloat64"); ok && len(args) == 1 && a != f.hashAtom {
				typed = append(typed, a)
				sel = append(sel, "any(toTypeName("+args[0]+"))")
			}
		}
		dicts := make([][]string, len(newLabels))
		names := make([]string, len(typed))
		dest := make([]any, 0, len(newLabels)+len(typed))
		for i := range dicts {
			dest = append(dest, &dicts[i])
		}
		for i := range names {
			dest = append(dest, &names[i])
		}
		q := "SELECT " + strings.Join(sel, ", ") + " FROM " + from
		if err := r.query("frame labels", q, func(rows Rows) error { return rows.Scan(dest...) }); err != nil {
			return err
		}
		for i, a := range typed {
			types[a] = names[i]
		}
		for i, a := range newLabels {
			lc := &labelCol{dict: dicts[i], code: map[string]uint32{}}
			for j, l := range lc.dict {
				lc.code[l] = uint32(j + 1)
			}
			f.labels[a] = lc
		}
	}
	var cols []col
	if place != nil {
		cols = append(cols, *place) // first: the order of every chunk may follow from it
	}
	for _, a := range newLabels {
		lc := f.labels[a]
		ds, cs := make([]string, len(lc.dict)), make([]string, len(lc.dict))
		for i, l := range lc.dict {
			ds[i], cs[i] = dag.QuoteString(l), strconv.Itoa(i+1)
		}
		cols = append(cols, col{sql: "toUInt32(transform(" + a + ", [" + strings.Join(ds, ", ") + "], [" + strings.Join(cs, ", ") + "], 0))", label: a})
	}
	for _, a := range newNums {
		sql, width := narrowAtom(a, types[a])
		cols = append(cols, col{sql: sql, num: a, width: width})
	}
	rows := 0
	for _, n := range f.chunks {
		rows += n
	}
	budget := frameReadValues
	if r.cfg.frameReadValues > 0 {
		budget = r.cfg.frameReadValues
	}
	if f.chunks == nil && r.a.snap != nil {
		rows = int(r.a.snap.reads.SnapshotRows) // before the first read: at most the snapshot's
		switch {
		case f.sample != "" && kept >= 0:
			rows = kept // counted by the placement groups' scan
		case f.sample != "" && rows > 0 && budget/rows < len(cols):
			// A sampled frame holds a fraction of them: counted, so that
			// it is read in as few scans of the snapshot as it needs.
			n, err := r.floats("frame rows", "SELECT toFloat64(count()) FROM "+from, 1)
			if err != nil {
				return err
			}
			rows = int(n[0])
		}
	}
	per := len(cols)
	if rows > 0 {
		per = max(1, budget/rows)
	}
	for len(cols) > 0 {
		batch := cols[:min(per, len(cols))]
		cols = cols[len(batch):]
		sel := make([]string, len(batch))
		inner := make([]string, len(batch))
		for i, c := range batch {
			inner[i] = c.sql + " AS tc_a" + strconv.Itoa(i)
			sel[i] = "reinterpret(groupArray(tc_a" + strconv.Itoa(i) + "), 'String')"
		}
		// One thread reads the Memory table in the order it was written:
		// rowNumberInAllBlocks numbers the rows alike in every read.
		q := fmt.Sprintf("SELECT intDiv(tc_row, %d) AS tc_chunk, count(), sum(start_ns * (tc_row + 1)), %s\nFROM (SELECT rowNumberInAllBlocks() AS tc_row, start_ns, %s FROM %s)\nGROUP BY tc_chunk\nSETTINGS max_threads = 1",
			frameChunk, strings.Join(sel, ", "), strings.Join(inner, ", "), from)
		got := map[uint64]bool{}
		var chunks []int
		var checks []uint64
		first := f.chunks == nil
		bufs := make([]string, len(batch))
		err := r.query("frame", q, func(rows Rows) error {
			var ci, n, check uint64
			dest := []any{&ci, &n, &check}
			for i := range bufs {
				dest = append(dest, &bufs[i])
			}
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			if got[ci] {
				return fmt.Errorf("chunk %d twice", ci)
			}
			got[ci] = true
			if int(ci) >= len(chunks) {
				chunks = append(chunks, make([]int, int(ci)+1-len(chunks))...)
				checks = append(checks, make([]uint64, int(ci)+1-len(checks))...)
			}
			chunks[ci], checks[ci] = int(n), check
			var groups []uint32 // the rows' placement group codes (place)
			for i, c := range batch {
				if first && c.label != "" && c.label == f.sortBy {
					f.sortChunk(int(ci), int(n), bufs[i], len(f.labels[c.label].dict))
				}
				if place != nil && c.num == place.num {
					var err error
					if groups, err = decodeCodes(bufs[i], c.width, int(n)); err != nil {
						return err
					}
					if by := f.derived[f.sortBy]; first && by != nil {
						f.sortCodes(int(ci), groups, by, len(f.labels[f.sortBy].dict))
					}
				}
			}
			for i, c := range batch {
				if place != nil && c.num == place.num {
					if err := f.deriveLabels(int(ci), groups); err != nil {
						return err
					}
					continue
				}
				if err := f.store(c.num, c.label, c.width, int(ci), int(n), bufs[i]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(got) != len(chunks) {
			return fmt.Errorf("frame read: %d of %d chunks", len(got), len(chunks))
		}
		if first {
			f.chunks, f.check = chunks, checks
		} else if !slices.Equal(chunks, f.chunks) || !slices.Equal(checks, f.check) {
			return errors.New("frame read: the snapshot's rows came in another order than in the first read")
		}
		f.reads++
	}
	if err := f.setWeights(); err != nil {
		return err
	}
	r.a.log.Debug("causal frame", "rows", rows, "numeric", len(f.nums), "labels", len(f.labels), "bytes", f.bytes)
	return nil
}

// narrowAtom is what a frame read selects for numeric atom a (toFloat64
// of an expression of type typ), and its bytes per value: a UInt8 or Bool
// as UInt8, a Float32 or an integer of at most 16 bits as Float32 (every
// such value is exact in both), anything else as the Float64 itself.
func narrowAtom(a, typ string) (string, int) {
	args, ok := callArgs(a, "toFloat64")
	if !ok || len(args) != 1 {
		return a, 8
	}
	switch typ {
	case "UInt8", "Bool":
		return "toUInt8(" + args[0] + ")", 1
	case "Float32", "Int8", "Int16", "UInt16":
		return "toFloat32(" + args[0] + ")", 4
	}
	return a, 8
}

// store keeps chunk ci (n rows) of an atom from its raw little-endian
// bytes, width bytes per value of a numeric atom (narrowAtom).
func (f *colFrame) store(num, label string, width, ci, n int, raw string) error {
	if label != "" {
		if len(raw) != 4*n {
			return fmt.Errorf("frame read %s: %d bytes for %d rows", label, len(raw), n)
		}
		lc := f.labels[label]
		if len(lc.parts) <= ci {
			lc.parts = append(lc.parts, make([][]uint32, ci+1-len(lc.parts))...)
		}
		p := make([]uint32, n)
		perm := f.permOf(ci, n)
		for i := range p {
			p[i] = le32(raw[4*perm[i]:])
		}
		lc.parts[ci] = p
		f.bytes += int64(4 * n)
		return nil
	}
	if width == 0 {
		width = 8
	}
	if len(raw) != width*n {
		return fmt.Errorf("frame read %s: %d bytes for %d rows", num, len(raw), n)
	}
	if width < 8 {
		var p colPart
		perm := f.permOf(ci, n)
		if width == 1 {
			p.u8 = make([]uint8, n)
			for i := range p.u8 {
				p.u8[i] = raw[perm[i]]
			}
		} else {
			p.f32 = make([]float32, n)
			for i := range p.f32 {
				p.f32[i] = math.Float32frombits(le32(raw[4*perm[i]:]))
			}
		}
		f.bytes += int64(width * n)
		f.putPart(num, ci, p)
		return nil
	}
	if num != "" && num == f.hashAtom {
		h := make([]uint32, n)
		perm := f.permOf(ci, n)
		for i := range h {
			h[i] = uint32(intHash64(le64(raw[8*perm[i]:])))
		}
		for len(f.hash) <= ci {
			f.hash = append(f.hash, nil)
		}
		f.hash[ci] = h
		f.bytes += int64(4 * n)
		return nil
	}
	// Classify first, then decode into the narrowest type (no float64
	// copy of a column kept as bytes or float32).
	bits, f32 := true, true
	for i := range n {
		x := math.Float64frombits(le64(raw[8*i:]))
		bits = bits && (x == 1 || x == 0 && !math.Signbit(x))
		f32 = f32 && (float64(float32(x)) == x || math.IsNaN(x))
		if !bits && !f32 {
			break
		}
	}
	var p colPart
	perm := f.permOf(ci, n)
	switch {
	case bits:
		p.u8 = make([]uint8, n)
		for i := range p.u8 {
			if raw[8*perm[i]+7] != 0 { // 1.0 is 0x3FF0…, 0.0 all zero
				p.u8[i] = 1
			}
		}
		f.bytes += int64(n)
	case f32:
		p.f32 = make([]float32, n)
		for i := range p.f32 {
			p.f32[i] = float32(math.Float64frombits(le64(raw[8*perm[i]:])))
		}
		f.bytes += int64(4 * n)
	default:
		p.f64 = make([]float64, n)
		for i := range p.f64 {
			p.f64[i] = math.Float64frombits(le64(raw[8*perm[i]:]))
		}
		f.bytes += int64(8 * n)
	}
	f.putPart(num, ci, p)
	return nil
}

// putPart keeps p as chunk ci of atom num.
func (f *colFrame) putPart(num string, ci int, p colPart) {
	parts := f.nums[num]
	if len(parts) <= ci {
		parts = append(parts, make([]colPart, ci+1-len(parts))...)
	}
	parts[ci] = p
	f.nums[num] = parts
}

// sortChunk sets the order of chunk ci (n rows) from the codes of the
// sortBy label (raw, little-endian uint32, codes 0..dict): a stable
// counting sort.
func (f *colFrame) sortChunk(ci, n int, raw string, dict int) {
	if len(raw) != 4*n {
		return // store reports it
	}
	start := make([]int32, dict+2)
	for i := range n {
		start[min(int(le32(raw[4*i:])), dict)+1]++
	}
	for c := 1; c < len(start); c++ {
		start[c] += start[c-1]
	}
	perm := make([]int32, n)
	for i := range n {
		c := min(int(le32(raw[4*i:])), dict)
		perm[start[c]] = int32(i)
		start[c]++
	}
	for len(f.perm) <= ci {
		f.perm = append(f.perm, nil)
	}
	f.perm[ci] = perm
	f.bytes += int64(4 * n)
}

// sortCodes is sortChunk for a label derived from the rows' placement
// groups: row i's code is by[groups[i]−1].
func (f *colFrame) sortCodes(ci int, groups, by []uint32, dict int) {
	raw := make([]byte, 4*len(groups))
	for i, g := range groups {
		c := uint32(0)
		if g >= 1 && int(g) <= len(by) {
			c = by[g-1]
		}
		raw[4*i], raw[4*i+1], raw[4*i+2], raw[4*i+3] = byte(c), byte(c>>8), byte(c>>16), byte(c>>24)
	}
	f.sortChunk(ci, len(groups), string(raw), dict)
}

// decodeCodes reads n unsigned codes of width bytes (1, 4: Float32, 8:
// Float64) from raw.
func decodeCodes(raw string, width, n int) ([]uint32, error) {
	if len(raw) != width*n {
		return nil, fmt.Errorf("frame read: %d bytes of placement groups for %d rows", len(raw), n)
	}
	out := make([]uint32, n)
	for i := range out {
		switch width {
		case 1:
			out[i] = uint32(raw[i])
		case 4:
			out[i] = uint32(math.Float32frombits(le32(raw[4*i:])))
		default:
			out[i] = uint32(math.Float64frombits(le64(raw[8*i:])))
		}
	}
	return out, nil
}

// deriveLabels sets chunk ci of every derived label from its rows'
// placement groups (in the read's order; the chunk's order applied).
func (f *colFrame) deriveLabels(ci int, groups []uint32) error {
	perm := f.permOf(ci, len(groups))
	for a, by := range f.derived {
		lc := f.labels[a]
		if len(lc.parts) <= ci {
			lc.parts = append(lc.parts, make([][]uint32, ci+1-len(lc.parts))...)
		}
		p := make([]uint32, len(groups))
		for i := range p {
			g := groups[perm[i]]
			if g < 1 || int(g) > len(by) {
				return fmt.Errorf("frame read: placement group %d of %d", g, len(by))
			}
			p[i] = by[g-1]
		}
		lc.parts[ci] = p
		f.bytes += int64(4 * len(p))
	}
	return nil
}

// placeGroups reads the placement groups of the frame's rows (with the
// types of the numeric atoms' arguments, for narrowAtom), numbers them,
// and registers every label of labels that is a function of them
// (placeLabel) as derived; it returns the column of the rows' group codes,
// the labels still to read, and with a sample condition the number of rows
// of from it keeps (the sampled frame's rows, counted in the same scan;
// −1 without one). Two groups of one cityHash64 (never seen) fail the
// read: the fits then run in SQL.
func (r *run) placeGroups(from, sample string, labels, nums []string, types map[string]string) (*col, []string, int, error) {
	f := r.gofit.frame
	sel := []string{"toString(host)", "toString(pod)", "toString(engine)", "toString(gpu)", "toString(model)", "cityHash64(host, pod, engine, gpu, model)"}
	var typed []string
	for _, a := range nums {
		if args, ok := callArgs(a, "toFloat64"); ok && len(args) == 1 && a != f.hashAtom {
			typed = append(typed, a)
			sel = append(sel, "any(toTypeName("+args[0]+"))")
		}
	}
	type group struct {
		cols [5]string
		hash uint64
		n    [2]float64 // window and baseline rows, when sampled
		kept float64    // rows the sample keeps
	}
	if f.sampleBits > 0 {
		// The frame holds a sample of the rows below the tail: the
		// groups' exact counts are read here, over every pooled row.
		base := "0"
		if r.base != nil {
			base = inInterval(*r.base)
		}
		sel = append(sel, "toFloat64(countIf("+r.inWin()+"))", "toFloat64(countIf("+base+"))")
	}
	if sample != "" {
		sel = append(sel, "toFloat64(countIf("+sample+"))")
	}
	var groups []group
	q := "SELECT " + strings.Join(sel, ", ") + " FROM " + from + " GROUP BY host, pod, engine, gpu, model"
	err := r.query("frame placement groups", q, func(rows Rows) error {
		var g group
		names := make([]string, len(typed))
		dest := []any{&g.cols[0], &g.cols[1], &g.cols[2], &g.cols[3], &g.cols[4], &g.hash}
		for i := range names {
			dest = append(dest, &names[i])
		}
		if f.sampleBits > 0 {
			dest = append(dest, &g.n[0], &g.n[1])
		}
		if sample != "" {
			dest = append(dest, &g.kept)
		}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		groups = append(groups, g)
		for i, a := range typed {
			types[a] = names[i]
		}
		return nil
	})
	if err != nil {
		return nil, nil, 0, err
	}
	kept := -1
	if sample != "" {
		n := 0.0
		for _, g := range groups {
			n += g.kept
		}
		kept = int(n)
	}
	if len(groups) == 0 {
		return nil, labels, kept, nil
	}
	slices.SortFunc(groups, func(a, b group) int { return slices.Compare(a.cols[:], b.cols[:]) })
	if f.sampleBits > 0 {
		f.placeN = map[string][2]float64{}
		for _, g := range groups {
			f.placeN[strings.Join(g.cols[:], "\x1f")] = g.n
		}
	}
	hs, codes := make([]string, len(groups)), make([]string, len(groups))
	seen := map[uint64]bool{}
	for i, g := range groups {
		if seen[g.hash] {
			return nil, nil, 0, fmt.Errorf("two placement groups hash to %d", g.hash)
		}
		seen[g.hash] = true
		hs[i], codes[i] = strconv.FormatUint(g.hash, 10), strconv.Itoa(i+1)
	}
	f.derived = map[string][]uint32{}
	var rest []string
	for _, a := range labels {
		by := make([]uint32, len(groups))
		vals := make([]string, len(groups))
		ok := true
		for i, g := range groups {
			if vals[i], ok = placeLabel(a, g.cols); !ok {
				break
			}
		}
		if !ok {
			rest = append(rest, a)
			continue
		}
		dict := slices.Compact(slices.Sorted(slices.Values(vals))) // arraySort(groupUniqArray(a))
		lc := &labelCol{dict: dict, code: map[string]uint32{}}
		for j, l := range dict {
			lc.code[l] = uint32(j + 1)
		}
		for i, v := range vals {
			by[i] = lc.code[v]
		}
		f.labels[a], f.derived[a] = lc, by
	}
	expr := "transform(cityHash64(host, pod, engine, gpu, model), [" + strings.Join(hs, ", ") + "], [" + strings.Join(codes, ", ") + "], 0)"
	c := &col{sql: "toFloat64(" + expr + ")", num: "\x00placement groups", width: 8}
	switch {
	case len(groups) < 256:
		c.sql, c.width = "toUInt8("+expr+")", 1
	case len(groups) < 1<<24:
		c.sql, c.width = "toFloat32("+expr+")", 4
	}
	f.placeAtom = c.num
	return c, rest, kept, nil
}

// permOf is the order of chunk ci: its permutation, or the identity.
func (f *colFrame) permOf(ci, n int) []int32 {
	if ci < len(f.perm) && f.perm[ci] != nil {
		return f.perm[ci]
	}
	id := make([]int32, n)
	for i := range id {
		id[i] = int32(i)
	}
	return id
}

// block is a worker's view of one block of rows: the design's columns
// evaluated, the rows not selected (a condition false, or a value not
// finite) zeroed, and each selected row's group (label combination),
// reused from block to block.
type block struct {
	f      *colFrame
	g      *goDesign
	ci, lo int
	n      int
	memo   [][]float64 // per atom id: its values in this block
	seen   []int       // per atom id: the block (gen) memo holds
	gen    int
	free   [][]float64 // buffers for terms
	own    [][]float64 // per design column: its buffer
	cols   [][]float64 // per design column: its values (own, or an atom's memo)
	mask   []bool
	acc    []float64
	key    []int32
	grp    []int32 // per row: the worker's group index; dummy (len(groups) cap) when not selected
	gid    []int32 // key → worker group index + 1
	groups []int   // worker group index → key
}

func (b *block) buf() []float64 {
	if n := len(b.free); n > 0 {
		x := b.free[n-1]
		b.free = b.free[:n-1]
		return x
	}
	return make([]float64, fitBlock)
}

func (b *block) put(x []float64) { b.free = append(b.free, x[:cap(x)]) }

// atom returns the values of atom id t in the block, evaluated once.
func (b *block) atom(t *colTerm) []float64 {
	n := b.n
	if b.seen[t.aid] == b.gen {
		return b.memo[t.aid][:n]
	}
	b.seen[t.aid] = b.gen
	if b.memo[t.aid] == nil {
		b.memo[t.aid] = make([]float64, fitBlock)
	}
	dst := b.memo[t.aid][:n]
	lo := b.lo
	switch t.kind {
	case termAtom:
		p := b.f.nums[t.atom][b.ci]
		switch {
		case p.u8 != nil:
			for i, x := range p.u8[lo : lo+n] {
				dst[i] = float64(x)
			}
		case p.f32 != nil:
			for i, x := range p.f32[lo : lo+n] {
				dst[i] = float64(x)
			}
		default:
			copy(dst, p.f64[lo:lo+n])
		}
	case termEq:
		lc := b.f.labels[t.atom]
		want, ok := lc.code[t.lit]
		for i, c := range lc.parts[b.ci][lo : lo+n] {
			if ok && c == want {
				dst[i] = 1
			} else {
				dst[i] = 0
			}
		}
	}
	return dst
}

// term returns the values of t in the block: an atom's memo, or dst
// (len n) written.
func (b *block) term(t *colTerm, dst []float64) []float64 {
	switch t.kind {
	case termAtom, termEq:
		return b.atom(t)
	case termConst:
		for i := range dst {
			dst[i] = t.v
		}
	case termHinge:
		// ClickHouse's greatest(a, b) is a > b ? a : b (NaN gives 0).
		hinge(dst, t.v, b.term(t.args[0], dst))
	case termGuard:
		x := b.term(t.args[0], dst)
		for i, v := range x {
			if v-v != 0 { // not finite
				v = 0
			}
			dst[i] = v
		}
	case termProd:
		x := b.term(t.args[0], dst)
		if &x[0] != &dst[0] {
			copy(dst, x)
		}
		tmp := b.buf()[:len(dst)]
		for _, a := range t.args[1:] {
			for i, v := range b.term(a, tmp) {
				dst[i] *= v
			}
		}
		b.put(tmp)
	case termOneMinus:
		for i, v := range b.term(t.args[0], dst) {
			dst[i] = 1 - v
		}
	case termFinite:
		for i, v := range b.term(t.args[0], dst) {
			if v-v == 0 {
				dst[i] = 1
			} else {
				dst[i] = 0
			}
		}
	}
	return dst
}

// fill evaluates g over rows [lo, lo+n) of chunk ci and returns the number
// of rows selected.
func (b *block) fill(f *colFrame, g *goDesign, ci, lo, n int) int {
	if b.cols == nil {
		b.f, b.g = f, g
		b.own, b.cols = make([][]float64, len(g.cols)), make([][]float64, len(g.cols))
		for j := range b.own {
			b.own[j] = make([]float64, fitBlock)
		}
		b.memo, b.seen = make([][]float64, g.atoms), make([]int, g.atoms)
		b.mask, b.acc = make([]bool, fitBlock), make([]float64, fitBlock)
		b.key, b.grp = make([]int32, fitBlock), make([]int32, fitBlock)
		b.gid = make([]int32, g.keys)
	}
	b.ci, b.lo, b.n = ci, lo, n
	b.gen++
	mask := b.mask[:n]
	for i := range mask {
		mask[i] = true
	}
	tmp := b.buf()[:n]
	for _, t := range g.conds {
		for i, x := range b.term(t, tmp) {
			mask[i] = mask[i] && x != 0
		}
	}
	b.put(tmp)
	// The rows' sum must be finite, as sqlgen's rowsSQL: isFinite(x0 + x1 + …).
	acc := b.acc[:n]
	for j, t := range g.cols {
		col := b.term(t, b.own[j][:n])
		b.cols[j] = col
		if j == 0 {
			copy(acc, col)
		} else {
			axpy(acc, 1, col) // 1·x is exact: acc + x, rounded once
		}
	}
	key := b.key[:n]
	for i := range key {
		key[i] = 0
	}
	for fi, lc := range g.factors {
		st := int32(g.stride[fi])
		for i, c := range lc.parts[ci][lo : lo+n] {
			key[i] += int32(c) * st
		}
	}
	sel := 0
	grp := b.grp[:n]
	for i, x := range acc {
		if !mask[i] || x-x != 0 {
			grp[i] = -1
			continue
		}
		sel++
		w := b.gid[key[i]]
		if w == 0 {
			b.groups = append(b.groups, int(key[i]))
			w = int32(len(b.groups))
			b.gid[key[i]] = w
		}
		grp[i] = w - 1
	}
	if sel < n {
		// Zero the rows left out, once per buffer (columns may share an
		// atom's).
		done := map[*float64]bool{}
		for _, col := range b.cols {
			if done[&col[0]] {
				continue
			}
			done[&col[0]] = true
			for i, w := range grp {
				if w < 0 {
					col[i] = 0
				}
			}
		}
	}
	return sel
}

// parallel runs work over the frame's chunks on up to GOMAXPROCS workers
// (chunk i on worker i mod W: the sums are the same from run to run).
func (f *colFrame) parallel(work func(w int, ci int)) {
	workers := max(1, min(runtime.GOMAXPROCS(0), len(f.chunks)))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ci := w; ci < len(f.chunks); ci += workers {
				work(w, ci)
			}
		}()
	}
	wg.Wait()
}

// suffStats is the Go first pass: rows that add up (AssembleSuffStats) to
// what SuffStatsSQL's rows do. A group's count and its sums of every
// column are its own; the cross products xx, xy and yy, which
// AssembleSuffStats only adds over the groups, are summed over all rows
// and carried by the first group.
func (f *colFrame) suffStats(g *goDesign) []sqlgen.GroupRow {
	nv := len(g.d.SuffStatsColumns())
	q := g.c + g.k // the Gram matrix of the regressors and outcomes
	type acc struct {
		gram   []float64   // q×q, upper triangle
		groups [][]float64 // worker group → n, Σ of each column
		start  []int       // per group: where its rows start in order
		order  []int32     // the block's selected rows by group
		wcols  [][]float64 // a sampled frame's columns times the rows' weights
	}
	blocks := make([]*block, runtime.GOMAXPROCS(0))
	accs := make([]*acc, len(blocks))
	f.parallel(func(w, ci int) {
		if blocks[w] == nil {
			blocks[w], accs[w] = &block{}, &acc{gram: make([]float64, q*q), order: make([]int32, fitBlock)}
		}
		b, ac := blocks[w], accs[w]
		for lo := 0; lo < f.chunks[ci]; lo += fitBlock {
			n := min(fitBlock, f.chunks[ci]-lo)
			if b.fill(f, g, ci, lo, n) == 0 {
				continue
			}
			for len(ac.groups) < len(b.groups) {
				ac.groups = append(ac.groups, make([]float64, 1+len(g.cols)))
			}
			// A sampled frame's sums are weighted: every sum runs over
			// the weighted columns (w·x), every cross product is
			// Σ (w·x_i)·x_j, every count Σ w.
			cols := b.cols
			wv := f.weights(ci, lo, n)
			if wv != nil {
				for len(ac.wcols) < len(b.cols) {
					ac.wcols = append(ac.wcols, make([]float64, fitBlock))
				}
				cols = ac.wcols[:len(b.cols)]
				for j, col := range b.cols {
					wc := cols[j][:n]
					for i, x := range col[:n] {
						wc[i] = wv[i] * x
					}
					cols[j] = wc
				}
			}
			for i := 0; i < q; i++ {
				xi := cols[i][:n]
				for j := i; j < q; j++ {
					ac.gram[i*q+j] += dot(xi, b.cols[j])
				}
			}
			grp := b.grp[:n]
			if one := grp[0]; one >= 0 && !slices.ContainsFunc(grp, func(w int32) bool { return w != one }) {
				v := ac.groups[one]
				if wv != nil {
					v[0] += floats.Sum(wv)
				} else {
					v[0] += float64(n)
				}
				for j, col := range cols {
					v[1+j] += floats.Sum(col[:n])
				}
				continue
			}
			// The rows of each group (counting sort of the row numbers),
			// then each column's sum over them.
			ng := len(b.groups)
			for len(ac.start) <= ng {
				ac.start = append(ac.start, 0)
			}
			start := ac.start[:ng+1]
			for i := range start {
				start[i] = 0
			}
			for _, w := range grp {
				if w >= 0 {
					start[w+1]++
				}
			}
			for w := range ng {
				if wv == nil {
					ac.groups[w][0] += float64(start[w+1])
				}
				start[w+1] += start[w]
			}
			if wv != nil {
				for i, w := range grp {
					if w >= 0 {
						ac.groups[w][0] += wv[i]
					}
				}
			}
			order := ac.order[:start[ng]]
			for i, w := range grp {
				if w >= 0 {
					order[start[w]] = int32(i)
					start[w]++
				}
			}
			for j, col := range cols[:q] {
				at := 0
				for w := range ng {
					var sum float64
					for _, i := range order[at:start[w]] {
						sum += col[i]
					}
					ac.groups[w][1+j] += sum
					at = start[w]
				}
			}
			for j, col := range cols[q:] {
				ac.groups[0][1+q+j] += floats.Sum(col)
			}
		}
	})
	gram := make([]float64, q*q)
	merged := map[int][]float64{}
	var keys []int
	for w, b := range blocks {
		if b == nil {
			continue
		}
		floats.Add(gram, accs[w].gram)
		for wg, key := range b.groups {
			v, ok := merged[key]
			if !ok {
				v = make([]float64, 1+len(g.cols))
				merged[key] = v
				keys = append(keys, key)
			}
			floats.Add(v, accs[w].groups[wg])
		}
	}
	slices.Sort(keys)
	out := make([]sqlgen.GroupRow, 0, len(keys))
	for i, key := range keys {
		s := merged[key]
		v := make([]float64, nv)
		v[0] = s[0]
		at := 1
		for a := 0; a < g.c; a++ {
			for b := a; b < g.c; b++ {
				if i == 0 {
					v[at] = gram[a*q+b]
				}
				at++
			}
		}
		for a := 0; a < g.c; a++ {
			v[at] = s[1+a]
			at++
		}
		for k := 0; k < g.k; k++ {
			y := g.c + k
			for a := 0; a < g.c; a++ {
				if i == 0 {
					v[at] = gram[a*q+y]
				}
				at++
			}
			v[at] = s[1+y]
			if i == 0 {
				v[at+1] = gram[y*q+y]
			}
			at += 2
		}
		for m := 0; m < g.m; m++ {
			v[at] = s[1+g.c+g.k+m]
			at++
		}
		out = append(out, sqlgen.GroupRow{Labels: g.labelsOf(key), Values: v})
	}
	return out
}

func (g *goDesign) codesOf(key int) []uint32 {
	out := make([]uint32, len(g.factors))
	for f := len(g.factors) - 1; f >= 0; f-- {
		out[f] = uint32(key / g.stride[f])
		key %= g.stride[f]
	}
	return out
}

func (g *goDesign) labelsOf(key int) []string {
	codes := g.codesOf(key)
	out := make([]string, len(codes))
	for f, c := range codes {
		if c > 0 {
			out[f] = g.factors[f].dict[c-1]
		}
	}
	return out
}

// meatGroup is what a group's indicator columns add to a row's residuals,
// targeted row a·x and leverage.
type meatGroup struct {
	beta []float64 // per outcome: Σ coefficients of the row's levels
	a    float64   // Σ inv[coef, level]
	b    []float64 // per expression column j: Σ inv[j, level]
	s    float64   // Σ inv[level, level'] over the row's levels
}

func (g *goDesign) meatGroup(key int, fits []*stats.OLS, coef int) meatGroup {
	inv := fits[0].XtXInv
	var ind []int
	for f, c := range g.codesOf(key) {
		if col := g.levels[f][c]; col >= 0 {
			ind = append(ind, col)
		}
	}
	mg := meatGroup{beta: make([]float64, len(fits)), b: make([]float64, g.c)}
	for _, i := range ind {
		for k, fit := range fits {
			mg.beta[k] += fit.Coef[i]
		}
		mg.a += inv.At(coef, i)
		for j := 0; j < g.c; j++ {
			mg.b[j] += inv.At(j, i)
		}
		for _, i2 := range ind {
			mg.s += inv.At(i, i2)
		}
	}
	return mg
}

// meats is the Go second pass: the row MeatSQL returns (MeatColumns).
func (f *colFrame) meats(g *goDesign, fits []*stats.OLS, coef int) []float64 {
	inv := fits[0].XtXInv
	c, k := g.c, g.k
	a := make([]float64, c)
	for j := range a {
		a[j] = inv.At(coef, j)
	}
	// The leverage x'Ax as Σ_j x_j (A_jj x_j + Σ_{l>j} 2 A_jl x_l).
	twoA := make([][]float64, c)
	for j := range twoA {
		twoA[j] = make([]float64, c)
		for l := j; l < c; l++ {
			twoA[j][l] = 2 * inv.At(j, l)
		}
		twoA[j][j] = inv.At(j, j)
	}
	type acc struct {
		n, hmax float64
		v0, v3  []float64
		mgs     []meatGroup // per worker group
		b2      [][]float64 // per expression column j: 2·mgs[w].b[j] by group
	}
	blocks := make([]*block, runtime.GOMAXPROCS(0))
	accs := make([]*acc, len(blocks))
	f.parallel(func(w, ci int) {
		if blocks[w] == nil {
			blocks[w] = &block{}
			accs[w] = &acc{hmax: math.Inf(-1), v0: make([]float64, k), v3: make([]float64, k), b2: make([][]float64, c)}
		}
		b, ac := blocks[w], accs[w]
		e := make([][]float64, k)
		for i := range e {
			e[i] = make([]float64, fitBlock)
		}
		u, h, dv := make([]float64, fitBlock), make([]float64, fitBlock), make([]float64, fitBlock)
		var ptrs []*float64
		for lo := 0; lo < f.chunks[ci]; lo += fitBlock {
			n := min(fitBlock, f.chunks[ci]-lo)
			if b.fill(f, g, ci, lo, n) == 0 {
				continue
			}
			for len(ac.mgs) < len(b.groups) {
				mg := g.meatGroup(b.groups[len(ac.mgs)], fits, coef)
				ac.mgs = append(ac.mgs, mg)
				for j := range ac.b2 {
					ac.b2[j] = append(ac.b2[j], 2*mg.b[j])
				}
			}
			x := func(j int) []float64 { return b.cols[j][:n] }
			grp := b.grp[:n]
			// The factor levels' terms, row by row (0 without factors).
			uu, hh := u[:n], h[:n]
			for i := range uu {
				uu[i], hh[i] = 0, 0
			}
			for kk := range e {
				copy(e[kk][:n], x(c+kk))
			}
			single := int32(-1) // the block's one group, when every row is selected and in it
			if len(g.factors) > 0 {
				if one := grp[0]; one >= 0 && !slices.ContainsFunc(grp, func(w int32) bool { return w != one }) {
					single = one
				}
			}
			switch {
			case single >= 0:
				mg := &ac.mgs[single]
				for i := range uu {
					uu[i], hh[i] = mg.a, mg.s
				}
				for kk := range e {
					ek := e[kk][:n]
					for i := range ek {
						ek[i] -= mg.beta[kk]
					}
				}
				for j := 0; j < c; j++ {
					axpy(hh, 2*mg.b[j], x(j))
				}
			case len(g.factors) > 0:
				for i, w := range grp {
					if w < 0 {
						continue
					}
					mg := &ac.mgs[w]
					uu[i], hh[i] = mg.a, mg.s
					for kk := range e {
						e[kk][i] -= mg.beta[kk]
					}
				}
				// Rows left out are 0 in every column: group 0's terms
				// add nothing to them.
				for j := 0; j < c; j++ {
					bj := ac.b2[j]
					for i, xv := range x(j) {
						hh[i] += bj[max(grp[i], 0)] * xv
					}
				}
			}
			for kk := range e {
				ek, beta := e[kk][:n], fits[kk].Coef
				for j := 0; j < c; j++ {
					axpy(ek, -beta[j], x(j))
				}
			}
			for j := 0; j < c; j++ {
				axpy(uu, a[j], x(j))
			}
			for j := 0; j < c; j++ {
				ptrs = quad(hh, b.cols[j:c], twoA[j][j:], 0, n, ptrs)
			}
			// A sampled frame's rows weigh w: the leverage is w·x'Ax (A
			// the inverse of the weighted X'WX), each row's part of the
			// meat w²·e²·(a·x)² (the sandwich of a weighted estimating
			// equation), the rows counted Σ w.
			wv := f.weights(ci, lo, n)
			if wv != nil {
				for i := range hh {
					hh[i] *= wv[i]
				}
			}
			dd := dv[:n]
			for i, hv := range hh {
				if grp[i] < 0 {
					continue
				}
				if wv != nil {
					ac.n += wv[i]
				} else {
					ac.n++
				}
				if hv > ac.hmax {
					ac.hmax = hv
				}
				dd[i] = 1 / ((1 - hv) * (1 - hv))
			}
			// Each outcome's sums in registers, over the rows in order (the
			// same additions as row by row).
			for kk := range e {
				ek := e[kk][:n]
				s0, s3 := ac.v0[kk], ac.v3[kk]
				for i, ev := range ek {
					if grp[i] < 0 {
						continue
					}
					t := ev * ev * uu[i] * uu[i]
					if wv != nil {
						t *= wv[i] * wv[i]
					}
					s0 += t
					s3 += t * dd[i]
				}
				ac.v0[kk], ac.v3[kk] = s0, s3
			}
		}
	})
	row := make([]float64, 2+2*k)
	row[1] = math.Inf(-1)
	for _, ac := range accs {
		if ac == nil {
			continue
		}
		row[0] += ac.n
		row[1] = math.Max(row[1], ac.hmax)
		for kk := 0; kk < k; kk++ {
			row[2+2*kk] += ac.v0[kk]
			row[3+2*kk] += ac.v3[kk]
		}
	}
	if row[0] == 0 {
		row[1] = 0 // max() of no rows, as ClickHouse returns it
	}
	return row
}

// passSuffStats runs the first pass of d: in Go from the frame, or in SQL
// (Config.SQLFits, direct reads, or a design the frame cannot serve).
func (r *run) passSuffStats(what string, d sqlgen.Design) ([]sqlgen.GroupRow, error) {
	if r.goFitsOn() {
		g, err := r.goDesign(d)
		if err == nil {
			t0 := time.Now()
			rows := r.gofit.frame.suffStats(g)
			r.gofit.time += time.Since(t0)
			return rows, nil
		}
		if !errors.Is(err, errNoGoFit) {
			return nil, err
		}
		r.a.log.Debug("causal fit in SQL", "what", what, "reason", err)
	}
	q, err := d.SuffStatsSQL()
	if err != nil {
		return nil, err
	}
	r.gofit.sql++
	return r.groups(what, q, len(d.Factors), len(d.SuffStatsColumns()))
}

// passMeats runs the second pass of d (the fits of its outcomes), where
// the first ran.
func (r *run) passMeats(what string, d sqlgen.Design, fits []*stats.OLS, coef int) ([]float64, error) {
	if r.goFitsOn() {
		g, err := r.goDesign(d)
		if err == nil {
			t0 := time.Now()
			row := r.gofit.frame.meats(g, fits, coef)
			r.gofit.time += time.Since(t0)
			return row, nil
		}
		if !errors.Is(err, errNoGoFit) {
			return nil, err
		}
	}
	q, err := d.MeatSQL(fits, coef)
	if err != nil {
		return nil, err
	}
	r.gofit.sql++
	return r.floats(what, q, len(d.MeatColumns()))
}

// goDesign compiles d once per run (the two passes, and a design refitted
// with fewer columns, compile separately).
func (r *run) goDesign(d sqlgen.Design) (*goDesign, error) {
	if r.gofit.err != nil {
		return nil, r.gofit.err
	}
	g, err := r.compileDesign(d)
	if errors.Is(err, errFrameRead) {
		// The frame could not be read (a DAG expression ClickHouse
		// refuses to evaluate alone, the rows in another order): SQL for
		// the rest of the run.
		r.note("the fits run in SQL: %v", err)
		r.gofit.err = fmt.Errorf("%w: %v", errNoGoFit, err)
		r.gofit.frame = nil
		return nil, r.gofit.err
	}
	return g, err
}

func le32(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// quadGo is quad in Go: w = a[0]·x[0], w += a[l]·x[l] (axpy), h += x[0]·w.
func quadGo(h []float64, x [][]float64, a []float64, lo, hi int, ptrs []*float64) []*float64 {
	if hi <= lo {
		return ptrs
	}
	w := make([]float64, hi-lo)
	floats.ScaleTo(w, a[0], x[0][lo:hi])
	for l := 1; l < len(a); l++ {
		axpy(w, a[l], x[l][lo:hi])
	}
	for i, xv := range x[0][lo:hi] {
		h[lo+i] += xv * w[i]
	}
	return ptrs
}

// hingeGo is hinge in Go.
func hingeGo(dst []float64, k float64, x []float64) {
	for i, v := range x {
		// v − k when positive, else 0, without a branch: the sign bit
		// clears the word (−0 too).
		h := math.Float64bits(v - k)
		h &^= uint64(int64(h) >> 63)
		if v != v {
			h = 0
		}
		dst[i] = math.Float64frombits(h)
	}
}
