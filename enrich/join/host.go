package join

import (
	"math"
	"sort"

	"github.com/tailcause/tailcause/enrich/normalize"
)

// hostState is everything known about one host (the join key): its engine
// series and its GPUs' series.
type hostState struct {
	engines    map[string]*entitySeries // by engineKey
	gpus       map[string]*entitySeries // by GPU UUID
	familyTime map[normalize.Family]uint64
	// due bounds from below, over the host's series, the second point's
	// time and the newest point's: Joiner.gc can trim or evict nothing
	// on the host before its cutoff passes due (series.trim needs the
	// second point before the cutoff, eviction the newest point before
	// a horizon at or before it). math.MaxUint64: no series.
	due uint64
	// gen is the host's incarnation (unique in the Joiner: a host evicted
	// and seen again gets a new one); version bumps when an engine or GPU
	// appears, changes hands or is evicted. Both key cached placements.
	gen     uint64
	version int
}

type entitySeries struct {
	model, engine, pod, instance, gpuIndex string
	metrics                                map[normalize.Metric]*series
	// peakClock is the highest SM clock a GPU has reported (kept when its
	// series are trimmed): the norm its derived clock-event reasons are
	// read against (gpuReasons).
	peakClock float64
}

func newHostState(gen uint64) *hostState {
	return &hostState{engines: map[string]*entitySeries{}, gpus: map[string]*entitySeries{}, familyTime: map[normalize.Family]uint64{}, gen: gen, due: math.MaxUint64}
}

func engineKey(s *normalize.Sample) string {
	id := s.Placement.Pod
	if id == "" {
		id = s.Placement.ServiceInstance
	}
	return s.Model + "\x00" + s.Placement.Engine + "\x00" + id
}

// addResult says what add did with a sample.
type addResult uint8

const (
	added     addResult = iota // stored in an existing entity
	addedNew                   // stored in a new entity (engine or GPU)
	duplicate                  // a point with that timestamp is already stored
	refused                    // a new entity was not allowed (the entity cap)
)

// add stores one sample (v is the level, or the delta for counters). A
// sample of an entity the host does not track yet is refused unless
// allowNew. memo, when not nil, is the caller's last entity lookup on this
// host (see entityMemo).
func (h *hostState) add(s *normalize.Sample, v float64, allowNew bool, memo *entityMemo) addResult {
	var es *entitySeries
	res := added
	if memo != nil && memo.es != nil && memo.same(s) {
		es = memo.es
	} else {
		if es, res = h.entity(s, allowNew); es == nil {
			return res
		}
		if memo != nil {
			*memo = entityMemo{family: s.Family, model: s.Model, placement: s.Placement, es: es}
		}
	}
	sr := es.metrics[s.Metric]
	if sr == nil {
		sr = &series{}
		es.metrics[s.Metric] = sr
	}
	if !sr.add(s.TimeNs, v) {
		return duplicate // (a new entity always takes its first point)
	}
	h.due = min(h.due, sr.due())
	if s.TimeNs > h.familyTime[s.Family] {
		h.familyTime[s.Family] = s.TimeNs
	}
	if s.Metric == normalize.MetricSMClock && v > es.peakClock {
		es.peakClock = v
	}
	return res
}

// entityMemo is the entity a sample was last stored in: the samples of a
// record come in runs of one entity (a scrape's engine, a GPU's label
// set), whose key — the engine key or GPU id, built from the labels — is
// then found once per run. A sample with the same family, model and
// placement goes to the same entity, and finds it unchanged (its pod is
// the placement's), as long as nothing is evicted in between: a memo
// lives for one Joiner.AddSamples call, on one host.
type entityMemo struct {
	family    normalize.Family
	model     string
	placement normalize.Placement
	es        *entitySeries
}

func (m *entityMemo) same(s *normalize.Sample) bool {
	return s.Family == m.family && s.Model == m.model && s.Placement == m.placement
}

// entity is the engine or GPU a sample belongs to, added when new
// (addedNew) if allowNew (else refused, with a nil entity).
func (h *hostState) entity(s *normalize.Sample, allowNew bool) (*entitySeries, addResult) {
	switch s.Family {
	case normalize.FamilyGPU:
		id := s.Placement.GPU
		if id == "" {
			id = "index:" + s.Placement.GPUIndex
		}
		es := h.gpus[id]
		if es == nil {
			if !allowNew {
				return nil, refused
			}
			es = &entitySeries{pod: s.Placement.Pod, gpuIndex: s.Placement.GPUIndex, metrics: map[normalize.Metric]*series{}}
			h.gpus[id] = es
			h.version++
			return es, addedNew
		}
		if s.Placement.Pod != es.pod {
			// The GPU changed hands (a new workload pod): re-resolve.
			es.pod = s.Placement.Pod
			h.version++
		}
		return es, added
	default:
		k := engineKey(s)
		es := h.engines[k]
		if es == nil {
			if !allowNew {
				return nil, refused
			}
			es = &entitySeries{model: s.Model, engine: s.Placement.Engine, pod: s.Placement.Pod, instance: s.Placement.ServiceInstance, metrics: map[normalize.Metric]*series{}}
			h.engines[k] = es
			h.version++
			return es, addedNew
		}
		return es, added
	}
}

// evicted counts what evict removed.
type evicted struct{ engines, gpus, series int }

// evict removes every series whose newest point is older than horizon,
// then every engine and GPU left without series, then the watermark of a
// family left without entities (so that a family that went silent for
// good no longer holds the host's requests until MaxWait). The caller
// chooses horizon so that nothing removed can describe a request the join
// still holds or can still take (see Joiner.gc).
// It trims the series it keeps at cutoff (series.trim) in the same pass.
func (h *hostState) evict(cutoff, horizon uint64) evicted {
	var n evicted
	h.due = math.MaxUint64
	for fam, m := range [2]map[string]*entitySeries{h.engines, h.gpus} {
		for id, es := range m {
			for name, s := range es.metrics {
				if s.last() < horizon {
					delete(es.metrics, name)
					n.series++
				} else {
					s.trim(cutoff)
					h.due = min(h.due, s.due())
				}
			}
			if len(es.metrics) == 0 {
				delete(m, id)
				h.version++
				if fam == 1 {
					n.gpus++
				} else {
					n.engines++
				}
			}
		}
	}
	if len(h.engines) == 0 {
		delete(h.familyTime, normalize.FamilyEngine)
	}
	if len(h.gpus) == 0 {
		delete(h.familyTime, normalize.FamilyGPU)
	}
	return n
}

// empty: nothing tracked.
func (h *hostState) empty() bool { return len(h.engines) == 0 && len(h.gpus) == 0 }

// passed reports whether every metric family seen on the host has data at
// or beyond t.
func (h *hostState) passed(t uint64) bool { return h.passedBut(t, false) }

// passedBut is passed, with the GPU family ignored when skipGPU.
func (h *hostState) passedBut(t uint64, skipGPU bool) bool {
	for fam, ft := range h.familyTime {
		if ft < t && !(skipGPU && fam == normalize.FamilyGPU) {
			return false
		}
	}
	return true
}

// passedFor reports whether a request placed by pr (its engine, its GPUs)
// can be joined up to t: every family of the host has passed t, and so has
// every live series of its own engine and GPUs. The host's families alone
// are not enough: the engines and GPUs of a host are scraped and delivered
// separately, and a counter feature needs the scrape after the request's
// end — joining when another engine's scrape passed t would give rows
// that depend on delivery order. A series silent for stale while its
// entity's other series go on (a metric no longer exported) is ignored.
// With gpuAsOf the GPU family and the GPUs' series are not waited for,
// but for a GPU whose features need the scrape after t (gpuNeedsNext).
func (h *hostState) passedFor(pr placementResult, t, stale uint64, gpuAsOf bool) bool {
	if !h.passedBut(t, gpuAsOf) {
		return false
	}
	if es := h.engines[pr.engine]; pr.engine != "" && es != nil && !es.passed(t, stale) {
		return false
	}
	for _, g := range pr.gpus {
		es := h.gpus[g]
		if es == nil || gpuAsOf && !es.gpuNeedsNext() {
			continue
		}
		if !es.passed(t, stale) || gpuAsOf && !h.passed(t) {
			return false
		}
	}
	return true
}

// gpuNeedsNext reports whether a GPU has a series that a request's GPU
// features read by overlap (counters apportioned over the scrape
// intervals the request ran through: gpuReasons' violation counters),
// which needs the scrape after the request's end. Its other features are
// read from the points up to the end (series.window).
func (es *entitySeries) gpuNeedsNext() bool {
	return es.metrics[normalize.MetricPowerViolation] != nil || es.metrics[normalize.MetricThermalViolation] != nil
}

// passed: every series of the entity that reported within stale of its
// newest sample has data at or beyond t.
func (es *entitySeries) passed(t, stale uint64) bool {
	var newest uint64
	for _, s := range es.metrics {
		newest = max(newest, s.last())
	}
	for _, s := range es.metrics {
		if l := s.last(); l < t && l+stale >= newest {
			return false
		}
	}
	return true
}

func (h *hostState) trim(cutoff uint64) {
	h.due = math.MaxUint64
	for _, m := range []map[string]*entitySeries{h.engines, h.gpus} {
		for _, es := range m {
			for _, s := range es.metrics {
				s.trim(cutoff)
				h.due = min(h.due, s.due())
			}
		}
	}
}

// resolve maps a request to its engine series and GPUs on this host.
//
// Engine: the series of the request's model on the request's pod; else the
// only series of that model on the host; else "ambiguous" (several engines
// serve the model and nothing says which ran it) and no engine features.
// GPUs: those whose DCGM pod label names the request's pod; else every GPU
// of the host ("host": features aggregate over them, e.g. the minimum SM
// clock), which is exact on single-engine hosts.
func (h *hostState) resolve(r *normalize.Request) placementResult {
	pr := placementResult{engineMatch: "none", gpuMatch: "none"}
	var byModel, byPod []string
	for k, es := range h.engines {
		if r.Model != "" && es.model != r.Model {
			continue
		}
		byModel = append(byModel, k)
		if r.Placement.Pod != "" && es.pod == r.Placement.Pod {
			byPod = append(byPod, k)
		}
	}
	sort.Strings(byModel)
	sort.Strings(byPod)
	switch {
	case len(byPod) == 1:
		pr.engine, pr.engineMatch = byPod[0], "pod"
	case len(byPod) > 1 && r.Placement.Engine != "":
		for _, k := range byPod {
			if h.engines[k].engine == r.Placement.Engine {
				pr.engine, pr.engineMatch = k, "pod"
			}
		}
		if pr.engine == "" {
			pr.engineMatch = "ambiguous"
		}
	case len(byPod) == 0 && len(byModel) == 1:
		pr.engine, pr.engineMatch = byModel[0], "model"
	case len(byModel) > 1:
		pr.engineMatch = "ambiguous"
	}
	var onPod, all []string
	for id, g := range h.gpus {
		all = append(all, id)
		if r.Placement.Pod != "" && g.pod == r.Placement.Pod {
			onPod = append(onPod, id)
		}
	}
	sort.Strings(onPod)
	sort.Strings(all)
	switch {
	case len(onPod) > 0:
		pr.gpus, pr.gpuMatch = onPod, "pod"
	case len(all) > 0:
		pr.gpus, pr.gpuMatch = all, "host"
	}
	return pr
}
