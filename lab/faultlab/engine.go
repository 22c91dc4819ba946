package faultlab

import (
	"math"
)

// request is one LLM request from arrival to its span. Token accounting
// follows vLLM V1: numTokens = prompt + generated; a step schedules
// numTokens − computed tokens (chunked by the budget); when computed
// reaches numTokens a token is sampled.
type request struct {
	seq      int64
	m        *model
	e        *engine
	arrival  int64 // API server receipt (span start)
	queued   int64 // engine core receipt, after tokenisation
	prompt   int32 // including sys
	sys      int32 // system prompt tokens the deployment put in front
	out      int32 // tokens to generate
	keys     []uint64
	affinity uint64

	maxTokens   int32 // 0: not set
	temperature float64
	topP        float64

	computed    int32
	generated   int32
	numNew      int32 // tokens scheduled in the current step
	cached      int32 // prefix-cache hit tokens at first scheduling
	scheduled   int64 // first scheduled, -1 before
	firstTok    int64 // -1 before
	lastTok     int64
	preemptions int32
	recompute   bool // scheduled again after a preemption
	private     int32
	pinned      []int32
	retracts    []int64 // preemption times, for SGLang retract events

	traceID [16]byte
	spanID  [8]byte
	rid     [16]byte
	running bool
}

func (r *request) numTokens() int32 { return r.prompt + r.generated }

// engine is one vLLM-like server (a pod) holding TP GPUs.
type engine struct {
	idx      int
	m        *model
	host     *host
	gpus     []*gpu
	pod      string
	port     int
	sglang   bool
	local    int // index among the host's engines
	blocks   int // KV blocks at full capacity
	wPerGPU  float64
	kvPerGPU float64 // KV bytes per token per GPU

	kv      *kvCache
	waiting deque
	running []*request
	sched   []*request
	budget  int
	maxSeqs int

	busy      bool
	stepStart int64
	stepEnd   int64
	epoch     uint32 // invalidates pending step events (hang, restart)
	hungUntil int64  // XID hang: no progress until then
	down      bool   // restarting after an XID: not routable, not scraped
	rng       *randSrc

	// fault modifiers, recomputed whenever a fault starts or ends
	kvFrac     float64 // KV capacity multiplier
	missProb   float64 // prefix lookups that miss
	budgetMul  float64
	slowMul    float64 // entity.degraded
	forceShare float64 // queue.saturation at engine: share of model traffic forced here
	steerLong  bool    // engine.prefill_interference: the model's long prompts come here

	cnt          engineCounters
	counterStart int64

	// per physics tick accounting, consumed by the GPUs
	tickBusy    float64 // seconds
	tickTensor  float64 // seconds compute bound
	tickDRAM    float64 // bytes per GPU
	tickPCIeIn  float64
	tickPCIeOut float64
	carry       stepCost // the part of the current step past the tick
	carryFrac   float64
	carryDT     float64
}

type engineCounters struct {
	preemptions   float64
	prefixQueries float64
	prefixHits    float64
	promptTokens  float64
	genTokens     float64
	recomputed    float64
	success       [3]float64 // stop, length, abort
	// Steps by their token count, per bucket of stepTokenBounds (the last:
	// above it): vllm:iteration_tokens_total.
	steps      [len(stepTokenBounds) + 1]float64
	stepTokens float64 // the histogram's sum
}

// stepTokenBounds are the buckets of vllm:iteration_tokens_total as vLLM
// builds them (powers of two up to its largest step budgets).
var stepTokenBounds = [...]float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}

// countStep counts one step of n tokens in its bucket.
func (c *engineCounters) countStep(n float64) {
	i := 0
	for i < len(stepTokenBounds) && n > stepTokenBounds[i] {
		i++
	}
	c.steps[i]++
	c.stepTokens += n
}

func newEngine(idx int, m *model, h *host, gs []*gpu, local int) *engine {
	e := &engine{
		idx: idx, m: m, host: h, gpus: gs, local: local,
		pod:     slug(m.spec.Name) + "-" + itoa(len(m.engines)),
		port:    8000 + local,
		maxSeqs: m.spec.MaxNumSeqs,
		kvFrac:  1, budgetMul: 1, slowMul: 1,
		hungUntil: math.MinInt64,
	}
	if e.maxSeqs == 0 {
		e.maxSeqs = 256
	}
	tp := float64(m.spec.TP)
	e.wPerGPU = m.arch.WeightBytes() / tp
	e.kvPerGPU = m.arch.KVBytesPerToken() / tp
	// vLLM: gpu_memory_utilization 0.9 of the card, minus weights and an
	// activation/graph reserve, is the KV pool.
	mem := h.kind.MemMiB * (1 << 20)
	reserve := 2.5e9 + 0.02*mem
	pool := 0.9*mem - e.wPerGPU - reserve
	e.blocks = max(64, int(pool/(e.kvPerGPU*blockTokens)))
	e.kv = newKVCache(e.blocks)
	e.budget = m.spec.MaxBatchedTokens
	if e.budget == 0 {
		e.budget = 2048
	}
	return e
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	neg := i < 0
	if neg {
		i = -i
	}
	for i > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	if neg {
		n--
		b[n] = '-'
	}
	return string(b[n:])
}

// longPromptTokens is where a prompt counts as long: about the longest 5%
// of the default fleet's chat and code prompts (RAG, long documents).
const longPromptTokens = 4608

func (e *engine) load() int { return len(e.running) + e.waiting.len() }

func (e *engine) stepBudget() int32 {
	b := float64(e.budget) * e.budgetMul
	return int32(math.Min(b, float64(e.m.arch.MaxModelLen)))
}

// deque is a FIFO with cheap push-front (preempted requests go first).
type deque struct {
	buf  []*request
	head int
	n    int
}

func (d *deque) len() int { return d.n }

func (d *deque) grow() {
	nb := make([]*request, max(16, 2*len(d.buf)))
	for i := 0; i < d.n; i++ {
		nb[i] = d.buf[(d.head+i)%len(d.buf)]
	}
	d.buf, d.head = nb, 0
}

func (d *deque) pushBack(r *request) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.buf[(d.head+d.n)%len(d.buf)] = r
	d.n++
}

func (d *deque) pushFront(r *request) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.head = (d.head - 1 + len(d.buf)) % len(d.buf)
	d.buf[d.head] = r
	d.n++
}

func (d *deque) front() *request { return d.buf[d.head] }

func (d *deque) popFront() *request {
	r := d.buf[d.head]
	d.buf[d.head] = nil
	d.head = (d.head + 1) % len(d.buf)
	d.n--
	return r
}

// stepCost is the cost model of one forward pass over the scheduled batch:
// a roofline of GEMM FLOPs and DRAM bytes per GPU, plus per-layer kernel
// time, tensor-parallel all-reduces over NVLink, host-side scheduling and a
// host↔device transfer whose latency grows with PCIe load. It is
// calibrated so that an 8B model on an H100 decodes a 32-sequence batch in
// ~10 ms and prefills ~35k tokens/s, and a 70B TP4 engine on H200s decodes
// in ~15–25 ms.
type stepCost struct {
	dt     float64 // seconds
	tensor float64 // seconds compute bound
	gpu    float64 // seconds kernels run
	dram   float64 // bytes per GPU
	pcieIn float64
	pcieOt float64
}

const (
	gemmEfficiency = 0.35
	hbmEfficiency  = 0.8
	layerKernelS   = 20e-6
	hostBaseS      = 1.5e-3
	hostPerSeqS    = 6e-6
	pcieBaseS      = 0.2e-3
	allReduceLatS  = 8e-6
)

func (e *engine) cost(batch []*request) stepCost {
	arch := e.m.arch
	var tokens, attn, ctx float64
	for _, r := range batch {
		n := float64(r.numNew)
		c := float64(r.computed)
		tokens += n
		attn += n * (c + n/2)
		ctx += c + n
	}
	tp := float64(e.m.spec.TP)
	// The slowest GPU sets the pace of a tensor-parallel step.
	cf, bw, rho := 1.0, 1.0, 0.0
	for _, g := range e.gpus {
		cf = math.Min(cf, g.clock/g.kind.MaxSMClockMHz)
		bw = math.Min(bw, 1-g.neighbourDRAM)
		rho = math.Max(rho, g.pcieLoad())
	}
	kind := e.host.kind
	flops := (2*arch.Params*tokens + 4*float64(arch.Layers*arch.Hidden)*attn) / tp
	bytes := e.wPerGPU + (ctx+tokens)*e.kvPerGPU
	tc := flops / (kind.BF16FLOPS * gemmEfficiency * cf)
	// Memory-bound kernels lose part of their achieved bandwidth at low SM
	// clocks (fewer requests in flight), hence the partial clock factor.
	tm := bytes / (kind.HBMBytesPerS * hbmEfficiency * bw * (0.4 + 0.6*cf))
	tg := math.Max(tc, tm) + 0.15*math.Min(tc, tm) + float64(arch.Layers)*layerKernelS/cf
	if e.m.spec.TP > 1 {
		ar := tokens * float64(arch.Hidden) * 2 * 2 * (tp - 1) / tp
		tg += float64(arch.Layers) * 2 * (allReduceLatS + ar/kind.NVLinkBytesPS)
	}
	host := hostBaseS + hostPerSeqS*float64(len(batch))
	// Transfer latency rises sharply as a neighbour saturates the link.
	pcie := pcieBaseS * math.Pow(1/(1-math.Min(rho, 0.97)), 1.5)
	dt := tg*e.slowMul + host + pcie
	dt *= math.Exp(0.04 * e.rng.NormFloat64())
	return stepCost{
		dt: dt, tensor: math.Min(tc, tg), gpu: tg * e.slowMul, dram: bytes,
		pcieIn: 24e3 + 64*tokens + 1024*float64(len(batch)), pcieOt: 4e3 + 16*float64(len(batch)),
	}
}
