package join

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/tailcause/tailcause/enrich/normalize"
)

// Config bounds the join.
type Config struct {
	// Retention is how far behind the stream time samples are kept.
	Retention time.Duration
	// MaxSampleAge: an as-of sample older than this describes nothing.
	MaxSampleAge time.Duration
	// MaxWait: a request is emitted at the latest when the stream time has
	// passed its end by this much, whether its host's metrics arrived or not.
	MaxWait time.Duration
	// StepGrace: per-step spans of a request may arrive this long (in span
	// event time) after the request span itself.
	StepGrace time.Duration
	// GPUWait: once every metric partition is caught up (SetMetricHold)
	// and the span stream has passed a request's end by this much, the
	// request no longer waits for its GPUs' next scrape unless a GPU
	// feature needs it (gpuNeedsNext). Every GPU feature but the
	// violation counters is read from the points up to the request's
	// end, and dcgm-exporter's scrape comes every 30 s: without this
	// bound the newest rows trail the engines' by up to half a minute,
	// and so does the live detector. Zero: wait for the scrape, as for
	// any series.
	GPUWait time.Duration
	// StallFactor and StallMin: an inter-token gap is a stall when it is
	// longer than both StallFactor × the request's median gap and StallMin.
	StallFactor float64
	StallMin    time.Duration
	// MaxPending bounds buffered requests; past it the oldest are emitted
	// early (counted as forced).
	MaxPending int
	// MaxTraces bounds buffered step traces.
	MaxTraces int
	// PlacementCacheCost bounds the placement lookup cache (entries).
	PlacementCacheCost int64
	// MaxCounterSeries bounds the counter-delta tracker.
	MaxCounterSeries int
	// MaxHosts and MaxEntities cap the hosts and the engines and GPUs
	// (together) the join tracks. A sample that would add a host or an
	// entity past its cap is dropped and counted (Stats.DroppedSamples):
	// a flood of made-up host names cannot grow the state without bound.
	// Idle hosts and entities are evicted (see gc), which frees room.
	MaxHosts, MaxEntities int
}

// DefaultConfig suits dcgm-exporter's 30 s and engines' 10–15 s scrapes.
func DefaultConfig() Config {
	return Config{
		Retention:          15 * time.Minute,
		MaxSampleAge:       95 * time.Second,
		MaxWait:            2 * time.Minute,
		StepGrace:          5 * time.Second,
		GPUWait:            10 * time.Second,
		StallFactor:        4,
		StallMin:           250 * time.Millisecond,
		MaxPending:         200_000,
		MaxTraces:          200_000,
		PlacementCacheCost: 100_000,
		MaxCounterSeries:   100_000,
		MaxHosts:           10_000,
		MaxEntities:        50_000,
	}
}

// Validate reports a configuration mistake.
func (c Config) Validate() error {
	switch {
	case c.Retention <= 0 || c.MaxSampleAge <= 0 || c.MaxWait <= 0 || c.StepGrace < 0:
		return fmt.Errorf("join: retention, max sample age and max wait must be positive")
	case c.GPUWait < 0 || c.GPUWait > c.MaxWait:
		return fmt.Errorf("join: GPU wait %s must be between 0 and the max wait %s", c.GPUWait, c.MaxWait)
	case c.MaxWait > c.Retention:
		return fmt.Errorf("join: max wait %s exceeds retention %s: samples a request needs would be gone", c.MaxWait, c.Retention)
	case c.StallFactor < 1 || c.StallMin <= 0:
		return fmt.Errorf("join: stall factor must be >= 1 and stall min positive")
	case c.MaxPending < 1 || c.MaxTraces < 1 || c.PlacementCacheCost < 1 || c.MaxCounterSeries < 1 || c.MaxHosts < 1 || c.MaxEntities < 1:
		return fmt.Errorf("join: bounds must be positive")
	}
	return nil
}

// Ref identifies the Kafka record an input came from, so the caller can
// commit offsets only once everything from a record has been written.
type Ref struct {
	Partition int
	Offset    int64
}

// Output is one joined request with its stall intervals. Done lists the
// records whose last held input this output consumed: once the output (and
// every output before it) is durably written, their offsets may be
// committed.
type Output struct {
	Row    Row
	Stalls []Stall
	Done   []Ref
}

// Stats counts what the join did; the counters are cumulative, Pending,
// Traces, Hosts, EngineSeries and GPUSeries are the state now.
type Stats struct {
	Requests, Emitted, ForcedByWait, ForcedByCapacity, Flushed int64
	Steps, OrphanSteps, LateSteps, DuplicateRequests           int64
	Samples, DuplicateSamples, TooOldSamples                   int64
	// DroppedSamples: samples of a new host or entity refused at MaxHosts
	// or MaxEntities.
	DroppedSamples int64
	// EvictedHosts, EvictedEntities (engines and GPUs) and EvictedSeries
	// (one metric of an entity): idle state removed by gc.
	EvictedHosts, EvictedEntities, EvictedSeries    int64
	Pending, Traces, Hosts, EngineSeries, GPUSeries int
}

type pendingReq struct {
	req  normalize.Request
	ref  Ref
	host string
}

type reqHeap []*pendingReq

func (h reqHeap) Len() int { return len(h) }
func (h reqHeap) Less(i, j int) bool {
	if h[i].req.EndNs != h[j].req.EndNs {
		return h[i].req.EndNs < h[j].req.EndNs
	}
	return h[i].req.UID < h[j].req.UID
}
func (h reqHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *reqHeap) Push(x any)   { *h = append(*h, x.(*pendingReq)) }
func (h *reqHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type traceBuf struct {
	steps    []normalize.Step
	refs     []Ref
	pending  int    // requests of this trace not yet emitted
	emitted  int    // requests of this trace already emitted
	lastSeen uint64 // span event time of the newest input
}

// Joiner is the join state. Not safe for concurrent use.
type Joiner struct {
	cfg       Config
	hosts     map[string]*hostState
	pending   map[string]*reqHeap // by host
	npending  int
	seen      map[string]uint64 // request UIDs pending or recently emitted → end time
	holds     map[Ref]int       // inputs still buffered, per record
	traces    map[string]*traceBuf
	counters  *normalize.Counters
	cache     *ristretto.Cache[string, placementResult]
	spanTime  uint64 // newest request end seen
	metricMax uint64 // newest sample time seen
	// metricHold: metric data up to here has been delivered; past it, a
	// metric partition still holds records (SetMetricHold).
	metricHold uint64
	released   []Ref
	emits      int // Emit calls, to space out gc
	stats      Stats
	hostGen    uint64 // incarnations handed out (hostState.gen)
	// changed: input or output since the last gc, which ran at stream time
	// gcAt. With neither, another gc would find nothing to do: an idle
	// join costs nothing however much state it holds.
	changed bool
	gcAt    uint64
	// nEngines and nGPUs count the tracked entities over all hosts.
	nEngines, nGPUs int
}

// New builds a Joiner.
func New(cfg Config) (*Joiner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cache, err := ristretto.NewCache(&ristretto.Config[string, placementResult]{
		NumCounters: cfg.PlacementCacheCost * 10,
		MaxCost:     cfg.PlacementCacheCost,
		BufferItems: 64,
	})
	if err != nil {
		return nil, fmt.Errorf("build placement cache: %w", err)
	}
	return &Joiner{
		cfg:        cfg,
		hosts:      map[string]*hostState{},
		pending:    map[string]*reqHeap{},
		seen:       map[string]uint64{},
		holds:      map[Ref]int{},
		traces:     map[string]*traceBuf{},
		counters:   normalize.NewCounters(cfg.MaxCounterSeries),
		cache:      cache,
		metricHold: math.MaxUint64,
	}, nil
}

// Close releases the placement cache's goroutines.
func (j *Joiner) Close() { j.cache.Close() }

// StreamTime is the newest event time seen on any input.
func (j *Joiner) StreamTime() uint64 { return max(j.spanTime, j.metricMax) }

// SetMetricHold tells the join how far the metric input is known to be
// complete: some metric partition that still holds unread records has
// delivered samples only up to t (math.MaxUint64: none lags). A request
// ending after t waits, whatever its host's series say: the host's other
// families may sit in that partition (a host whose GPU family was not seen
// yet would otherwise be joined without GPUs). The wait ends when the span
// stream has passed the request's end by MaxWait, so a stuck partition
// cannot stall the join.
func (j *Joiner) SetMetricHold(t uint64) { j.metricHold = t }

// SpanTime is the newest request end time seen.
func (j *Joiner) SpanTime() uint64 { return j.spanTime }

// Pending is the number of buffered requests.
func (j *Joiner) Pending() int { return j.npending }

// Stats returns the counters.
func (j *Joiner) Stats() Stats {
	s := j.stats
	s.Pending = j.npending
	s.Traces = len(j.traces)
	s.Hosts = len(j.hosts)
	s.EngineSeries, s.GPUSeries = j.nEngines, j.nGPUs
	return s
}

// host returns the state of a host, creating it unless MaxHosts are
// tracked (nil then).
func (j *Joiner) host(name string) *hostState {
	h := j.hosts[name]
	if h == nil {
		if len(j.hosts) >= j.cfg.MaxHosts {
			return nil
		}
		j.hostGen++
		h = newHostState(j.hostGen)
		j.hosts[name] = h
	}
	return h
}

// AddSamples adds metric samples to the per-host state.
func (j *Joiner) AddSamples(samples []normalize.Sample) {
	if len(samples) > 0 {
		j.changed = true
	}
	cutoff := j.cutoff()
	// The last host and entity looked up: a record's samples come in runs
	// of one (entityMemo).
	var lastHost string
	var h *hostState
	var memo entityMemo
	for i := range samples {
		s := &samples[i]
		j.stats.Samples++
		if s.TimeNs < cutoff {
			j.stats.TooOldSamples++
			continue
		}
		v := s.Value
		if s.Kind == normalize.Cumulative {
			// Counters are stored as deltas; the first point of a series
			// (no delta yet) opens the interval with a zero.
			d, _, ok := j.counters.Observe(*s)
			if !ok {
				d = 0
			}
			v = d
		}
		if h == nil || s.Placement.Host != lastHost {
			lastHost, memo = s.Placement.Host, entityMemo{}
			if h = j.host(lastHost); h == nil {
				j.stats.DroppedSamples++
				continue
			}
		}
		switch h.add(s, v, j.nEngines+j.nGPUs < j.cfg.MaxEntities, &memo) {
		case duplicate:
			j.stats.DuplicateSamples++
			continue
		case refused:
			j.stats.DroppedSamples++
			if h.empty() {
				delete(j.hosts, s.Placement.Host) // a host is kept only for its entities
				h = nil
			}
			continue
		case addedNew:
			if s.Family == normalize.FamilyGPU {
				j.nGPUs++
			} else {
				j.nEngines++
			}
		}
		if s.TimeNs > j.metricMax {
			j.metricMax = s.TimeNs
		}
	}
}

// AddSpans adds the requests and steps of one record.
func (j *Joiner) AddSpans(b *normalize.Batch, ref Ref) {
	j.changed = true
	held := false
	for i := range b.Requests {
		r := b.Requests[i]
		j.stats.Requests++
		if _, dup := j.seen[r.UID]; dup {
			j.stats.DuplicateRequests++
			continue
		}
		j.seen[r.UID] = r.EndNs
		host := r.Placement.Host
		hp := j.pending[host]
		if hp == nil {
			hp = &reqHeap{}
			j.pending[host] = hp
		}
		heap.Push(hp, &pendingReq{req: r, ref: ref, host: host})
		j.npending++
		j.holds[ref]++
		held = true
		if r.EndNs > j.spanTime {
			j.spanTime = r.EndNs
		}
		tb := j.trace(r.TraceID)
		tb.pending++
		if r.EndNs > tb.lastSeen {
			tb.lastSeen = r.EndNs
		}
	}
	for i := range b.Steps {
		st := b.Steps[i]
		j.stats.Steps++
		tb := j.trace(st.TraceID)
		if tb.pending == 0 && tb.emitted > 0 {
			j.stats.LateSteps++
			continue
		}
		tb.steps = append(tb.steps, st)
		if len(tb.refs) == 0 || tb.refs[len(tb.refs)-1] != ref {
			tb.refs = append(tb.refs, ref)
			j.holds[ref]++
		}
		held = true
		if st.EndNs > tb.lastSeen {
			tb.lastSeen = st.EndNs
		}
	}
	if !held {
		j.released = append(j.released, ref)
	}
}

func (j *Joiner) trace(id string) *traceBuf {
	tb := j.traces[id]
	if tb == nil {
		tb = &traceBuf{}
		j.traces[id] = tb
	}
	return tb
}

func (j *Joiner) cutoff() uint64 {
	st := j.StreamTime()
	r := uint64(j.cfg.Retention)
	if st < r {
		return 0
	}
	return st - r
}

// Released returns (and forgets) the refs of records that hold nothing any
// more without having produced an output: records with only duplicates or
// orphaned steps. Their offsets may be committed.
func (j *Joiner) Released() []Ref {
	r := j.released
	j.released = nil
	return r
}

// ready reports whether a request can be emitted: no metric partition
// holding unread records lags behind its end (SetMetricHold), the metric
// streams of its host and the series of its own engine and GPUs have
// passed its end (passedFor), and the span stream has passed its end by
// the step grace; or the stream time has passed its end by MaxWait. Its
// GPUs' series need not have passed its end when every metric partition
// is caught up and the span stream has passed its end by GPUWait (their
// points up to its end are in by then), unless a GPU's features need the
// scrape after it (Config.GPUWait).
func (j *Joiner) ready(p *pendingReq) (ok, forced bool) {
	end := p.req.EndNs
	if end > j.metricHold && j.spanTime < end+uint64(j.cfg.MaxWait) {
		return false, false // a metric partition has not delivered up to its end
	}
	if j.StreamTime() >= end+uint64(j.cfg.MaxWait) {
		h := j.hosts[p.host]
		return true, h == nil || !h.passed(end)
	}
	if j.spanTime < end+uint64(j.cfg.StepGrace) {
		return false, false
	}
	h := j.hosts[p.host]
	if h == nil {
		return false, false // no metrics for this host yet: wait up to MaxWait
	}
	gpuAsOf := j.cfg.GPUWait > 0 && j.metricHold == math.MaxUint64 && j.spanTime >= end+uint64(j.cfg.GPUWait)
	return h.passedFor(j.resolve(&p.req, h), end, uint64(j.cfg.MaxSampleAge), gpuAsOf), false
}

// Emit returns the requests that are ready, joined. With flush, every
// pending request is emitted (end of input, shutdown, idle streams).
func (j *Joiner) Emit(flush bool) []Output {
	// The ready requests are taken first and built after, into a slice of
	// their number: growing it by appending ~1 KB Outputs was Emit's main
	// garbage. Building changes nothing ready reads.
	var take []*pendingReq
	hosts := make([]string, 0, len(j.pending))
	for h := range j.pending {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, host := range hosts {
		hp := j.pending[host]
		for hp.Len() > 0 {
			p := (*hp)[0]
			ok, forced := j.ready(p)
			if !ok && !flush {
				break
			}
			heap.Pop(hp)
			j.npending--
			switch {
			case flush && !ok:
				j.stats.Flushed++
			case forced:
				j.stats.ForcedByWait++
			}
			take = append(take, p)
		}
		if hp.Len() == 0 {
			delete(j.pending, host)
		}
	}
	var out []Output
	if len(take) > 0 || j.npending > j.cfg.MaxPending {
		out = make([]Output, 0, len(take)+max(0, j.npending-j.cfg.MaxPending))
	}
	for _, p := range take {
		out = append(out, j.build(p))
	}
	for j.npending > j.cfg.MaxPending {
		out = append(out, j.popOldest())
		j.stats.ForcedByCapacity++
	}
	// Trimming walks every retained sample, request id and trace: do it on
	// every 16th call (and on flush), not on every tick, and only when
	// something happened since the last time.
	if len(out) > 0 {
		j.changed = true
	}
	if j.emits++; flush || (j.emits%16 == 0 && (j.changed || j.StreamTime() != j.gcAt)) {
		j.gc()
		j.changed, j.gcAt = false, j.StreamTime()
	}
	out = sortOutputs(out)
	j.stats.Emitted += int64(len(out))
	return out
}

// sortOutputs orders outputs by end time, then uid (ties in emission
// order), in place. An Output is ~1 KB: sorting keys, then moving each
// output once along the permutation's cycles, costs far less than swapping
// outputs (and their write barriers) O(n log n) times.
func sortOutputs(out []Output) []Output {
	if len(out) < 2 {
		return out
	}
	type key struct {
		end uint64
		uid string
		i   int
	}
	keys := make([]key, len(out))
	for i := range out {
		keys[i] = key{out[i].Row.EndNs, out[i].Row.UID, i}
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.end, b.end), strings.Compare(a.uid, b.uid), cmp.Compare(a.i, b.i))
	})
	// Position k takes out[keys[k].i]; keys[k].i = -1 marks k filled.
	for k := range keys {
		if keys[k].i < 0 || keys[k].i == k {
			continue
		}
		tmp := out[k]
		cur := k
		for {
			next := keys[cur].i
			keys[cur].i = -1
			if next == k {
				out[cur] = tmp
				break
			}
			out[cur] = out[next]
			cur = next
		}
	}
	return out
}

func (j *Joiner) popOldest() Output {
	var best string
	for h, hp := range j.pending {
		if best == "" || (*hp)[0].req.EndNs < (*j.pending[best])[0].req.EndNs || ((*hp)[0].req.EndNs == (*j.pending[best])[0].req.EndNs && h < best) {
			best = h
		}
	}
	hp := j.pending[best]
	p := heap.Pop(hp).(*pendingReq)
	j.npending--
	if hp.Len() == 0 {
		delete(j.pending, best)
	}
	return j.build(p)
}

// gc trims samples behind the retention, evicts idle series, entities
// and hosts, forgets old request ids, and drops step traces that never met
// their request.
//
// Eviction loses nothing a request can use. A series whose newest point p
// is older than a request's arrival a by more than MaxSampleAge gives it
// nothing: no as-of level (too old), no point inside [a, end], no counter
// interval overlapping it (every interval ends at or before p). A host's
// series are therefore evicted only when p < min(cutoff, the earliest
// arrival among the host's pending requests) − MaxSampleAge, where cutoff
// (stream time − Retention) is the point behind which samples are trimmed
// anyway, so a request taken later that arrives at or after the cutoff is
// safe too. From one that arrived before the cutoff (a span delivered more
// than Retention late, or a request longer than it) eviction can take only
// the one point the trim keeps before the cutoff, of a series silent for
// longer than Retention + MaxSampleAge; its other samples before the
// cutoff were trimmed already. A host left with no entity and no pending
// request is forgotten.
func (j *Joiner) gc() {
	cutoff := j.cutoff()
	maxAge := uint64(j.cfg.MaxSampleAge)
	for name, h := range j.hosts {
		if h.due >= cutoff && !h.empty() {
			continue // nothing to trim or evict (hostState.due)
		}
		horizon := cutoff
		if hp := j.pending[name]; hp != nil {
			for _, p := range *hp {
				horizon = min(horizon, p.req.StartNs)
			}
		}
		if horizon <= maxAge {
			h.trim(cutoff)
			continue
		}
		n := h.evict(cutoff, horizon-maxAge)
		j.nEngines -= n.engines
		j.nGPUs -= n.gpus
		j.stats.EvictedEntities += int64(n.engines + n.gpus)
		j.stats.EvictedSeries += int64(n.series)
		if h.empty() && j.pending[name] == nil {
			delete(j.hosts, name)
			j.stats.EvictedHosts++
		}
	}
	for uid, end := range j.seen {
		if end < cutoff {
			delete(j.seen, uid)
		}
	}
	wait := uint64(j.cfg.MaxWait)
	st := j.StreamTime()
	for id, tb := range j.traces {
		if tb.pending > 0 {
			continue
		}
		if tb.lastSeen+wait <= st || len(j.traces) > j.cfg.MaxTraces {
			if len(tb.steps) > 0 && tb.emitted == 0 {
				j.stats.OrphanSteps += int64(len(tb.steps))
			}
			j.released = j.drop(j.released, tb.refs...)
			delete(j.traces, id)
		}
	}
}

// drop releases one hold on each ref and appends those that are free to dst.
func (j *Joiner) drop(dst []Ref, refs ...Ref) []Ref {
	for _, r := range refs {
		j.holds[r]--
		if j.holds[r] <= 0 {
			delete(j.holds, r)
			dst = append(dst, r)
		}
	}
	return dst
}

// takeSteps hands the request the steps of its trace that belong to it.
func (j *Joiner) takeSteps(r *normalize.Request) ([]normalize.Step, []Ref) {
	tb := j.traces[r.TraceID]
	if tb == nil {
		return nil, nil
	}
	tb.pending--
	tb.emitted++
	var mine, rest []normalize.Step
	for _, st := range tb.steps {
		switch {
		case st.RequestSpanID == r.SpanID:
			mine = append(mine, st)
		case st.RequestSpanID == "" && (tb.pending == 0 || (st.EndNs >= r.StartNs && st.EndNs <= r.EndNs)):
			mine = append(mine, st)
		default:
			rest = append(rest, st)
		}
	}
	tb.steps = rest
	var refs []Ref
	if tb.pending == 0 {
		refs = tb.refs
		tb.refs = nil
		if len(rest) > 0 {
			j.stats.OrphanSteps += int64(len(rest))
			tb.steps = nil
		}
	}
	return mine, refs
}

// placementResult is what a request's placement resolves to on its host.
type placementResult struct {
	engine      string   // engine series key, "" when none
	engineMatch string   // "pod", "model", "ambiguous", "none"
	gpus        []string // GPU UUIDs
	gpuMatch    string   // "pod", "host", "none"
}

func (j *Joiner) resolve(r *normalize.Request, h *hostState) placementResult {
	key := placementKey(r, h)
	if pr, ok := j.cache.Get(key); ok {
		return pr
	}
	pr := h.resolve(r)
	j.cache.Set(key, pr, 1)
	return pr
}

// placementKey is the resolve cache's key of r's placement on h.
func placementKey(r *normalize.Request, h *hostState) string {
	// host \0 pod \0 model \0 engine \0 gen \0 version, in one allocation.
	var kb strings.Builder
	kb.Grow(len(r.Placement.Host) + len(r.Placement.Pod) + len(r.Model) + len(r.Placement.Engine) + 5 + 2*20)
	for _, s := range [...]string{r.Placement.Host, r.Placement.Pod, r.Model, r.Placement.Engine} {
		kb.WriteString(s)
		kb.WriteByte(0)
	}
	var num [20]byte
	kb.Write(strconv.AppendUint(num[:0], h.gen, 10))
	kb.WriteByte(0)
	kb.Write(strconv.AppendInt(num[:0], int64(h.version), 10))
	return kb.String()
}

// Mismatch-safe helpers.
func nan() float64 { return math.NaN() }
