package causaltest

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// A structural model of an LLM-serving fleet, one row per request, written
// straight into the requests table: the test ground truth for the Analyzer.
//
// Per request (engine e, GPU g, arrival t):
//
//	prompt ~ logN(ln 600, 0.7), or logN(ln 9000, 0.3) with prob longShare(t)
//	completion ~ logN(ln 180, 0.6)
//	running ~ N(12, 3) ≥ 1; waiting ~ Poisson(0.2)
//	kv = 0.28 + 0.015·running + 0.9·batchLongShare + prompt/40000 + N(0, 0.04)
//	     (batchLongShare ~ Binomial(running, longShare)/running: the engine's
//	     other long prompts fill the cache too)
//	tpot = 18·(1 + 0.025·running)·(1 + prompt/8000)/clock · faults
//	e2e = 200·waiting + 0.08·prompt + prompt²/200000 + completion·tpot
//	      + preemption cost, times logN(0, 0.15)
//
// Faults act only through the mechanism named: a KV fault halves an
// engine's cache (kv doubles, preemptions ~ Poisson(4) when kv ≥ 0.9, each
// redoing the prefill and stalling 400 ms, decode ×2); a thermal throttle
// sets the thermal reason bit and halves one GPU's clock; a degraded engine
// decodes 2.2× slower with no metric moving; the long-prompt shift raises
// longShare to 0.35 and moves KV usage with it (the decoy: no KV fault).
// A memory-bandwidth fault raises one GPU's DRAM active from 0.4 to 0.6
// and decodes ×(1 + 8·(dram − 0.5)) above 0.5. Harmless moves: PCIe
// traffic of one GPU ×10 (or ×Factor).
//
// Load on an engine (busy, 1 normally) fills its batch and its queue:
// running ~ N(12·busy, 3), waiting ~ Poisson(0.2 + 4·(busy − 1)). A surge
// forces a share of all arrivals onto one engine (busy = its arrival rate
// over the normal one); a slow queue is a degraded engine whose requests
// stay longer, so it holds more of them with the same arrivals (busy =
// the slowdown, Little's law).
//
// Scenario is one such fleet over [Start, Start+Duration): zero fields
// take defaults (4 hosts of 2 GPUs, model llama-3-8b, service chat,
// 15 requests per second).
type Scenario struct {
	Seed     uint64
	Start    time.Time
	Duration time.Duration
	RatePerS float64
	Hosts    int // default 4
	GPUs     int // per host, one engine each; default 2
	Model    string
	Service  string
	// TPHost, when ≥ 0 with TP set, makes engine 0 of that host tensor
	// parallel: its rows carry no single GPU (gpu ""), as the enricher
	// writes a request that ran on several GPUs (see InsertGPUSamples).
	TP     bool
	TPHost int
	// TPAllGPUs makes a thermal fault on the tensor-parallel engine show
	// in the samples of all its GPUs (the host's cooling); IdleGPUs adds
	// that many GPUs serving nothing to its host. With IdleGPUs every GPU
	// also reports gpu_util (0.9 busy, 0 idle).
	TPAllGPUs bool
	IdleGPUs  int
	// DCGMDefaultFields writes the samples dcgm-exporter's default field
	// set gives instead of the clock-event reasons: the GPU temperature
	// (88 °C while throttled, 70 °C otherwise).
	DCGMDefaultFields bool
	// PrefixHits makes the prefix cache matter: a prompt's uncached share
	// is prefilled (+20 ms per uncached prompt token), a full KV cache (KV ≥ 0.9)
	// evicts the cached prefixes (hit ratio 0.5 → 0.05; a KV fault's own
	// preemption cost is then smaller than the misses'), and a "prefix"
	// ("prefix_all") fault stops the engine's (every engine's) cache
	// hitting whatever its KV usage.
	PrefixHits bool
	// LowKV quarters every engine's KV usage (a cache with room to spare),
	// so that a "kv_lost" fault's rise shows: it takes most of the cache,
	// usage ×8, and the smaller pool keeps fewer evictable prefixes at any
	// usage (with PrefixHits the hit ratio falls to 0.3 below KV 0.9 too).
	LowKV bool
	// PCIeLevel is every GPU's mean PCIe traffic in bytes/s (0: 2 GB/s);
	// an idle link's few MB/s with it.
	PCIeLevel float64
	// StepTokens writes engine_step_tokens (the engines export their step
	// histogram; NaN otherwise, as without vllm:iteration_tokens_total): the
	// token-weighted step about 1500 tokens, drifting slowly, ×4 on a
	// "prefill_step" fault and ×degraded^0.3 on a slow engine. It draws no
	// random number, so a scenario's other columns are the same with it or
	// without.
	StepTokens bool
	FaultFrom  time.Duration // offset from Start
	FaultTo    time.Duration // 0: until the end
	Faults     []Fault
}

// Fault is one fault of a Scenario, acting on engine GPU of host Host.
type Fault struct {
	Kind   string // "kv", "kv_lost", "long_prompts", "thermal", "degraded", "pcie_harmless", "membw", "surge", "slow_queue", "prefix", "prefix_all", "prefill_step"
	Host   int
	GPU    int
	From   time.Duration // 0: scenario's FaultFrom
	To     time.Duration // 0: scenario's FaultTo
	Factor float64       // optional magnitude
}

func (s Scenario) withDefaults() Scenario {
	if s.Hosts == 0 {
		s.Hosts = 4
	}
	if s.GPUs == 0 {
		s.GPUs = 2
	}
	if s.Model == "" {
		s.Model = "llama-3-8b"
	}
	if s.Service == "" {
		s.Service = "chat"
	}
	if s.RatePerS == 0 {
		s.RatePerS = 15
	}
	return s
}

// HostName, GPUName and PodName are the names the generator gives host h
// and the GPU and pod of its engine g.
func HostName(h int) string { return fmt.Sprintf("node-%d", h) }
func GPUName(h, g int) string {
	return fmt.Sprintf("GPU-%08x-0000-4000-8000-%012d", h*16+g, h*16+g)
}
func PodName(h, g int) string { return fmt.Sprintf("vllm-%d-%d", h, g) }

// synthColumns is the insert column list, in the order of synthBlock.cols.
var synthColumns = []string{
	"uid", "trace_id", "span_id", "request_id", "source", "span_name", "service", "model", "host", "pod",
	"engine", "gpu", "gpu_index", "start_ns", "end_ns", "start_time", "e2e_ms", "ttft_ms", "queue_ms",
	"prefill_ms", "decode_ms", "tpot_ms", "prompt_tokens", "completion_tokens", "running_at_arrival",
	"waiting_at_arrival", "kv_usage_at_arrival", "kv_usage_max", "preemptions_during", "prefix_hit_ratio",
	"engine_prompt_tps", "engine_mean_prompt_tokens", "engine_mean_output_tokens", "sm_clock_min_mhz", "sm_clock_norm_mhz", "sm_clock_ratio", "throttle_reasons",
	"gpu_temp_max_c", "power_max_w", "dram_active_max", "pcie_bytes_per_s_max", "xid_last",
	"engine_match", "gpu_match", "enriched_at",
}

// synthBlock holds generated rows column by column.
type synthBlock struct {
	str  map[string][]string
	f64  map[string][]float64
	u64  map[string][]uint64
	i64  map[string][]int64
	u32  map[string][]uint32
	tm   map[string][]time.Time
	rows int
}

func newSynthBlock(capacity int) *synthBlock {
	b := &synthBlock{str: map[string][]string{}, f64: map[string][]float64{}, u64: map[string][]uint64{}, i64: map[string][]int64{}, u32: map[string][]uint32{}, tm: map[string][]time.Time{}}
	for _, c := range []string{"uid", "trace_id", "span_id", "request_id", "source", "span_name", "service", "model", "host", "pod", "engine", "gpu", "gpu_index", "engine_match", "gpu_match"} {
		b.str[c] = make([]string, 0, capacity)
	}
	for _, c := range []string{"e2e_ms", "ttft_ms", "queue_ms", "prefill_ms", "decode_ms", "tpot_ms", "running_at_arrival", "waiting_at_arrival", "kv_usage_at_arrival", "kv_usage_max", "preemptions_during", "prefix_hit_ratio", "engine_prompt_tps", "engine_mean_prompt_tokens", "engine_mean_output_tokens", "sm_clock_min_mhz", "sm_clock_norm_mhz", "sm_clock_ratio", "gpu_temp_max_c", "power_max_w", "dram_active_max", "pcie_bytes_per_s_max"} {
		b.f64[c] = make([]float64, 0, capacity)
	}
	b.u64["start_ns"], b.u64["end_ns"] = make([]uint64, 0, capacity), make([]uint64, 0, capacity)
	b.i64["prompt_tokens"], b.i64["completion_tokens"] = make([]int64, 0, capacity), make([]int64, 0, capacity)
	b.u32["throttle_reasons"], b.u32["xid_last"] = make([]uint32, 0, capacity), make([]uint32, 0, capacity)
	b.tm["start_time"], b.tm["enriched_at"] = make([]time.Time, 0, capacity), make([]time.Time, 0, capacity)
	return b
}

func (b *synthBlock) column(name string) any {
	switch {
	case b.str[name] != nil:
		return b.str[name]
	case b.f64[name] != nil:
		return b.f64[name]
	case b.u64[name] != nil:
		return b.u64[name]
	case b.i64[name] != nil:
		return b.i64[name]
	case b.u32[name] != nil:
		return b.u32[name]
	case b.tm[name] != nil:
		return b.tm[name]
	}
	panic("synth: unknown column " + name)
}

// synthGen generates a scenario's rows in arrival order, block by block.
type synthGen struct {
	s   Scenario
	rng *rand.Rand
	n   int
	i   int
	t   float64 // current arrival offset in seconds
}

func newSynthGen(s Scenario) *synthGen {
	s = s.withDefaults()
	return &synthGen{s: s, rng: rand.New(rand.NewPCG(s.Seed, 0x7a11)), n: int(s.RatePerS * s.Duration.Seconds())}
}

// total is the number of rows the scenario generates.
func (g *synthGen) total() int { return g.n }

// active reports whether fault f acts at offset off of the scenario.
func (s Scenario) active(f Fault, off time.Duration) bool {
	from, to := f.From, f.To
	if from == 0 {
		from = s.FaultFrom
	}
	if to == 0 {
		to = s.FaultTo
	}
	if to == 0 {
		to = s.Duration + time.Hour
	}
	return off >= from && off < to
}

func poisson(rng *rand.Rand, lambda float64) float64 {
	if lambda <= 0 {
		return 0
	}
	l, k, p := math.Exp(-lambda), 0.0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// next fills a block of up to max rows; nil when done.
func (g *synthGen) next(max int) *synthBlock {
	if g.i >= g.n {
		return nil
	}
	cnt := min(max, g.n-g.i)
	b := newSynthBlock(cnt)
	s := g.s
	rng := g.rng
	// Arrivals: a Poisson process at RatePerS, truncated to the duration.
	dur := s.Duration.Seconds()
	step := dur / float64(g.n)
	enriched := s.Start.Add(s.Duration).Truncate(time.Second)
	idb := make([]byte, 16)
	for k := 0; k < cnt; k++ {
		g.t += rng.ExpFloat64() * step
		if g.t >= dur {
			g.t = math.Nextafter(dur, 0)
		}
		off := time.Duration(g.t * float64(time.Second))
		start := s.Start.Add(off)
		h, gi := rng.IntN(s.Hosts), rng.IntN(s.GPUs)
		busy := 1.0
		for _, f := range s.Faults {
			if f.Kind != "surge" || !s.active(f, off) {
				continue
			}
			share := f.Factor
			if share == 0 {
				share = 0.4
			}
			engines := float64(s.Hosts * s.GPUs)
			if rng.Float64() < share {
				h, gi = f.Host, f.GPU
			}
			if h == f.Host && gi == f.GPU {
				busy = (share + (1-share)/engines) * engines
			} else {
				busy = 1 - share
			}
		}

		longShare := 0.0
		clock := 0.98 + 0.01*rng.NormFloat64()
		throttle := uint32(0)
		temp := 62 + 4*rng.NormFloat64()
		pcieLevel := 2e9
		if s.PCIeLevel > 0 {
			pcieLevel = s.PCIeLevel
		}
		pcie := pcieLevel * (1 + 0.2*rng.NormFloat64())
		dram := 0.4 + 0.05*rng.NormFloat64()
		kvFault, kvLost, prefixFault, degraded, membw, bigSteps := false, false, false, 1.0, 1.0, false
		for _, f := range s.Faults {
			if !s.active(f, off) {
				continue
			}
			on := f.Host == h && f.GPU == gi
			switch f.Kind {
			case "long_prompts":
				longShare = 0.35
				if f.Factor > 0 {
					longShare = f.Factor
				}
			case "prefix":
				prefixFault = prefixFault || on
			case "prefix_all": // every engine's prefix cache
				prefixFault = true
			case "kv":
				kvFault = kvFault || on
			case "kv_lost":
				kvFault, kvLost = kvFault || on, kvLost || on
			case "thermal":
				if on {
					clock = 0.5 + 0.02*rng.NormFloat64()
					throttle |= 0x20
					temp = 93 + 2*rng.NormFloat64()
				}
			case "slow_queue":
				if on {
					degraded = 2.2
					if f.Factor > 0 {
						degraded = f.Factor
					}
					busy = degraded
				}
			case "prefill_step":
				// Chunked prefill off on the engine: its prefills run in
				// one step each, and the decodes batched with them stall.
				bigSteps = bigSteps || on
			case "degraded":
				if on {
					degraded = 2.2
					if f.Factor > 0 {
						degraded = f.Factor
					}
				}
			case "pcie_harmless":
				if on {
					mul := 10.0
					if f.Factor > 0 {
						mul = f.Factor
					}
					pcie *= mul
				}
			case "membw":
				// Co-located work takes the GPU's DRAM bandwidth: DRAM
				// active rises to Factor (0.6 by default) and decode
				// slows past the knee at 0.5, where the peers' noise
				// (0.4 ± 0.05) never reaches.
				if on {
					level := 0.6
					if f.Factor > 0 {
						level = f.Factor
					}
					dram = level + 0.03*rng.NormFloat64()
					membw = 1 + 8*math.Max(dram-0.5, 0)
				}
			}
		}
		prompt := math.Exp(math.Log(600) + 0.7*rng.NormFloat64())
		if rng.Float64() < longShare {
			prompt = math.Exp(math.Log(9000) + 0.3*rng.NormFloat64())
		}
		prompt = math.Round(math.Min(math.Max(prompt, 16), 32000))
		completion := math.Round(math.Min(math.Max(math.Exp(math.Log(180)+0.45*rng.NormFloat64()), 1), 4096))
		running := math.Max(1, math.Round(12*busy+3*rng.NormFloat64()))
		waiting := poisson(rng, 0.2+4*math.Max(busy-1, 0))
		batchLong := 0.0
		if longShare > 0 {
			var c float64
			for j := 0; j < int(running); j++ {
				if rng.Float64() < longShare {
					c++
				}
			}
			batchLong = c / running
		}
		kv := 0.28 + 0.015*running + 0.9*batchLong + prompt/40000 + 0.04*rng.NormFloat64()
		preempt, preemptMS := 0.0, 0.0
		tpotFactor := degraded * membw
		if bigSteps {
			tpotFactor *= 2
		}
		if s.LowKV {
			kv /= 4
		}
		switch {
		case kvLost:
			kv *= 8
		case kvFault:
			kv *= 2
		}
		kv = math.Min(1, math.Max(0, kv))
		prefill := 0.08*prompt + prompt*prompt/200000
		hit := func() float64 { return 0.5 + 0.05*rng.NormFloat64() } // drawn where it always was
		if s.PrefixHits {
			h := 0.5 + 0.05*rng.NormFloat64()
			switch {
			case prefixFault || kv >= 0.9:
				h = 0.05 + 0.02*rng.NormFloat64()
			case kvLost:
				h = 0.3 + 0.03*rng.NormFloat64()
			}
			prefill += 20 * prompt * (1 - h)
			hit = func() float64 { return h }
		}
		if kvFault && kv >= 0.9 {
			preempt = poisson(rng, 5)
			preemptMS = preempt * (prefill + 0.08*completion/2 + 600)
			tpotFactor *= 2.5
			if s.PrefixHits { // the evicted prefixes' misses are the larger cost
				preemptMS, tpotFactor = preempt*100, tpotFactor/2.5*1.5
			}
		}
		tpot := 18 * (1 + 0.025*running) * (1 + prompt/8000) / clock * tpotFactor
		queue := 200 * waiting
		decode := completion * tpot
		noise := math.Exp(0.15 * rng.NormFloat64())
		e2e := (queue + prefill + decode + preemptMS) * noise
		ttft := (queue + prefill) * noise

		binary.LittleEndian.PutUint64(idb, rng.Uint64())
		binary.LittleEndian.PutUint64(idb[8:], rng.Uint64())
		trace := hex.EncodeToString(idb)
		b.str["uid"] = append(b.str["uid"], trace+"/01")
		b.str["trace_id"] = append(b.str["trace_id"], trace)
		b.str["span_id"] = append(b.str["span_id"], trace[:16])
		b.str["request_id"] = append(b.str["request_id"], "req-"+trace[:12])
		b.str["source"] = append(b.str["source"], "vllm")
		b.str["span_name"] = append(b.str["span_name"], "llm_request")
		b.str["service"] = append(b.str["service"], s.Service)
		b.str["model"] = append(b.str["model"], s.Model)
		b.str["host"] = append(b.str["host"], HostName(h))
		b.str["pod"] = append(b.str["pod"], PodName(h, gi))
		b.str["engine"] = append(b.str["engine"], fmt.Sprint(gi))
		if s.TP && h == s.TPHost && gi == 0 {
			b.str["gpu"] = append(b.str["gpu"], "")
			b.str["gpu_index"] = append(b.str["gpu_index"], "")
		} else {
			b.str["gpu"] = append(b.str["gpu"], GPUName(h, gi))
			b.str["gpu_index"] = append(b.str["gpu_index"], fmt.Sprint(gi))
		}
		b.str["engine_match"] = append(b.str["engine_match"], "pod")
		b.str["gpu_match"] = append(b.str["gpu_match"], "pod")
		ns := uint64(start.UnixNano())
		b.u64["start_ns"] = append(b.u64["start_ns"], ns)
		b.u64["end_ns"] = append(b.u64["end_ns"], ns+uint64(e2e*1e6))
		b.tm["start_time"] = append(b.tm["start_time"], start.Truncate(time.Second))
		b.tm["enriched_at"] = append(b.tm["enriched_at"], enriched)
		for c, v := range map[string]float64{
			"e2e_ms": e2e, "ttft_ms": ttft, "queue_ms": queue * noise, "prefill_ms": prefill * noise,
			"decode_ms": decode * noise, "tpot_ms": tpot * noise, "running_at_arrival": running,
			"waiting_at_arrival": waiting, "kv_usage_at_arrival": kv * 0.9, "kv_usage_max": kv,
			"preemptions_during": preempt, "prefix_hit_ratio": hit(),
			"engine_prompt_tps": 8000 + 1500*rng.NormFloat64() + 20000*batchLong,
			// The engine's mix: the mean prompt of the lognormal mixture
			// the requests are drawn from, measured over a scrape interval.
			"engine_mean_prompt_tokens": (1-longShare)*600*math.Exp(0.245) + longShare*9000*math.Exp(0.045) + 40*rng.NormFloat64(),
			"engine_mean_output_tokens": 180*math.Exp(0.1) + 8*rng.NormFloat64(),
			"sm_clock_min_mhz":          1980 * clock, "sm_clock_norm_mhz": 1980, "sm_clock_ratio": clock,
			"gpu_temp_max_c": temp, "power_max_w": 500 + 40*rng.NormFloat64(), "dram_active_max": dram,
			"pcie_bytes_per_s_max": math.Max(pcie, 0),
		} {
			b.f64[c] = append(b.f64[c], v)
		}
		if s.StepTokens {
			// A slower engine takes longer steps, and more prompts
			// wait for each: its steps grow too, by less than its TPOT.
			step := 1500 * (1 + 0.1*math.Sin(g.t/97)) * (1 + 0.3*batchLong) * math.Pow(degraded, 0.3)
			if bigSteps {
				step *= 4
			}
			b.f64["engine_step_tokens"] = append(b.f64["engine_step_tokens"], step)
		}
		b.i64["prompt_tokens"] = append(b.i64["prompt_tokens"], int64(prompt))
		b.i64["completion_tokens"] = append(b.i64["completion_tokens"], int64(completion))
		b.u32["throttle_reasons"] = append(b.u32["throttle_reasons"], throttle)
		b.u32["xid_last"] = append(b.u32["xid_last"], 0)
	}
	g.i += cnt
	b.rows = cnt
	return b
}

// Insert writes a scenario's rows into the requests table in blocks
// of blockRows, column by column (fast: no per-row reflection).
func Insert(ctx context.Context, conn driver.Conn, s Scenario, blockRows int) (int, error) {
	g := newSynthGen(s)
	total := 0
	for {
		b := g.next(blockRows)
		if b == nil {
			return total, nil
		}
		if err := insertBlock(ctx, conn, b); err != nil {
			return total, err
		}
		total += b.rows
	}
}

func insertBlock(ctx context.Context, conn driver.Conn, b *synthBlock) error {
	cols := synthColumns
	if b.f64["engine_step_tokens"] != nil {
		cols = append(cols[:len(cols):len(cols)], "engine_step_tokens")
	}
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO requests ("+strings.Join(cols, ", ")+")")
	if err != nil {
		return fmt.Errorf("prepare synthetic insert: %w", err)
	}
	for i, c := range cols {
		if err := batch.Column(i).Append(b.column(c)); err != nil {
			_ = batch.Abort()
			return fmt.Errorf("append column %s: %w", c, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("send %d synthetic rows: %w", b.rows, err)
	}
	return nil
}

// tpGPUs are the four GPUs of the tensor-parallel engine (host h, engine
// 0): GPUName(h, 0), the one faults name, and three peers.
func tpGPUs(h int) []string {
	return []string{GPUName(h, 0), GPUName(h, 8), GPUName(h, 9), GPUName(h, 10)}
}

// InsertGPUSamples writes dcgm clock_event_reasons samples (every 10 s)
// of the tensor-parallel engine's GPUs: 0x20 (SW thermal slowdown) on
// GPUName(h, 0) while a thermal fault on it is active, 0 otherwise (with
// DCGMDefaultFields, gpu_temp_c samples: 88 and 70).
func InsertGPUSamples(ctx context.Context, conn driver.Conn, s Scenario) error {
	s = s.withDefaults()
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO gpu_samples (host, gpu, gpu_index, pod, namespace, metric, time_ns, time, value)")
	if err != nil {
		return err
	}
	gpus := tpGPUs(s.TPHost)
	for i := 0; i < s.IdleGPUs; i++ {
		gpus = append(gpus, GPUName(s.TPHost, 11+i))
	}
	for off := time.Duration(0); off < s.Duration; off += 10 * time.Second {
		at := s.Start.Add(off)
		for k, gpu := range gpus {
			busy := k < len(tpGPUs(s.TPHost))
			pod := ""
			if busy {
				pod = PodName(s.TPHost, 0)
			}
			metric, v := "clock_event_reasons", 0.0
			if s.DCGMDefaultFields {
				metric, v = "gpu_temp_c", 70
			}
			for _, f := range s.Faults {
				if f.Kind == "thermal" && f.Host == s.TPHost && f.GPU == 0 && (k == 0 || s.TPAllGPUs && busy) && s.active(f, off) {
					v = 0x20
					if s.DCGMDefaultFields {
						v = 88
					}
				}
			}
			if err := batch.Append(HostName(s.TPHost), gpu, fmt.Sprint(k), pod, "default", metric, uint64(at.UnixNano()), at.Truncate(time.Second), v); err != nil {
				_ = batch.Abort()
				return err
			}
			if s.IdleGPUs > 0 {
				u := 0.0
				if busy {
					u = 0.9
				}
				if err := batch.Append(HostName(s.TPHost), gpu, fmt.Sprint(k), pod, "default", "gpu_util", uint64(at.UnixNano()), at.Truncate(time.Second), u); err != nil {
					_ = batch.Abort()
					return err
				}
			}
		}
	}
	return batch.Send()
}
