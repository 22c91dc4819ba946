package faultlab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Sink receives the simulated telemetry, in event-time order, from one
// goroutine. A batch belongs to the sink once passed: the simulator never
// reads or changes it again. An error stops the run.
type Sink interface {
	Traces(ctx context.Context, td ptrace.Traces) error
	Metrics(ctx context.Context, md pmetric.Metrics) error
}

// Option adjusts a run without changing its output.
type Option func(*runOptions)

type runOptions struct {
	progress io.Writer
	now      func() time.Time
	every    time.Duration
}

// WithProgress prints a progress line to w about every `every` of wall
// time, read from now (the wall clock is used for nothing else).
func WithProgress(w io.Writer, now func() time.Time, every time.Duration) Option {
	return func(o *runOptions) {
		o.progress, o.now, o.every = w, now, every
	}
}

// modelMods are the model-level fault modifiers (workload and arrival faults).
type modelMods struct {
	rateExtra float64
	promptMul float64
	outMul    float64
}

// fault is a scenario fault or decoy bound to the fleet.
type fault struct {
	idx    int
	decoy  bool
	spec   FaultSpec
	target resolvedTarget
	onset  int64
	end    int64
	active bool
	rng    *randSrc
	// effectsEnd: for a fault of discrete events (an XID), when the last
	// event's effects (hang, then restart) end; 0 before the first.
	effectsEnd int64
	// e2e latencies (ms) of the requests of the engines it acts on that
	// arrived before its onset and during it: its effect, in the truth.
	before, during sketch
}

type sim struct {
	cfg      Config
	f        *fleet
	startNs  int64 // Unix ns of simulated t=0
	warm     int64 // warm-up simulated in [-warm, 0), emitting nothing
	end      int64
	now      int64
	q        eventQueue
	streams  []*stream
	faults   []*fault
	mods     []modelMods
	out      *emitter
	ids      *randSrc
	router   *randSrc
	surge    *randSrc
	params   *randSrc
	pool     []*request
	seq      int64
	stats    *runStats
	finished []*request
	// afterEvent, when set (tests), runs after every event.
	afterEvent func(ev event)
}

// Run simulates cfg and streams its telemetry to sink. It returns the
// ground truth of the run (also when the sink fails part way).
func Run(ctx context.Context, cfg Config, sink Sink, opts ...Option) (*Truth, error) {
	if sink == nil {
		return nil, errors.New("run simulation: nil sink")
	}
	var ro runOptions
	for _, o := range opts {
		o(&ro)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("run simulation: invalid config: %w", err)
	}
	cfg = cfg.resolved()
	s, err := newSim(cfg, sink)
	if err != nil {
		return nil, fmt.Errorf("run simulation: %w", err)
	}
	runErr := s.loop(ctx, ro)
	truth := s.truth()
	if runErr != nil {
		return truth, fmt.Errorf("run simulation: %w", runErr)
	}
	return truth, nil
}

func newSim(cfg Config, sink Sink) (*sim, error) {
	f, err := buildFleet(cfg.Fleet, cfg.StepSpanShare)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	seeds := &seeder{seed: cfg.Seed}
	s := &sim{
		cfg:     cfg,
		f:       f,
		startNs: cfg.Start.UnixNano(),
		end:     int64(cfg.Duration),
		mods:    make([]modelMods, len(f.models)),
		ids:     seeds.next("ids"),
		router:  seeds.next("router"),
		surge:   seeds.next("surge"),
		params:  seeds.next("params"),
	}
	s.stats = newRunStats(f)
	for _, g := range f.gpus {
		g.rng = seeds.next("gpu")
		g.init()
	}
	for _, e := range f.engines {
		e.rng = seeds.next("engine")
	}
	s.streams, err = streamsFor(f, cfg, traceCache{}, seeds)
	if err != nil {
		return nil, err
	}
	if cfg.Warmup > 0 {
		// Whole physics ticks, so that ticks stay on multiples of the tick.
		tick := int64(cfg.PhysicsTick)
		s.warm = (int64(cfg.Warmup) + tick - 1) / tick * tick
		for _, st := range s.streams {
			st.base -= float64(s.warm)
			st.next -= s.warm
		}
	}
	if sc := cfg.Scenario; sc != nil {
		if err := sc.Validate(cfg.Fleet, cfg.Duration); err != nil {
			return nil, err
		}
		add := func(spec FaultSpec, decoy bool, allowed []string) error {
			rt, err := resolveTarget(f, spec.Target, allowed)
			if err != nil {
				return err
			}
			on, _ := parseOffset(spec.Onset, cfg.Duration)
			d, _ := parseOffset(spec.Duration, cfg.Duration)
			fl := &fault{idx: len(s.faults), decoy: decoy, spec: spec, target: rt,
				onset: int64(on), end: min(int64(on+d), s.end), rng: seeds.next("fault")}
			s.faults = append(s.faults, fl)
			return nil
		}
		for _, fs := range sc.Faults {
			c, _ := lookupCause(causes, fs.Cause)
			if err := add(fs, false, c.Targets); err != nil {
				return nil, err
			}
		}
		for _, ds := range sc.Decoys {
			c, _ := lookupCause(decoyKinds, ds.Kind)
			spec := FaultSpec{Cause: ds.Kind, Target: ds.Target, Onset: ds.Onset, Duration: ds.Duration, Magnitude: ds.Magnitude, Note: ds.Note}
			if err := add(spec, true, c.Targets); err != nil {
				return nil, err
			}
		}
	}
	s.out = newEmitter(s, sink)
	s.recomputeMods()
	return s, nil
}

func (s *sim) loop(ctx context.Context, ro runOptions) error {
	s.out.ctx = ctx
	for _, st := range s.streams {
		if st.next < s.end {
			s.q.push(event{t: max(-s.warm, st.next), kind: evArrival, a: int32(st.idx)})
		}
	}
	tick := int64(s.cfg.PhysicsTick)
	s.q.push(event{t: -s.warm + tick, kind: evTick})
	if s.warm > 0 {
		s.q.push(event{t: 0, kind: evWarmEnd})
	}
	for _, e := range s.f.engines {
		off := (int64(e.idx)*1_370_000_000 + 500_000_000) % int64(s.cfg.VLLMScrapeInterval)
		s.q.push(event{t: off, kind: evScrapeVLLM, a: int32(e.idx)})
	}
	for _, h := range s.f.hosts {
		off := (int64(h.idx)*2_710_000_000 + 1_000_000_000) % int64(s.cfg.DCGMScrapeInterval)
		s.q.push(event{t: off, kind: evScrapeDCGM, a: int32(h.idx)})
	}
	s.q.push(event{t: int64(s.cfg.FlushInterval), kind: evFlush})
	for _, fl := range s.faults {
		s.q.push(event{t: fl.onset, kind: evFaultOn, a: int32(fl.idx)})
		if fl.end < s.end {
			s.q.push(event{t: fl.end, kind: evFaultOff, a: int32(fl.idx)})
		}
	}
	s.q.push(event{t: s.end, kind: evEnd})

	var wallStart, lastReport time.Time
	if ro.progress != nil {
		if ro.now == nil {
			ro.now = time.Now
		}
		if ro.every <= 0 {
			ro.every = 2 * time.Second
		}
		wallStart = ro.now()
		lastReport = wallStart
	}
	n := 0
	for s.q.len() > 0 {
		ev := s.q.pop()
		s.now = ev.t
		if ev.kind == evEnd {
			break
		}
		s.handle(ev)
		if s.afterEvent != nil {
			s.afterEvent(ev)
		}
		if s.out.err != nil {
			return s.out.err
		}
		n++
		if n&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if ro.progress != nil {
				if w := ro.now(); w.Sub(lastReport) >= ro.every {
					lastReport = w
					s.report(ro.progress, w.Sub(wallStart))
				}
			}
		}
	}
	s.now = s.end
	s.out.flush()
	if ro.progress != nil {
		s.report(ro.progress, ro.now().Sub(wallStart))
	}
	return s.out.err
}

func (s *sim) report(w io.Writer, wall time.Duration) {
	simd := time.Duration(s.now)
	speed := 0.0
	if wall > 0 {
		speed = simd.Seconds() / wall.Seconds()
	}
	fmt.Fprintf(w, "sim %v/%v (%.0f%%)  requests=%d errors=%d spans=%d metric_points=%d  wall=%v  %.1fx\n",
		simd.Truncate(time.Second), time.Duration(s.end), 100*float64(s.now)/float64(s.end),
		s.stats.requests, s.stats.errors, s.stats.spans, s.stats.points, wall.Truncate(time.Millisecond), speed)
}

func (s *sim) handle(ev event) {
	switch ev.kind {
	case evArrival:
		st := s.streams[ev.a]
		s.arrive(st)
		st.advance()
		if st.next < s.end {
			s.q.push(event{t: max(s.now, st.next), kind: evArrival, a: ev.a})
		}
	case evEnqueue:
		s.enqueue(ev.r)
	case evStep:
		e := s.f.engines[ev.a]
		if ev.epoch != e.epoch || !e.busy {
			return
		}
		s.finishStep(e)
		s.startStep(e)
	case evHangEnd:
		e := s.f.engines[ev.a]
		if ev.epoch == e.epoch {
			s.crash(e)
		}
	case evRestartDone:
		e := s.f.engines[ev.a]
		e.down = false
		e.cnt = engineCounters{}
		e.counterStart = s.now
		e.kv = newKVCache(e.blocks)
		s.applyKV(e)
	case evWarmEnd:
		// The run starts: counters and statistics count from here.
		for _, e := range s.f.engines {
			e.cnt = engineCounters{}
			e.counterStart = 0
		}
		s.stats = newRunStats(s.f)
	case evTick:
		s.tick()
		s.q.push(event{t: s.now + int64(s.cfg.PhysicsTick), kind: evTick})
	case evScrapeVLLM:
		e := s.f.engines[ev.a]
		if !e.down {
			s.out.engineMetrics(e)
		}
		s.q.push(event{t: s.now + int64(s.cfg.VLLMScrapeInterval), kind: evScrapeVLLM, a: ev.a})
	case evScrapeDCGM:
		s.out.dcgmMetrics(s.f.hosts[ev.a])
		s.q.push(event{t: s.now + int64(s.cfg.DCGMScrapeInterval), kind: evScrapeDCGM, a: ev.a})
	case evFlush:
		s.out.flush()
		s.q.push(event{t: s.now + int64(s.cfg.FlushInterval), kind: evFlush})
	case evFaultOn:
		fl := s.faults[ev.a]
		fl.active = true
		s.recomputeMods()
		s.onFaultStart(fl)
	case evFaultOff:
		fl := s.faults[ev.a]
		fl.active = false
		s.recomputeMods()
		if fl.spec.Cause == "gpu.xid_error" {
			for _, g := range fl.target.gpus {
				g.xid = 0
			}
		}
	case evXID:
		fl := s.faults[ev.a]
		if !fl.active {
			return
		}
		s.xid(fl)
		// A failing GPU throws its XIDs at a steady pace under steady load:
		// the gaps vary by ±50% around the mean.
		next := s.now + int64((0.5+fl.rng.Float64())/fl.spec.Magnitude*60e9)
		if next < fl.end {
			s.q.push(event{t: next, kind: evXID, a: ev.a})
		}
	}
}

// --- requests -------------------------------------------------------------

func (s *sim) newRequest(m *model, at int64) *request {
	var r *request
	if n := len(s.pool); n > 0 {
		r = s.pool[n-1]
		s.pool = s.pool[:n-1]
		keys, pinned, retracts := r.keys[:0], r.pinned[:0], r.retracts[:0]
		*r = request{keys: keys, pinned: pinned, retracts: retracts}
	} else {
		r = &request{}
	}
	s.seq++
	r.seq = s.seq
	r.m = m
	r.arrival = at
	r.scheduled, r.firstTok, r.lastTok = -1, -1, -1
	return r
}

func (s *sim) recycle(r *request) {
	r.e, r.m = nil, nil
	if len(s.pool) < 4096 {
		s.pool = append(s.pool, r)
	}
}

func (s *sim) arrive(st *stream) {
	tr := st.tr.reqs[st.nextReq]
	r := s.newRequest(st.m, s.now)
	r.prompt, r.out, r.sys = tr.prompt+st.sys, tr.output, st.sys
	r.keys, r.affinity = st.fillKeys(r.keys, st.nextReq, r.prompt)
	s.admit(r)
	// queue.saturation at a model: extra arrivals drawn from the same trace.
	if extra := s.mods[st.m.idx].rateExtra; extra > 0 {
		k := int(extra)
		if s.surge.Float64() < extra-float64(k) {
			k++
		}
		gap := 1e9 / (st.tr.nativeRate() / st.scale * st.keep)
		for i := 0; i < k; i++ {
			at := s.now + int64(s.surge.Float64()*gap)
			if at >= s.end {
				continue
			}
			idx := s.surge.IntN(len(st.tr.reqs))
			x := s.newRequest(st.m, at)
			x.prompt, x.out, x.sys = st.tr.reqs[idx].prompt+st.sys, st.tr.reqs[idx].output, st.sys
			x.keys, x.affinity = st.fillKeys(x.keys, idx, x.prompt)
			s.q.push(event{t: at, kind: evEnqueue, r: x})
		}
	}
}

// admit shapes a new request (workload faults, context limit, sampling
// parameters, ids), routes it, and schedules its arrival at the engine core
// after tokenisation.
func (s *sim) admit(r *request) {
	m := r.m
	mod := s.mods[m.idx]
	if mod.promptMul != 1 {
		np := r.sys + int32(math.Round(float64(r.prompt-r.sys)*mod.promptMul))
		// The added text is new: fresh segment keys that hit nothing.
		for j := len(r.keys); j < int(np)/segTokens; j++ {
			r.keys = append(r.keys, mix3(uint64(r.seq), uint64(j), 0x10a9))
		}
		r.prompt = np
	}
	if mod.outMul != 1 {
		r.out = int32(math.Round(float64(r.out) * mod.outMul))
	}
	maxLen := int32(m.arch.MaxModelLen)
	if r.prompt > maxLen-16 {
		// vLLM's API server rejects a prompt longer than the context (400).
		s.stats.rejected++
		s.recycle(r)
		return
	}
	if r.out > maxLen-r.prompt {
		r.out = maxLen - r.prompt
	}
	r.out = max(1, r.out)
	p := s.params
	if p.Float64() < 0.5 {
		for _, c := range []int32{256, 512, 1024, 2048, 4096, 8192} {
			if c >= r.out {
				r.maxTokens = c
				break
			}
		}
		if r.maxTokens == 0 {
			r.maxTokens = r.out
		}
	}
	if p.Float64() < 0.7 {
		r.temperature = []float64{0.2, 0.6, 0.7, 0.8, 1.0}[p.IntN(5)]
	}
	if p.Float64() < 0.4 {
		r.topP = []float64{0.9, 0.95, 1.0}[p.IntN(3)]
	}
	s.fillIDs(r)
	r.queued = r.arrival + int64(3e6+2e3*float64(r.prompt))
	e := s.route(r)
	if e == nil {
		s.stats.rejected++
		s.recycle(r)
		return
	}
	r.e = e
	s.q.push(event{t: r.queued, kind: evEnqueue, r: r})
}

func (s *sim) fillIDs(r *request) {
	var b [8]byte
	put := func(dst []byte) {
		for i := 0; i < len(dst); i += 8 {
			v := s.ids.Uint64()
			for j := 0; j < 8; j++ {
				b[j] = byte(v >> (8 * j))
			}
			copy(dst[i:], b[:])
		}
	}
	put(r.traceID[:])
	put(r.spanID[:])
	put(r.rid[:])
}

// route is the model's router: requests with a session prefix go to the
// engine their session hashes to unless it is much busier than the least
// loaded engine; others are spread over the engines that are up by the
// configured policy (Config.Router): round-robin by default (the vLLM
// production-stack default), at random, or to the least loaded.
// Round-robin and random do not steer around a slow engine: it keeps its
// share of arrivals, builds a bigger batch and a queue, which is how one
// bad replica shows in a model's tail. A least-loaded router hides part of
// it.
func (s *sim) route(r *request) *engine {
	es := r.m.engines
	for _, e := range es {
		if e.forceShare > 0 && !e.down && s.router.Float64() < e.forceShare {
			return e
		}
	}
	if r.prompt-r.sys >= longPromptTokens {
		for _, e := range es {
			if e.steerLong && !e.down {
				return e
			}
		}
	}
	if r.affinity == 0 && s.cfg.Router == RouteRandom {
		up := 0
		for _, e := range es {
			if !e.down {
				up++
			}
		}
		if up == 0 {
			return nil
		}
		k := s.router.IntN(up)
		for _, e := range es {
			if !e.down {
				if k == 0 {
					return e
				}
				k--
			}
		}
	}
	if r.affinity == 0 && s.cfg.Router != RouteLeastLoaded {
		for range es {
			e := es[r.m.rr%len(es)]
			r.m.rr++
			if !e.down {
				return e
			}
		}
		return nil
	}
	var best *engine
	ties := 0
	for _, e := range es {
		if e.down {
			continue
		}
		switch {
		case best == nil || e.load() < best.load():
			best, ties = e, 1
		case e.load() == best.load():
			ties++
			if s.router.IntN(ties) == 0 {
				best = e
			}
		}
	}
	if best == nil {
		return nil
	}
	if r.affinity != 0 {
		pref := es[r.affinity%uint64(len(es))]
		if !pref.down && pref.load() <= best.load()*3/2+4 {
			return pref
		}
	}
	return best
}

func (s *sim) enqueue(r *request) {
	if r.e == nil { // a surge arrival: shape and route now
		s.admit(r)
		return
	}
	e := r.e
	if e.down {
		s.finish(r, finishAbort, true)
		return
	}
	e.waiting.pushBack(r)
	if !e.busy {
		s.startStep(e)
	}
}

type finishReason uint8

const (
	finishStop finishReason = iota
	finishLength
	finishAbort
)

func (f finishReason) String() string {
	return [...]string{"stop", "length", "abort"}[f]
}

// finish ends a request that no engine list holds any more.
func (s *sim) finish(r *request, why finishReason, failed bool) {
	s.complete(r, why, failed)
	s.recycle(r)
}

// complete frees a request's KV, counts it and emits its span; the caller
// removes it from the engine's lists and recycles it.
func (s *sim) complete(r *request, why finishReason, failed bool) {
	e := r.e
	e.kv.release(r)
	r.running = false
	e.cnt.success[why]++
	if r.arrival < 0 {
		return // a warm-up request: not part of the run
	}
	s.stats.observe(r, s.now, failed)
	s.observeFaults(r)
	s.out.requestSpan(r, s.now, why, failed)
}

// observeFaults records a request's e2e latency in the effect of every
// fault acting on its engine (failed requests too: their latency is what
// their span reports).
func (s *sim) observeFaults(r *request) {
	for _, fl := range s.faults {
		if fl.decoy || !slices.Contains(fl.target.engines, r.e) {
			continue
		}
		ms := float64(s.now-r.arrival) / 1e6
		switch {
		case r.arrival < fl.onset:
			fl.before.add(ms)
		case r.arrival < fl.end:
			fl.during.add(ms)
		}
	}
}

// --- engine steps -----------------------------------------------------------

func (s *sim) preempt(e *engine, r *request) {
	e.kv.release(r)
	r.computed = 0
	r.running = false
	r.preemptions++
	r.recompute = true
	e.cnt.preemptions++
	s.stats.preemptions++
	if e.sglang {
		r.retracts = append(r.retracts, s.now)
	}
	e.waiting.pushFront(r)
}

// startStep schedules one step the way vLLM V1 does: running requests
// first (decodes and unfinished prefill chunks), preempting from the back
// of the running list when KV blocks run out; then, if nothing was
// preempted, waiting requests in order with prefix-cache hits, chunked by
// the token budget.
func (s *sim) startStep(e *engine) {
	e.busy = false
	if e.down || s.now < e.hungUntil {
		return
	}
	for e.kv.used() > e.kv.total && len(e.running) > 0 {
		v := e.running[len(e.running)-1]
		e.running = e.running[:len(e.running)-1]
		s.preempt(e, v)
	}
	for attempt := 0; attempt < 2; attempt++ {
		budget := e.stepBudget()
		batch := e.sched[:0]
		preempted := false
		for i := 0; i < len(e.running) && budget > 0; i++ {
			r := e.running[i]
			n := min(r.numTokens()-r.computed, budget)
			ok := false
			for {
				if e.kv.alloc(r, blocksFor(r, r.computed+n)) {
					ok = true
					break
				}
				v := e.running[len(e.running)-1]
				e.running = e.running[:len(e.running)-1]
				s.preempt(e, v)
				preempted = true
				if v == r {
					break
				}
			}
			if !ok {
				break
			}
			r.numNew = n
			budget -= n
			batch = append(batch, r)
		}
		if !preempted {
			batch = s.admitWaiting(e, batch, budget)
		}
		e.sched = batch
		if len(batch) > 0 {
			s.launch(e, batch)
			return
		}
		if !preempted {
			return
		}
	}
}

func (s *sim) admitWaiting(e *engine, batch []*request, budget int32) []*request {
	for e.waiting.len() > 0 && budget > 0 && len(e.running) < e.maxSeqs {
		r := e.waiting.front()
		nt := r.numTokens()
		if int((nt+blockTokens-1)/blockTokens) > e.kv.total {
			// Longer than the whole cache (shrunk by a KV fault): it could
			// only prefill a chunk, preempt itself and start again for
			// ever. vLLM refuses a prompt its cache cannot hold.
			e.waiting.popFront()
			s.finish(r, finishAbort, true)
			continue
		}
		hit := 0
		if !e.kv.disabled && !(e.missProb > 0 && e.rng.Float64() < e.missProb) {
			hit = e.kv.lookup(r.keys)
			if lim := int(nt-1) / segTokens; hit > lim {
				hit = lim
			}
		}
		hitTokens := int32(hit * segTokens)
		n := min(nt-hitTokens, budget)
		e.kv.pin(r, r.keys, hit)
		if !e.kv.alloc(r, blocksFor(r, hitTokens+n)) {
			e.kv.release(r)
			if len(e.running) == 0 && len(batch) == 0 {
				// Cannot fit even in an empty cache: vLLM rejects it.
				e.waiting.popFront()
				s.finish(r, finishAbort, true)
				continue
			}
			break
		}
		e.waiting.popFront()
		e.cnt.prefixQueries += float64(nt)
		e.cnt.prefixHits += float64(hitTokens)
		if r.recompute {
			e.cnt.recomputed += float64(nt - hitTokens)
		}
		r.computed = hitTokens
		if r.scheduled < 0 {
			r.scheduled = s.now
			r.cached = hitTokens
		}
		r.running = true
		e.running = append(e.running, r)
		r.numNew = n
		budget -= n
		batch = append(batch, r)
	}
	return batch
}

func (s *sim) launch(e *engine, batch []*request) {
	c := e.cost(batch)
	var tokens int32
	for _, r := range batch {
		tokens += r.numNew
	}
	e.cnt.countStep(float64(tokens))
	dt := int64(c.dt * 1e9)
	if dt < 1000 {
		dt = 1000
	}
	e.busy = true
	e.stepStart = s.now
	e.stepEnd = s.now + dt
	// Account the step to the physics ticks it spans.
	tick := int64(s.cfg.PhysicsTick)
	nextTick := (floorDiv(s.now, tick) + 1) * tick
	frac := 1.0
	if e.stepEnd > nextTick {
		frac = float64(nextTick-s.now) / float64(dt)
	}
	e.account(c, frac)
	if frac < 1 {
		e.carry = c
		e.carryFrac = 1 - frac
		e.carryDT = c.dt
	}
	s.q.push(event{t: e.stepEnd, kind: evStep, a: int32(e.idx), epoch: e.epoch})
}

func (s *sim) finishStep(e *engine) {
	now := s.now
	finished := s.finished[:0]
	for _, r := range e.sched {
		if !r.running {
			continue
		}
		wasPrefill := r.numNew > 1 || r.computed < r.prompt
		r.computed += r.numNew
		if r.computed < r.numTokens() {
			// A prefill chunk: its full blocks are cached as computed.
			e.kv.register(r, r.computed)
			if e.sglang {
				s.out.stepSpan(r, "chunked_prefill", e.stepStart, now, 0)
			}
			continue
		}
		r.generated++
		e.cnt.genTokens++
		if r.firstTok < 0 {
			r.firstTok = now
			e.cnt.promptTokens += float64(r.prompt)
		}
		r.lastTok = now
		if wasPrefill {
			e.kv.register(r, r.prompt)
		}
		if e.sglang {
			if wasPrefill {
				s.out.stepSpan(r, "prefill_forward", e.stepStart, now, 0)
			} else {
				s.out.stepSpan(r, "decode_loop", e.stepStart, now, int64(r.generated))
			}
		}
		if r.generated >= r.out {
			why := finishStop
			if r.maxTokens > 0 && r.out >= r.maxTokens {
				why = finishLength
			}
			s.complete(r, why, false)
			finished = append(finished, r)
		}
	}
	if len(finished) > 0 {
		keep := e.running[:0]
		for _, r := range e.running {
			if r.running {
				keep = append(keep, r)
			}
		}
		clear(e.running[len(keep):])
		e.running = keep
		for _, r := range finished {
			s.recycle(r)
		}
		clear(finished)
	}
	e.sched = e.sched[:0]
	s.finished = finished[:0]
}

// --- XID -------------------------------------------------------------------

func (s *sim) onFaultStart(fl *fault) {
	switch fl.spec.Cause {
	case "prefix_cache.miss":
		for _, e := range fl.target.engines {
			e.kv.flush()
		}
	case "gpu.xid_error":
		s.q.push(event{t: s.now, kind: evXID, a: int32(fl.idx)})
	}
}

const (
	// A hung engine answers nothing until its liveness probe has failed
	// three times 10 s apart; the pod then restarts, and loading the
	// weights and capturing the CUDA graphs again takes about a minute.
	xidHang    = 30 * time.Second
	xidRestart = 60 * time.Second
)

func (s *sim) xid(fl *fault) {
	code := fl.spec.XID
	if code == 0 {
		code = 13
	}
	for _, g := range fl.target.gpus {
		g.xid = code
		e := g.engine
		if e == nil || e.down || s.now < e.hungUntil {
			continue
		}
		s.stats.xids++
		fl.effectsEnd = max(fl.effectsEnd, s.now+int64(xidHang+xidRestart))
		e.epoch++
		e.busy = false
		e.sched = e.sched[:0]
		e.hungUntil = s.now + int64(xidHang)
		s.q.push(event{t: e.hungUntil, kind: evHangEnd, a: int32(e.idx), epoch: e.epoch})
	}
}

// crash ends an engine hung by an XID: every request it holds fails, and
// the pod restarts (not routable, not scraped; counters reset).
func (s *sim) crash(e *engine) {
	for _, r := range e.running {
		r.running = false
		s.finish(r, finishAbort, true)
	}
	clear(e.running)
	e.running = e.running[:0]
	for e.waiting.len() > 0 {
		s.finish(e.waiting.popFront(), finishAbort, true)
	}
	e.down = true
	e.busy = false
	e.epoch++
	s.q.push(event{t: s.now + int64(xidRestart), kind: evRestartDone, a: int32(e.idx)})
}

// --- physics ------------------------------------------------------------------

func (s *sim) tick() {
	dt := s.cfg.PhysicsTick.Seconds()
	for _, g := range s.f.gpus {
		g.tick(dt)
	}
	for _, e := range s.f.engines {
		e.tickBusy, e.tickTensor, e.tickDRAM, e.tickPCIeIn, e.tickPCIeOut = 0, 0, 0, 0, 0
		if e.carryFrac > 0 {
			if !e.busy {
				e.carryFrac = 0
				continue
			}
			f := math.Min(e.carryFrac, dt/e.carryDT)
			e.account(e.carry, f)
			e.carryFrac -= f
		}
	}
}

func (e *engine) account(c stepCost, frac float64) {
	e.tickBusy += c.gpu * frac
	e.tickTensor += c.tensor * frac
	e.tickDRAM += c.dram * frac
	e.tickPCIeIn += c.pcieIn * frac
	e.tickPCIeOut += c.pcieOt * frac
}

// --- faults ---------------------------------------------------------------

func (s *sim) recomputeMods() {
	for i := range s.mods {
		s.mods[i] = modelMods{promptMul: 1, outMul: 1}
	}
	for _, e := range s.f.engines {
		e.kvFrac, e.missProb, e.budgetMul, e.slowMul, e.forceShare = 1, 0, 1, 1, 0
		e.steerLong = false
	}
	for _, g := range s.f.gpus {
		g.thermalMul, g.powerLimit, g.brake = 1, g.kind.TDPW, false
		g.neighbourPCIe, g.neighbourDRAM, g.decoyInletC, g.decoyPCIe = 0, 0, 0, 0
	}
	for _, fl := range s.faults {
		if !fl.active {
			continue
		}
		m := fl.spec.Magnitude
		t := fl.target
		switch fl.spec.Cause {
		case "kv_cache.preemption":
			for _, e := range t.engines {
				e.kvFrac *= 1 - m
			}
		case "queue.saturation":
			if t.kind == "model" {
				s.mods[t.model.idx].rateExtra += m
			} else {
				for _, e := range t.engines {
					e.forceShare = math.Max(e.forceShare, m)
				}
			}
		case "workload.long_prompts":
			s.mods[t.model.idx].promptMul *= 1 + m
		case "workload.long_outputs":
			s.mods[t.model.idx].outMul *= 1 + m
		case "prefix_cache.miss":
			for _, e := range t.engines {
				e.missProb = math.Max(e.missProb, m)
			}
		case "engine.prefill_interference":
			for _, e := range t.engines {
				e.budgetMul *= 1 + m
				// One engine given the model's long prompts; a model-wide
				// fault keeps the router's spread (steering them all to
				// the first engine would make it that engine's fault).
				e.steerLong = e.steerLong || len(t.engines) == 1
			}
		case "gpu.thermal_throttle":
			for _, g := range t.gpus {
				g.thermalMul *= 1 + 4*m
			}
		case "gpu.power_cap":
			for _, g := range t.gpus {
				g.powerLimit = math.Min(g.powerLimit, g.kind.IdleW+(g.kind.TDPW-g.kind.IdleW)*(1-m))
				g.brake = g.brake || fl.spec.Brake
			}
		case "gpu.pcie_contention":
			for _, g := range t.gpus {
				g.neighbourPCIe = math.Min(0.97, g.neighbourPCIe+m)
			}
		case "gpu.memory_bandwidth":
			for _, g := range t.gpus {
				g.neighbourDRAM = math.Min(0.95, g.neighbourDRAM+m)
			}
		case "entity.degraded":
			for _, e := range t.engines {
				e.slowMul *= 1 + m
			}
		case "workload.rate_swing":
			s.mods[t.model.idx].rateExtra += m
		case "gpu.temperature":
			for _, g := range t.gpus {
				g.decoyInletC += m
			}
		case "gpu.pcie_traffic":
			for _, g := range t.gpus {
				g.decoyPCIe = math.Min(0.5, g.decoyPCIe+m)
			}
		}
	}
	for _, e := range s.f.engines {
		s.applyKV(e)
	}
}

func (s *sim) applyKV(e *engine) {
	e.kv.total = max(segBlocks, int(float64(e.blocks)*e.kvFrac))
	e.kv.disabled = e.missProb >= 1
	if e.kv.free() < 0 {
		for e.kv.free() < 0 && e.kv.evictable() > 0 {
			e.kv.evictLRU()
		}
	}
}

// floorDiv is a/b rounded toward −∞ (times are negative during warm-up).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
