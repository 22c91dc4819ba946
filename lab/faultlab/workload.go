package faultlab

import (
	"bufio"
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The built-in traces are copies of /shared/data/workloads, kept with their
// attribution README and licence files (workloads/README.md).
//
//go:embed workloads/*.csv workloads/*.jsonl workloads/README.md workloads/LICENSE-*
var workloadFS embed.FS

var builtinTraces = []struct{ name, file string }{
	{"azure-code", "workloads/azure_llm_2023_code.csv"},
	{"azure-conv", "workloads/azure_llm_2023_conv.csv"},
	{"mooncake-conversation", "workloads/mooncake_conversation.jsonl"},
	{"mooncake-synthetic", "workloads/mooncake_synthetic.jsonl"},
}

// TraceNames lists the built-in workload traces.
func TraceNames() []string {
	out := make([]string, len(builtinTraces))
	for i, b := range builtinTraces {
		out[i] = b.name
	}
	return out
}

// WorkloadFiles returns the embedded workload directory (traces, README,
// licences), for tools that want to show the attribution.
func WorkloadFiles() embed.FS { return workloadFS }

// segTokens is the prefix-cache hashing unit: Mooncake's hash_ids name
// 512-token blocks, and the synthetic system prompts use the same unit.
const segTokens = 512

type traceReq struct {
	ts      int64 // ns since the trace's first request
	prompt  int32
	output  int32
	hashOff int32 // into trace.hashes
	hashLen int32
}

// trace is a parsed workload trace, immutable once loaded.
type trace struct {
	name   string
	reqs   []traceReq
	hashes []uint64 // Mooncake hash_ids, empty for Azure traces
	span   int64    // ns from first to last request
	salt   uint64
}

func (t *trace) nativeRate() float64 {
	if t.span <= 0 {
		return float64(len(t.reqs))
	}
	return float64(len(t.reqs)-1) / (float64(t.span) / 1e9)
}

// loadTrace reads a built-in trace by name, or a file path.
func loadTrace(name string) (*trace, error) {
	var data []byte
	var err error
	file := ""
	for _, b := range builtinTraces {
		if b.name == name {
			file = b.file
		}
	}
	builtin := file != ""
	if builtin {
		data, err = workloadFS.ReadFile(file)
	} else {
		if !strings.ContainsAny(name, "/.") {
			return nil, fmt.Errorf("unknown trace %q (built-in: %s; or give a file path)", name, strings.Join(TraceNames(), ", "))
		}
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, fmt.Errorf("read trace %s: %w", name, err)
	}
	t, err := parseTrace(name, data)
	if err != nil {
		return nil, fmt.Errorf("parse trace %s: %w", name, err)
	}
	if builtin {
		t.smooth(smoothWindow)
		if len(t.hashes) == 0 {
			t.mixLengths()
		}
	}
	return t, nil
}

// mixLengths gives every request of a trace without prefix ids the token
// counts of another request of the same trace, by a fixed permutation: the
// arrival process stays the recorded one, the length mix becomes the same
// in every part of the trace. The Azure hour drifts in its mix (the share
// of long answers changes by the minute), and a model that replays it in
// real time sees a third of it in a 20-minute run: its P99 would follow
// the drift. Mooncake traces keep theirs: lengths and prefix ids belong
// to their conversations.
func (t *trace) mixLengths() {
	r := rand.New(rand.NewPCG(t.salt, 0x1e9))
	n := len(t.reqs)
	for i := n - 1; i > 0; i-- {
		j := r.IntN(i + 1)
		t.reqs[i].prompt, t.reqs[j].prompt = t.reqs[j].prompt, t.reqs[i].prompt
		t.reqs[i].output, t.reqs[j].output = t.reqs[j].output, t.reqs[i].output
	}
}

// smoothWindow is the trace-time scale above which the built-in traces'
// arrival rate is made uniform (see smooth).
const smoothWindow = int64(60 * time.Second)

// smooth warps the trace's clock so that its request rate is the same in
// every window of w: bursts shorter than w keep their shape (relative to
// the local mean), the drift of the recorded hour does not. The recorded
// rate swings 2.5× over the Azure conversation hour and the Azure code
// trace has minutes with no request at all; replayed with compression,
// that drift turns into load swings of several minutes that move a
// model's P99 by ±20% with no fault, i.e. false breaches. Order, token
// counts, prefix ids and the total span are kept.
func (t *trace) smooth(w int64) {
	n := len(t.reqs)
	if n < 3 || t.span <= 2*w {
		return
	}
	mean := float64(n-1) / float64(t.span)
	gaps := make([]float64, n-1)
	lo, hi := 0, 0
	total := 0.0
	for i := 0; i < n-1; i++ {
		a, b := t.reqs[i].ts, t.reqs[i+1].ts
		mid := a + (b-a)/2
		from, to := max(0, mid-w/2), min(t.span, mid+w/2)
		// Keep the window w long at the edges of the trace.
		if to-from < w {
			if from == 0 {
				to = w
			} else {
				from = t.span - w
			}
		}
		for lo < n && t.reqs[lo].ts < from {
			lo++
		}
		for hi < n && t.reqs[hi].ts <= to {
			hi++
		}
		rho := float64(hi-lo) / float64(to-from)
		g := float64(b-a) * max(rho/mean, 0.05)
		gaps[i] = g
		total += g
	}
	k := float64(t.span) / total
	acc := 0.0
	for i := 1; i < n; i++ {
		acc += gaps[i-1] * k
		t.reqs[i].ts = int64(acc)
	}
	t.reqs[n-1].ts = t.span
}

// parseTrace accepts the Azure LLM inference CSV
// (TIMESTAMP,ContextTokens,GeneratedTokens) and the Mooncake JSONL
// ({timestamp ms, input_length, output_length, hash_ids}).
func parseTrace(name string, data []byte) (*trace, error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n\ufeff")
	var t *trace
	var err error
	if len(trimmed) > 0 && trimmed[0] == '{' {
		t, err = parseMooncake(bytes.NewReader(trimmed))
	} else {
		t, err = parseAzure(bytes.NewReader(trimmed))
	}
	if err != nil {
		return nil, err
	}
	if len(t.reqs) < 2 {
		return nil, fmt.Errorf("fewer than two requests")
	}
	sort.SliceStable(t.reqs, func(i, j int) bool { return t.reqs[i].ts < t.reqs[j].ts })
	first := t.reqs[0].ts
	for i := range t.reqs {
		t.reqs[i].ts -= first
	}
	t.span = t.reqs[len(t.reqs)-1].ts
	t.name = name
	t.salt = fnv64(name)
	return t, nil
}

func parseAzure(r io.Reader) (*trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	t := &trace{}
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" {
			continue
		}
		if line == 1 {
			if !strings.HasPrefix(strings.ToUpper(s), "TIMESTAMP,") {
				return nil, fmt.Errorf("line 1: want header TIMESTAMP,ContextTokens,GeneratedTokens, got %q", s)
			}
			continue
		}
		f := strings.Split(s, ",")
		if len(f) != 3 {
			return nil, fmt.Errorf("line %d: want 3 fields, got %d", line, len(f))
		}
		ts, err := time.Parse("2006-01-02 15:04:05.999999999", f[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: timestamp: %w", line, err)
		}
		p, err1 := strconv.Atoi(f[1])
		o, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || p < 1 || o < 0 {
			return nil, fmt.Errorf("line %d: bad token counts %q, %q", line, f[1], f[2])
		}
		t.reqs = append(t.reqs, traceReq{ts: ts.UnixNano(), prompt: int32(min(p, 1<<24)), output: int32(max(1, min(o, 1<<20)))})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return t, nil
}

func parseMooncake(r io.Reader) (*trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	t := &trace{}
	line := 0
	var rec struct {
		Timestamp    *float64 `json:"timestamp"`
		InputLength  int      `json:"input_length"`
		OutputLength int      `json:"output_length"`
		HashIDs      []int64  `json:"hash_ids"`
	}
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		rec.Timestamp, rec.HashIDs = nil, rec.HashIDs[:0]
		rec.InputLength, rec.OutputLength = 0, 0
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if rec.Timestamp == nil || *rec.Timestamp < 0 || rec.InputLength < 1 || rec.OutputLength < 0 {
			return nil, fmt.Errorf("line %d: want timestamp ≥ 0, input_length ≥ 1, output_length ≥ 0", line)
		}
		off := len(t.hashes)
		for _, h := range rec.HashIDs {
			t.hashes = append(t.hashes, uint64(h))
		}
		t.reqs = append(t.reqs, traceReq{
			ts:      int64(*rec.Timestamp * 1e6),
			prompt:  int32(min(rec.InputLength, 1<<24)),
			output:  int32(max(1, min(rec.OutputLength, 1<<20))),
			hashOff: int32(off), hashLen: int32(len(rec.HashIDs)),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return t, nil
}

// traceCache loads each trace once per run.
type traceCache map[string]*trace

func (c traceCache) get(name string) (*trace, error) {
	if t, ok := c[name]; ok {
		return t, nil
	}
	t, err := loadTrace(name)
	if err != nil {
		return nil, err
	}
	c[name] = t
	return t, nil
}

// stream replays one trace into one model: a time-scaled copy of the trace
// from a random starting point, looping, thinned to its share of the rate.
// Thinning keeps or drops whole sessions (requests sharing their second
// prefix block, Mooncake's multi-turn conversations) so that prefix reuse
// survives it; requests without a session are thinned independently.
type stream struct {
	idx     int
	m       *model
	tr      *trace
	scale   float64 // simulated ns per trace ns
	keep    float64 // thinning probability
	salt    uint64  // session-thinning salt of this copy
	pos     int
	base    float64 // simulated ns of trace t=0 in the current loop
	loopGap float64 // simulated ns added per loop
	epoch   uint64
	rng     *randSrc
	next    int64 // simulated time of the next kept request
	nextReq int   // its index in tr.reqs
	sys     int32 // system prompt tokens in front of every prompt
}

// newStream replays tr at targetRate requests/s. The trace plays in real
// time (compression 1) when it is at least as busy as the target and is
// thinned down to it; a quieter trace is compressed (played faster). A
// positive compression forces the speed, and superposed copies or thinning
// make up the rate.
func newStream(idx int, m *model, tr *trace, c, keep float64, rng *randSrc) *stream {
	s := &stream{idx: idx, m: m, tr: tr, scale: 1 / c, keep: keep, rng: rng, salt: rng.Uint64()}
	meanGap := float64(tr.span) / float64(len(tr.reqs)-1)
	s.loopGap = (float64(tr.span) + meanGap) * s.scale
	s.pos = rng.IntN(len(tr.reqs))
	s.base = rng.Float64()*meanGap*s.scale - float64(tr.reqs[s.pos].ts)*s.scale
	s.epoch = rng.Uint64() >> 40
	s.advance()
	return s
}

// advance finds the next kept request.
func (s *stream) advance() {
	for {
		if s.pos >= len(s.tr.reqs) {
			s.pos = 0
			s.base += s.loopGap
			s.epoch++
		}
		i := s.pos
		s.pos++
		if s.keep < 1 {
			r := s.tr.reqs[i]
			var u float64
			if r.hashLen >= 2 {
				sess := s.tr.hashes[r.hashOff+1]
				u = float64(mix3(s.salt, s.epoch, sess)>>11) / (1 << 53)
			} else {
				u = s.rng.Float64()
			}
			if u >= s.keep {
				continue
			}
		}
		s.nextReq = i
		s.next = int64(s.base + float64(s.tr.reqs[i].ts)*s.scale)
		return
	}
}

// fillKeys writes the prefix-segment keys of trace request i into dst.
// Mooncake hash ids are used as they are (salted per loop so that a replayed
// loop does not hit a cache warmed by the previous one); Azure requests get
// one of 16 shared system prompts, Zipf-distributed, of 1–3 segments.
func (s *stream) fillKeys(dst []uint64, i int, prompt int32) (keys []uint64, affinity uint64) {
	r := s.tr.reqs[i]
	if s.sys > 0 {
		// The deployment's system prompt: one of four, Zipf-used; it
		// replaces the synthetic one of a trace without prefix ids.
		v := uint64(zipf16(s.rng) % 4)
		for j := 0; j < int(s.sys)/segTokens; j++ {
			dst = append(dst, mix3(s.tr.salt^0x5157, v, uint64(j)))
		}
		if r.hashLen == 0 {
			return dst, 0
		}
	}
	if r.hashLen > 0 {
		n0 := len(dst)
		hs := s.tr.hashes[r.hashOff : r.hashOff+r.hashLen]
		for _, h := range hs {
			dst = append(dst, mix3(s.tr.salt, s.epoch, h))
		}
		// Session affinity: the second block distinguishes conversations
		// (the first is often a system prompt shared by all).
		a := dst[n0]
		if len(dst) > n0+1 {
			a = dst[n0+1]
		}
		return dst, a | 1
	}
	p := zipf16(s.rng)
	nseg := 1 + p%3
	for nseg > 0 && int32(nseg*segTokens+64) > prompt {
		nseg--
	}
	for j := 0; j < nseg; j++ {
		dst = append(dst, mix3(s.tr.salt, uint64(p), uint64(j)))
	}
	return dst, 0
}

// zipf16 draws 0..15 with weights 1/(k+1).
func zipf16(r *randSrc) int {
	const total = 3.3807289932289937 // sum of 1/k, k=1..16
	u := r.Float64() * total
	for k := 0; k < 16; k++ {
		u -= 1 / float64(k+1)
		if u < 0 {
			return k
		}
	}
	return 15
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix3 is a fixed 64-bit mixer (splitmix64 finaliser over three words).
func mix3(a, b, c uint64) uint64 {
	x := a ^ (b * 0x9E3779B97F4A7C15) ^ (c * 0xC2B2AE3D27D4EB4F)
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return x
}

// streamsFor builds the replay streams of every model.
func streamsFor(f *fleet, cfg Config, cache traceCache, seeds *seeder) ([]*stream, error) {
	var out []*stream
	for _, m := range f.models {
		specs := m.spec.Workload
		if cfg.TraceOverride != "" {
			specs = []StreamSpec{{Trace: cfg.TraceOverride, Share: 1}}
		}
		total := 0.0
		for _, s := range specs {
			total += s.Share
		}
		for _, spec := range specs {
			tr, err := cache.get(spec.Trace)
			if err != nil {
				return nil, fmt.Errorf("model %s: %w", m.spec.Name, err)
			}
			target := m.spec.Rate * spec.Share / total * cfg.RateScale
			native := tr.nativeRate()
			c := cfg.TimeCompression
			if c <= 0 {
				c = max(1, target/native)
			}
			keep := target / (native * c)
			copies := max(1, int(math.Ceil(keep-1e-9)))
			for k := 0; k < copies; k++ {
				st := newStream(len(out), m, tr, c, keep/float64(copies), seeds.next("stream"))
				st.sys = int32(spec.SystemPromptTokens)
				out = append(out, st)
			}
		}
	}
	return out, nil
}
