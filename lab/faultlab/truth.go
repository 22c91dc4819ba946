package faultlab

import (
	"encoding/json"
	"io"
	"math"
	"strconv"
	"time"
)

// TruthVersion is the version of the ground-truth JSON shape.
const TruthVersion = 1

// Truth is the ground truth of one run: what was injected, where and when,
// the fleet it ran on, and what the run produced.
type Truth struct {
	Version      int          `json:"truth_version"`
	Scenario     string       `json:"scenario"`
	ScenarioFile string       `json:"scenario_file,omitempty"`
	Description  string       `json:"description,omitempty"`
	Seed         uint64       `json:"seed"`
	Start        time.Time    `json:"start"`
	End          time.Time    `json:"end"`
	DurationS    float64      `json:"duration_s"`
	RateScale    float64      `json:"rate_scale"`
	Faults       []TruthFault `json:"faults"`
	Decoys       []TruthFault `json:"decoys"`
	Fleet        TruthFleet   `json:"fleet"`
	Stats        RunStats     `json:"stats"`
}

// Entity names what a cause acts on, in the fields of design.md's culprit
// entity: gpu is the UUID, engine the vLLM engine label, pod the engine's pod.
type Entity struct {
	Model   string `json:"model,omitempty"`
	Service string `json:"service,omitempty"`
	Host    string `json:"host,omitempty"`
	GPU     string `json:"gpu,omitempty"`
	Engine  string `json:"engine,omitempty"`
	Pod     string `json:"pod,omitempty"`
}

// TruthFault is one injected fault (or decoy: then Cause is the decoy kind).
type TruthFault struct {
	Cause            string    `json:"cause"`
	Entity           Entity    `json:"entity"`
	Target           Target    `json:"target"`
	Affected         []Entity  `json:"affected"`
	Onset            time.Time `json:"onset"`
	End              time.Time `json:"end"`
	OnsetS           float64   `json:"onset_s"`
	EndS             float64   `json:"end_s"`
	Magnitude        float64   `json:"magnitude"`
	MagnitudeMeaning string    `json:"magnitude_meaning"`
	XID              int       `json:"xid,omitempty"`
	// EffectsEnd, for a fault of discrete events (XIDs), is when the last
	// event's effects ended (its engine hung, then restarted) when that is
	// before End: after it the GPU only reports its last XID code.
	EffectsEnd time.Time `json:"effects_end,omitzero"`
	Note       string    `json:"note,omitempty"`
	// Effect is what the fault did to the e2e latency of the engines it
	// acts on (absent for decoys).
	Effect *FaultEffect `json:"effect,omitempty"`
}

// FaultEffect compares the e2e latency of the requests of a fault's engines
// that arrived during the fault with those that arrived before its onset
// (log-bucket sketch, 2% resolution; failed requests count with the latency
// their span reports). P99Ratio is 0 when either side has no request.
type FaultEffect struct {
	RequestsBefore int64   `json:"requests_before"`
	RequestsDuring int64   `json:"requests_during"`
	P99BeforeMS    float64 `json:"p99_before_ms"`
	P99DuringMS    float64 `json:"p99_during_ms"`
	P99Ratio       float64 `json:"p99_ratio"`
}

// TruthFleet describes the fleet with every join key the telemetry uses.
type TruthFleet struct {
	Namespace string        `json:"namespace"`
	Hosts     []TruthHost   `json:"hosts"`
	Engines   []TruthEngine `json:"engines"`
}

// TruthHost is one host and its GPUs.
type TruthHost struct {
	Name string     `json:"name"`
	GPU  string     `json:"gpu"`
	GPUs []TruthGPU `json:"gpus"`
}

// TruthGPU is one GPU as DCGM labels it.
type TruthGPU struct {
	Index    int    `json:"index"`
	UUID     string `json:"uuid"`
	PCIBusID string `json:"pci_bus_id"`
	Pod      string `json:"pod,omitempty"`
}

// TruthEngine is one engine (pod).
type TruthEngine struct {
	Pod        string   `json:"pod"`
	Host       string   `json:"host"`
	Model      string   `json:"model"`
	Service    string   `json:"service"`
	Engine     string   `json:"engine"`
	Instance   string   `json:"instance"`
	GPUs       []string `json:"gpus"`
	TP         int      `json:"tp"`
	SpanFormat string   `json:"span_format"` // vllm | sglang
	KVBlocks   int      `json:"kv_blocks"`
}

// RunStats is what the run produced.
type RunStats struct {
	Requests     int64        `json:"requests"`
	Errors       int64        `json:"errors"`
	Rejected     int64        `json:"rejected"`
	Spans        int64        `json:"spans"`
	StepSpans    int64        `json:"step_spans"`
	MetricPoints int64        `json:"metric_points"`
	Preemptions  int64        `json:"preemptions"`
	XIDEvents    int64        `json:"xid_events"`
	Models       []ModelStats `json:"models"`
}

// ModelStats are latency quantiles of one model over the run (log-bucket
// sketch, 2% resolution), in milliseconds.
type ModelStats struct {
	Model    string  `json:"model"`
	Requests int64   `json:"requests"`
	TTFTP50  float64 `json:"ttft_p50_ms"`
	TTFTP99  float64 `json:"ttft_p99_ms"`
	TPOTP50  float64 `json:"tpot_p50_ms"`
	TPOTP99  float64 `json:"tpot_p99_ms"`
	E2EP50   float64 `json:"e2e_p50_ms"`
	E2EP99   float64 `json:"e2e_p99_ms"`
	QueueP50 float64 `json:"queue_p50_ms"`
	QueueP99 float64 `json:"queue_p99_ms"`
}

// WriteJSON writes t indented.
func (t *Truth) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(t)
}

func engineEntity(e *engine) Entity {
	return Entity{Model: e.m.spec.Name, Service: e.m.service, Host: e.host.name, Engine: "0", Pod: e.pod}
}

func (s *sim) truth() *Truth {
	t := &Truth{
		Version:   TruthVersion,
		Scenario:  "baseline",
		Seed:      s.cfg.Seed,
		Start:     time.Unix(0, s.startNs).UTC(),
		End:       time.Unix(0, s.startNs+s.end).UTC(),
		DurationS: secs(s.end),
		RateScale: s.cfg.RateScale,
		Faults:    []TruthFault{},
		Decoys:    []TruthFault{},
	}
	if sc := s.cfg.Scenario; sc != nil {
		t.Scenario, t.ScenarioFile, t.Description = sc.Name, sc.file, sc.Description
	}
	for _, fl := range s.faults {
		tf := TruthFault{
			Cause:     fl.spec.Cause,
			Target:    fl.spec.Target,
			Affected:  []Entity{},
			Onset:     time.Unix(0, s.startNs+fl.onset).UTC(),
			End:       time.Unix(0, s.startNs+fl.end).UTC(),
			OnsetS:    secs(fl.onset),
			EndS:      secs(fl.end),
			Magnitude: fl.spec.Magnitude,
			Note:      fl.spec.Note,
		}
		list := causes
		if fl.decoy {
			list = decoyKinds
		}
		c, _ := lookupCause(list, fl.spec.Cause)
		tf.MagnitudeMeaning = c.Magnitude
		if fl.spec.Cause == "gpu.xid_error" {
			tf.XID = fl.spec.XID
			if tf.XID == 0 {
				tf.XID = 13
			}
			if fl.effectsEnd > 0 && fl.effectsEnd < fl.end {
				tf.EffectsEnd = time.Unix(0, s.startNs+fl.effectsEnd).UTC()
			}
		}
		rt := fl.target
		switch rt.kind {
		case "model":
			tf.Entity = Entity{Model: rt.model.spec.Name, Service: rt.model.service}
		case "host":
			tf.Entity = Entity{Host: rt.host.name}
		case "engine":
			tf.Entity = engineEntity(rt.engines[0])
		case "gpu":
			tf.Entity = engineEntity(rt.engines[0])
			tf.Entity.GPU = rt.gpus[0].uuid
		}
		gpuLevel := rt.kind == "gpu" || rt.kind == "host"
		if gpuLevel {
			for _, g := range rt.gpus {
				if g.engine == nil {
					continue
				}
				en := engineEntity(g.engine)
				en.GPU = g.uuid
				tf.Affected = append(tf.Affected, en)
			}
		} else {
			for _, e := range rt.engines {
				tf.Affected = append(tf.Affected, engineEntity(e))
			}
		}
		if !fl.decoy {
			ef := &FaultEffect{RequestsBefore: fl.before.n, RequestsDuring: fl.during.n,
				P99BeforeMS: fl.before.quantile(0.99), P99DuringMS: fl.during.quantile(0.99)}
			if ef.P99BeforeMS > 0 && ef.P99DuringMS > 0 {
				ef.P99Ratio = math.Round(ef.P99DuringMS/ef.P99BeforeMS*1000) / 1000
			}
			tf.Effect = ef
		}
		if fl.decoy {
			t.Decoys = append(t.Decoys, tf)
		} else {
			t.Faults = append(t.Faults, tf)
		}
	}
	f := s.f
	t.Fleet.Namespace = f.namespace
	for _, h := range f.hosts {
		th := TruthHost{Name: h.name, GPU: h.kind.Name}
		for _, g := range h.gpus {
			tg := TruthGPU{Index: g.local, UUID: g.uuid, PCIBusID: g.pciBusID}
			if g.engine != nil {
				tg.Pod = g.engine.pod
			}
			th.GPUs = append(th.GPUs, tg)
		}
		t.Fleet.Hosts = append(t.Fleet.Hosts, th)
	}
	for _, e := range f.engines {
		te := TruthEngine{
			Pod: e.pod, Host: e.host.name, Model: e.m.spec.Name, Service: e.m.service, Engine: "0",
			Instance: e.host.name + ":" + strconv.Itoa(e.port), TP: e.m.spec.TP, SpanFormat: "vllm", KVBlocks: e.blocks,
		}
		if e.sglang {
			te.SpanFormat = "sglang"
		}
		for _, g := range e.gpus {
			te.GPUs = append(te.GPUs, g.uuid)
		}
		t.Fleet.Engines = append(t.Fleet.Engines, te)
	}
	t.Stats = s.stats.export()
	return t
}

// --- run statistics ---------------------------------------------------------

type runStats struct {
	requests, errors, rejected int64
	spans, stepSpans, points   int64
	preemptions, xids          int64
	ttft, tpot, e2e, queue     []sketch // per model
	modelReqs                  []int64
	modelNames                 []string
}

func newRunStats(f *fleet) *runStats {
	n := len(f.models)
	st := &runStats{
		ttft: make([]sketch, n), tpot: make([]sketch, n), e2e: make([]sketch, n), queue: make([]sketch, n),
		modelReqs: make([]int64, n),
	}
	for _, m := range f.models {
		st.modelNames = append(st.modelNames, m.spec.Name)
	}
	return st
}

func (st *runStats) observe(r *request, end int64, failed bool) {
	st.requests++
	if failed {
		st.errors++
		return
	}
	i := r.m.idx
	st.modelReqs[i]++
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	if r.firstTok >= 0 {
		st.ttft[i].add(ms(r.firstTok - r.arrival))
		if r.generated > 1 {
			st.tpot[i].add(ms(r.lastTok-r.firstTok) / float64(r.generated-1))
		}
	}
	st.e2e[i].add(ms(end - r.arrival))
	if r.scheduled >= 0 {
		st.queue[i].add(ms(r.scheduled - r.queued))
	}
}

func (st *runStats) export() RunStats {
	rs := RunStats{
		Requests: st.requests, Errors: st.errors, Rejected: st.rejected,
		Spans: st.spans, StepSpans: st.stepSpans, MetricPoints: st.points,
		Preemptions: st.preemptions, XIDEvents: st.xids,
		Models: []ModelStats{},
	}
	for i, name := range st.modelNames {
		rs.Models = append(rs.Models, ModelStats{
			Model: name, Requests: st.modelReqs[i],
			TTFTP50: st.ttft[i].quantile(0.5), TTFTP99: st.ttft[i].quantile(0.99),
			TPOTP50: st.tpot[i].quantile(0.5), TPOTP99: st.tpot[i].quantile(0.99),
			E2EP50: st.e2e[i].quantile(0.5), E2EP99: st.e2e[i].quantile(0.99),
			QueueP50: st.queue[i].quantile(0.5), QueueP99: st.queue[i].quantile(0.99),
		})
	}
	return rs
}

// sketch is a fixed log-bucket histogram of milliseconds from 0.01 ms,
// 2% per bucket: bounded memory for any run length.
type sketch struct {
	n      int64
	counts []int64
}

const (
	sketchMin     = 0.01
	sketchGrowth  = 1.02
	sketchBuckets = 1100
)

func (k *sketch) add(v float64) {
	if k.counts == nil {
		k.counts = make([]int64, sketchBuckets)
	}
	i := 0
	if v > sketchMin {
		i = int(math.Log(v/sketchMin) / math.Log(sketchGrowth))
	}
	i = min(max(i, 0), sketchBuckets-1)
	k.counts[i]++
	k.n++
}

func (k *sketch) quantile(q float64) float64 {
	if k.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(k.n)))
	var c int64
	for i, n := range k.counts {
		c += n
		if c >= rank {
			v := sketchMin * math.Pow(sketchGrowth, float64(i)+0.5)
			return math.Round(v*100) / 100
		}
	}
	return 0
}
