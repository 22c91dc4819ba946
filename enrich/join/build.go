package join

import (
	"math"
	"sort"

	"github.com/tailcause/tailcause/enrich/normalize"
	"github.com/tailcause/tailcause/schemas"
)

func (j *Joiner) build(p *pendingReq) Output {
	r := &p.req
	steps, stepRefs := j.takeSteps(r)
	done := j.drop(nil, p.ref)
	done = j.drop(done, stepRefs...)
	row := Row{
		UID: r.UID, TraceID: r.TraceID, SpanID: r.SpanID, ParentSpanID: r.ParentSpanID, RequestID: r.RequestID,
		Source: string(r.Source), SpanName: r.SpanName, Service: r.Service, Model: r.Model,
		Host: r.Placement.Host, Pod: r.Placement.Pod, Namespace: r.Placement.Namespace,
		ServiceInstance: r.Placement.ServiceInstance, Engine: r.Placement.Engine, GPU: r.Placement.GPU, GPUIndex: r.Placement.GPUIndex,
		StartNs: r.StartNs, EndNs: r.EndNs, Error: r.Error, FinishReason: r.FinishReason,
		E2EMs: r.E2EMs, TTFTMs: r.TTFTMs, QueueMs: r.QueueMs, PrefillMs: r.PrefillMs, DecodeMs: r.DecodeMs,
		InferenceMs: r.InferenceMs, KVTransferMs: r.KVTransferMs,
		PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens, CachedTokens: r.CachedTokens, MaxTokens: r.MaxTokens,
		Retracts: uint32(r.Retracts), AttrKeys: r.AttrKeys, AttrValues: r.AttrValues,
		KafkaPartition: int32(p.ref.Partition), KafkaOffset: p.ref.Offset,
		EngineMatch: "none", GPUMatch: "none",
	}
	if math.IsNaN(row.E2EMs) && r.EndNs >= r.StartNs {
		row.E2EMs = float64(r.EndNs-r.StartNs) / 1e6
	}
	j.fillEngineAndGPU(&row, p)
	stalls := j.timeline(&row, r, steps)
	return Output{Row: row, Stalls: stalls, Done: done}
}

// features reads the engine and GPU state a request ran under.
func (j *Joiner) fillEngineAndGPU(row *Row, p *pendingReq) {
	nanAll(&row.RunningAtArrival, &row.RunningAgeMs, &row.WaitingAtArrival, &row.WaitingAgeMs,
		&row.KVUsageAtArrival, &row.KVUsageMax, &row.KVUsageAgeMs, &row.PreemptionsDuring, &row.PreemptAgeMs,
		&row.PrefixHitRatio, &row.PrefixAgeMs, &row.EnginePromptTPS, &row.EngineGenTPS, &row.EngineTPSAgeMs,
		&row.EngineMeanPromptTokens, &row.EngineMeanOutputTokens, &row.EngineStepTokens,
		&row.SMClockMinMHz, &row.SMClockNormMHz, &row.SMClockRatio, &row.SMClockAgeMs, &row.ThrottleAgeMs,
		&row.GPUTempMaxC, &row.GPUTempAgeMs, &row.PowerMaxW, &row.PowerAgeMs, &row.DRAMActiveMax, &row.DRAMActiveAgeMs,
		&row.PCIeBytesPerSMax, &row.PCIeAgeMs, &row.XIDAgeMs)
	h := j.hosts[p.host]
	if h == nil {
		return
	}
	r := &p.req
	pr := j.resolve(r, h)
	row.EngineMatch, row.GPUMatch = pr.engineMatch, pr.gpuMatch
	maxAge := uint64(j.cfg.MaxSampleAge)
	a, b := r.StartNs, r.EndNs
	if es := h.engines[pr.engine]; es != nil {
		if row.Engine == "" {
			row.Engine = es.engine
		}
		m := es.metrics
		if s := m[normalize.MetricRunning]; s != nil {
			row.RunningAtArrival, row.RunningAgeMs, _ = s.asOf(a, maxAge)
		}
		if s := m[normalize.MetricWaiting]; s != nil {
			row.WaitingAtArrival, row.WaitingAgeMs, _ = s.asOf(a, maxAge)
		}
		if s := m[normalize.MetricKVUsage]; s != nil {
			row.KVUsageAtArrival, row.KVUsageAgeMs, _ = s.asOf(a, maxAge)
			mx := math.NaN()
			if _, ok := s.window(a, b, maxAge, maxInto(&mx)); ok {
				row.KVUsageMax = mx
			}
		}
		if s := m[normalize.MetricPreemptions]; s != nil {
			if sum, _, age, ok := s.overlap(a, b); ok && age <= float64(maxAge)/1e6 {
				row.PreemptionsDuring, row.PreemptAgeMs = sum, age
			}
		}
		hits, queries := m[normalize.MetricPrefixHits], m[normalize.MetricPrefixQueries]
		if hits != nil && queries != nil {
			hs, _, age, ok1 := hits.overlap(a, b)
			qs, _, _, ok2 := queries.overlap(a, b)
			if ok1 && ok2 && qs > 0 && age <= float64(maxAge)/1e6 {
				row.PrefixHitRatio, row.PrefixAgeMs = hs/qs, age
			}
		} else if s := m[normalize.MetricPrefixHitRate]; s != nil {
			row.PrefixHitRatio, row.PrefixAgeMs, _ = s.asOf(a, maxAge)
		}
		if s := m[normalize.MetricPromptTokens]; s != nil {
			if sum, cov, age, ok := s.overlap(a, b); ok && cov > 0 && age <= float64(maxAge)/1e6 {
				row.EnginePromptTPS, row.EngineTPSAgeMs = sum/cov, age
			}
		}
		// The workload mix: tokens per finished request on the engine over
		// the scrape intervals the request ran through
		// (vllm:request_success_total), whole deltas (series.deltas), at
		// least one finished request.
		if done := m[normalize.MetricRequestSuccess]; done != nil {
			if n, ok := done.deltas(a, b); ok && n >= 1 {
				if s := m[normalize.MetricPromptTokens]; s != nil {
					if sum, ok := s.deltas(a, b); ok {
						row.EngineMeanPromptTokens = sum / n
					}
				}
				if s := m[normalize.MetricGenerationTokens]; s != nil {
					if sum, ok := s.deltas(a, b); ok {
						row.EngineMeanOutputTokens = sum / n
					}
				}
			}
		}
		// The step size the average token was computed in: Σ count·bound²
		// over Σ count·bound of the step-size histogram, whole deltas.
		if s, sq := m[normalize.MetricStepTokens], m[normalize.MetricStepTokensSq]; s != nil && sq != nil {
			if t, ok := s.deltas(a, b); ok && t > 0 {
				if t2, ok := sq.deltas(a, b); ok {
					row.EngineStepTokens = t2 / t
				}
			}
		}
		if s := m[normalize.MetricGenerationTokens]; s != nil {
			if sum, cov, age, ok := s.overlap(a, b); ok && cov > 0 && age <= float64(maxAge)/1e6 {
				row.EngineGenTPS = sum / cov
				if math.IsNaN(row.EngineTPSAgeMs) {
					row.EngineTPSAgeMs = age
				}
			}
		}
	}
	if len(pr.gpus) == 0 {
		return
	}
	if len(pr.gpus) == 1 && row.GPU == "" {
		row.GPU = pr.gpus[0]
		row.GPUIndex = h.gpus[pr.gpus[0]].gpuIndex
	}
	minClock, norm := math.NaN(), math.NaN()
	var reasons uint32
	var xid float64
	tempMax, powMax, dramMax, txMax, rxMax := math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()
	for _, id := range pr.gpus {
		m := h.gpus[id].metrics
		if s := m[normalize.MetricSMClock]; s != nil {
			age, ok := s.window(a, b, maxAge, minInto(&minClock))
			worseAge(&row.SMClockAgeMs, age, ok)
			n := s.max()
			if math.IsNaN(norm) || n > norm {
				norm = n
			}
		}
		age, ok := gpuReasons(h.gpus[id], a, b, maxAge, &reasons)
		worseAge(&row.ThrottleAgeMs, age, ok)
		windowMax(m[normalize.MetricGPUTemp], a, b, maxAge, &tempMax, &row.GPUTempAgeMs)
		windowMax(m[normalize.MetricPower], a, b, maxAge, &powMax, &row.PowerAgeMs)
		windowMax(m[normalize.MetricDRAMActive], a, b, maxAge, &dramMax, &row.DRAMActiveAgeMs)
		windowMax(m[normalize.MetricPCIeTx], a, b, maxAge, &txMax, &row.PCIeAgeMs)
		windowMax(m[normalize.MetricPCIeRx], a, b, maxAge, &rxMax, &row.PCIeAgeMs)
		if s := m[normalize.MetricXID]; s != nil {
			age, ok := s.window(a, b, maxAge, func(v float64) { xid = math.Max(xid, v) })
			worseAge(&row.XIDAgeMs, age, ok)
		}
	}
	row.SMClockMinMHz, row.SMClockNormMHz = minClock, norm
	if norm > 0 {
		row.SMClockRatio = minClock / norm
	}
	row.ThrottleReasons = reasons
	row.GPUTempMaxC, row.PowerMaxW, row.DRAMActiveMax = tempMax, powMax, dramMax
	switch {
	case !math.IsNaN(txMax) && !math.IsNaN(rxMax):
		row.PCIeBytesPerSMax = txMax + rxMax
	case !math.IsNaN(txMax):
		row.PCIeBytesPerSMax = txMax
	default:
		row.PCIeBytesPerSMax = rxMax
	}
	row.XIDLast = uint32(xid)
}

// gpuReasons ORs into *reasons the clock-event reasons of GPU es over the
// lifetime [a, b], with the age as window gives it: the bitmask the GPU
// reports, or, for a GPU that reports none (dcgm-exporter's default field
// set), reasons derived from what it does report (schemas.ThermalSlowdownC):
// its violation counters (throttled for at least 1% of the covered time),
// else its gauges (a busy GPU's SM clock below ThrottledClockRatio of its
// peak: thermal when it is at ThermalSlowdownC or hotter, else the power
// cap). A GPU with neither gives nothing (ok false).
func gpuReasons(es *entitySeries, a, b, maxAge uint64, reasons *uint32) (ageMs float64, ok bool) {
	m := es.metrics
	if s := m[normalize.MetricClockReasons]; s != nil {
		return s.window(a, b, maxAge, func(v float64) { *reasons |= uint32(v) })
	}
	ageMs = math.NaN()
	violations := [...]struct {
		s   *series
		bit uint32
	}{{m[normalize.MetricPowerViolation], normalize.ThrottleSWPowerCap}, {m[normalize.MetricThermalViolation], normalize.ThrottleSWThermal}}
	if violations[0].s != nil || violations[1].s != nil {
		for _, c := range violations {
			if c.s == nil {
				continue
			}
			ns, covered, age, ok2 := c.s.overlap(a, b)
			if !ok2 {
				continue
			}
			if ns >= 0.01*covered*1e9 && ns > 0 {
				*reasons |= c.bit
			}
			worseAge(&ageMs, age, true)
			ok = true
		}
		return ageMs, ok
	}
	clock, temp, util := m[normalize.MetricSMClock], m[normalize.MetricGPUTemp], m[normalize.MetricGPUUtil]
	if clock == nil || temp == nil || !(es.peakClock > 0) {
		return ageMs, false
	}
	return clock.windowAt(a, b, maxAge, func(t uint64, v float64) {
		if v >= schemas.ThrottledClockRatio*es.peakClock {
			return
		}
		if util != nil {
			if u, _, ok := util.asOf(t, maxAge); ok && u < schemas.ThrottleBusyUtil {
				return // an idle GPU parks its clock
			}
		}
		switch c, _, ok := temp.asOf(t, maxAge); {
		case !ok:
		case c >= schemas.ThermalSlowdownC:
			*reasons |= normalize.ThrottleSWThermal
		default:
			*reasons |= normalize.ThrottleSWPowerCap
		}
	})
}

func windowMax(s *series, a, b, maxAge uint64, mx, ageMs *float64) {
	if s == nil {
		return
	}
	age, ok := s.window(a, b, maxAge, maxInto(mx))
	worseAge(ageMs, age, ok)
}

func maxInto(m *float64) func(float64) {
	return func(v float64) {
		if math.IsNaN(*m) || v > *m {
			*m = v
		}
	}
}

func minInto(m *float64) func(float64) {
	return func(v float64) {
		if math.IsNaN(*m) || v < *m {
			*m = v
		}
	}
}

// worseAge keeps the largest staleness over several GPUs.
func worseAge(dst *float64, age float64, ok bool) {
	if ok && (math.IsNaN(*dst) || age > *dst) {
		*dst = age
	}
}

func nanAll(fs ...*float64) {
	for _, f := range fs {
		*f = math.NaN()
	}
}

// timeline computes token-timeline features and stall intervals.
func (j *Joiner) timeline(row *Row, r *normalize.Request, steps []normalize.Step) []Stall {
	row.ITLP50Ms, row.ITLP99Ms, row.ITLMaxMs, row.TPOTMs = math.NaN(), math.NaN(), math.NaN(), math.NaN()
	var times []uint64
	retracts := uint32(0)
	for _, st := range steps {
		switch st.Kind {
		case normalize.StepDecode:
			times = append(times, st.EndNs)
		case normalize.StepRetract:
			retracts++
		}
	}
	row.Retracts += retracts
	src := r.TimelineSource
	if len(times) > 0 {
		src = normalize.TimelineSteps
	} else if len(r.TokenTimesNs) > 0 {
		times = append(times, r.TokenTimesNs...)
	}
	if len(times) < 2 {
		if src == "" || src == normalize.TimelineSteps && len(times) < 2 {
			src = normalize.TimelineAggregate
		}
		row.TimelineSource = string(src)
		if r.CompletionTokens > 1 && !math.IsNaN(r.DecodeMs) {
			row.TPOTMs = r.DecodeMs / float64(r.CompletionTokens-1)
		}
		return nil
	}
	row.TimelineSource = string(src)
	sort.Slice(times, func(a, b int) bool { return times[a] < times[b] })
	// The first token comes out of prefill: start + TTFT when known.
	if !math.IsNaN(r.TTFTMs) {
		first := r.StartNs + uint64(r.TTFTMs*1e6)
		if first < times[0] {
			times = append([]uint64{first}, times...)
		}
	}
	gaps := make([]float64, 0, len(times)-1)
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, float64(times[i]-times[i-1])/1e6)
	}
	sorted := append([]float64(nil), gaps...)
	sort.Float64s(sorted)
	row.ITLP50Ms = quantile(sorted, 0.5)
	row.ITLP99Ms = quantile(sorted, 0.99)
	row.ITLMaxMs = sorted[len(sorted)-1]
	sum := 0.0
	for _, g := range gaps {
		sum += g
	}
	row.TPOTMs = sum / float64(len(gaps))
	thr := math.Max(j.cfg.StallFactor*row.ITLP50Ms, float64(j.cfg.StallMin)/1e6)
	var stalls []Stall
	for i, g := range gaps {
		if g <= thr {
			continue
		}
		a, b := times[i], times[i+1]
		st := Stall{
			RequestUID: row.UID, TraceID: row.TraceID, Service: row.Service, Model: row.Model,
			Host: row.Host, Pod: row.Pod, Engine: row.Engine, GPU: row.GPU,
			TokenIndex: uint32(i + 1), StartNs: a, EndNs: b, DurationMs: g,
		}
		for _, s := range steps {
			if s.Kind == normalize.StepRetract && s.StartNs >= a && s.StartNs <= b {
				st.Retracts++
			}
		}
		j.stallEvents(&st, r)
		stalls = append(stalls, st)
		row.StallCount++
		row.StallMs += g
	}
	return stalls
}

// stallEvents attaches the engine and GPU events overlapping a stall.
func (j *Joiner) stallEvents(st *Stall, r *normalize.Request) {
	st.Preemptions, st.KVUsageMax, st.SMClockMinMHz, st.EnginePromptTPS = math.NaN(), math.NaN(), math.NaN(), math.NaN()
	if st.Retracts > 0 {
		st.Events = append(st.Events, "retract")
	}
	h := j.hosts[r.Placement.Host]
	if h == nil {
		return
	}
	pr := j.resolve(r, h)
	maxAge := uint64(j.cfg.MaxSampleAge)
	a, b := st.StartNs, st.EndNs
	if es := h.engines[pr.engine]; es != nil {
		if s := es.metrics[normalize.MetricPreemptions]; s != nil {
			if sum, _, _, ok := s.overlap(a, b); ok {
				st.Preemptions = sum
				if sum > 0 {
					st.Events = append(st.Events, "preemption")
				}
			}
		}
		if s := es.metrics[normalize.MetricKVUsage]; s != nil {
			s.window(a, b, maxAge, maxInto(&st.KVUsageMax))
			if st.KVUsageMax >= 0.95 {
				st.Events = append(st.Events, "kv_cache_full")
			}
		}
		if s := es.metrics[normalize.MetricPromptTokens]; s != nil {
			if sum, cov, _, ok := s.overlap(a, b); ok && cov > 0 {
				st.EnginePromptTPS = sum / cov
			}
		}
	}
	for _, id := range pr.gpus {
		m := h.gpus[id].metrics
		gpuReasons(h.gpus[id], a, b, maxAge, &st.ThrottleReasons)
		if s := m[normalize.MetricSMClock]; s != nil {
			s.window(a, b, maxAge, minInto(&st.SMClockMinMHz))
		}
		if s := m[normalize.MetricXID]; s != nil {
			s.window(a, b, maxAge, func(v float64) {
				if uint32(v) > st.XIDLast {
					st.XIDLast = uint32(v)
				}
			})
		}
	}
	const thermal = normalize.ThrottleSWThermal | normalize.ThrottleHWThermal | normalize.ThrottleHWSlowdown
	const power = normalize.ThrottleSWPowerCap | normalize.ThrottleHWPowerBrake
	if st.ThrottleReasons&thermal != 0 {
		st.Events = append(st.Events, "thermal_throttle")
	}
	if st.ThrottleReasons&power != 0 {
		st.Events = append(st.Events, "power_cap")
	}
	if st.XIDLast != 0 {
		st.Events = append(st.Events, "xid")
	}
}

// quantile of sorted data by linear interpolation between order statistics.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	if lo == hi {
		return sorted[lo]
	}
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}
