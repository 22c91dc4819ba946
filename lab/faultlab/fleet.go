package faultlab

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"strings"
)

// fleet is the static shape of the simulated fleet: identities and placement.
// Runtime state hangs off the same structs (engine.go, gpu.go).
type fleet struct {
	namespace string
	hosts     []*host
	gpus      []*gpu
	models    []*model
	engines   []*engine
}

type host struct {
	idx     int
	name    string
	kind    GPUKind
	gpus    []*gpu
	engines []*engine
}

type model struct {
	idx     int
	spec    ModelSpec
	arch    ModelArch
	service string // service.name of its engines' spans
	engines []*engine
	rr      int // round-robin position of the router
}

// pciBusIDs follow the usual HGX H100/H200 8-GPU board layout.
var pciBusIDs = []string{"18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"}

func gpuUUID(hostName string, local int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("tailcause-faultlab/%s/%d", hostName, local)))
	h := fmt.Sprintf("%x", sum[:16])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func slug(s string) string {
	return strings.NewReplacer(".", "-", "_", "-", "/", "-").Replace(strings.ToLower(s))
}

// buildFleet validates spec and lays out hosts, GPUs and engines.
// stepShare picks which engines export SGLang-style step spans: engine i
// does when floor((i+1)·share) > floor(i·share), spreading them evenly.
func buildFleet(spec FleetSpec, stepShare float64) (*fleet, error) {
	f := &fleet{namespace: spec.Namespace}
	if f.namespace == "" {
		f.namespace = "llm-serving"
	}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if len(spec.Hosts) == 0 {
		bad("hosts: none")
	}
	if len(spec.Models) == 0 {
		bad("models: none")
	}
	byName := map[string]*host{}
	for i, hs := range spec.Hosts {
		kind, err := lookupGPU(hs.GPU)
		if err != nil {
			bad("hosts[%d].gpu: %v", i, err)
			continue
		}
		switch {
		case hs.Name == "":
			bad("hosts[%d].name: empty", i)
			continue
		case byName[hs.Name] != nil:
			bad("hosts[%d].name: duplicate host %q", i, hs.Name)
			continue
		case hs.GPUs < 1 || hs.GPUs > len(pciBusIDs):
			bad("hosts[%d].gpus: %d not in [1, %d]", i, hs.GPUs, len(pciBusIDs))
			continue
		}
		h := &host{idx: len(f.hosts), name: hs.Name, kind: kind}
		for l := 0; l < hs.GPUs; l++ {
			g := &gpu{
				idx: len(f.gpus), host: h, local: l, kind: kind,
				uuid:     gpuUUID(hs.Name, l),
				pciBusID: "00000000:" + pciBusIDs[l] + ":00.0",
				device:   fmt.Sprintf("nvidia%d", l),
			}
			h.gpus = append(h.gpus, g)
			f.gpus = append(f.gpus, g)
		}
		byName[hs.Name] = h
		f.hosts = append(f.hosts, h)
	}
	seenModel := map[string]bool{}
	for i, ms := range spec.Models {
		arch, err := lookupArch(ms.Name)
		if err != nil {
			bad("models[%d].name: %v", i, err)
			continue
		}
		if seenModel[ms.Name] {
			bad("models[%d].name: duplicate model %q", i, ms.Name)
			continue
		}
		seenModel[ms.Name] = true
		switch ms.TP {
		case 1, 2, 4, 8:
		default:
			bad("models[%d].tp: %d is not 1, 2, 4 or 8", i, ms.TP)
			continue
		}
		if ms.Engines < 1 {
			bad("models[%d].engines: %d is not positive", i, ms.Engines)
			continue
		}
		if !(ms.Rate > 0) || math.IsInf(ms.Rate, 0) {
			bad("models[%d].rate: %v is not a positive rate", i, ms.Rate)
		}
		if ms.MaxBatchedTokens < 0 || ms.MaxNumSeqs < 0 {
			bad("models[%d]: negative max_batched_tokens or max_num_seqs", i)
		}
		if ms.MaxModelLen != 0 && (ms.MaxModelLen < 1024 || ms.MaxModelLen > arch.MaxModelLen) {
			bad("models[%d].max_model_len: %d not in [1024, %d]", i, ms.MaxModelLen, arch.MaxModelLen)
		}
		if ms.MaxModelLen != 0 {
			arch.MaxModelLen = ms.MaxModelLen
		}
		if len(ms.Workload) == 0 {
			bad("models[%d].workload: empty", i)
		}
		for j, st := range ms.Workload {
			if st.Trace == "" {
				bad("models[%d].workload[%d].trace: empty", i, j)
			}
			if !(st.Share > 0) || math.IsInf(st.Share, 0) {
				bad("models[%d].workload[%d].share: %v is not positive", i, j, st.Share)
			}
			if st.SystemPromptTokens < 0 || st.SystemPromptTokens > arch.MaxModelLen/2 {
				bad("models[%d].workload[%d].system_prompt_tokens: %d not in [0, %d]", i, j, st.SystemPromptTokens, arch.MaxModelLen/2)
			}
		}
		if ms.MaxBatchedTokens == 0 {
			ms.MaxBatchedTokens = 2048
		}
		if ms.MaxNumSeqs == 0 {
			ms.MaxNumSeqs = 256
		}
		m := &model{idx: len(f.models), spec: ms, arch: arch, service: ms.Name}
		f.models = append(f.models, m)
		candidates := f.hosts
		if len(ms.Hosts) > 0 {
			candidates = nil
			for _, hn := range ms.Hosts {
				h := byName[hn]
				if h == nil {
					bad("models[%d].hosts: no host %q", i, hn)
					continue
				}
				candidates = append(candidates, h)
			}
		}
		for e := 0; e < ms.Engines; e++ {
			placed, tooBig := false, false
			for _, h := range candidates {
				gs := freeRun(h, ms.TP)
				if gs == nil {
					continue
				}
				weightsPerGPU := arch.WeightBytes() / float64(ms.TP)
				if weightsPerGPU > 0.8*h.kind.MemMiB*(1<<20) {
					bad("models[%d]: %s does not fit %s GPUs at tp %d", i, ms.Name, h.kind.Name, ms.TP)
					tooBig = true
					break
				}
				eng := newEngine(len(f.engines), m, h, gs, len(h.engines))
				for _, g := range gs {
					g.engine = eng
				}
				h.engines = append(h.engines, eng)
				m.engines = append(m.engines, eng)
				f.engines = append(f.engines, eng)
				placed = true
				break
			}
			if tooBig {
				break
			}
			if !placed {
				bad("models[%d]: no room for engine %d of %s (tp %d) on hosts %v", i, e, ms.Name, ms.TP, hostNames(candidates))
				break
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for i, e := range f.engines {
		e.sglang = stepShare >= 1 || math.Floor(float64(i+1)*stepShare) > math.Floor(float64(i)*stepShare)
	}
	return f, nil
}

func hostNames(hs []*host) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.name
	}
	return out
}

// freeRun returns the first tp consecutive unassigned GPUs of h, aligned to
// tp as NVLink/TP placement usually is, or nil.
func freeRun(h *host, tp int) []*gpu {
	for start := 0; start+tp <= len(h.gpus); start += tp {
		ok := true
		for _, g := range h.gpus[start : start+tp] {
			if g.engine != nil {
				ok = false
				break
			}
		}
		if ok {
			return h.gpus[start : start+tp]
		}
	}
	return nil
}

func (f *fleet) host(name string) *host {
	for _, h := range f.hosts {
		if h.name == name {
			return h
		}
	}
	return nil
}

func (f *fleet) model(name string) *model {
	for _, m := range f.models {
		if m.spec.Name == name {
			return m
		}
	}
	return nil
}

func (f *fleet) engineByPod(pod string) *engine {
	for _, e := range f.engines {
		if e.pod == pod {
			return e
		}
	}
	return nil
}

// gpuByRef resolves "host/index" or a GPU UUID.
func (f *fleet) gpuByRef(ref string) *gpu {
	for _, g := range f.gpus {
		if g.uuid == ref || fmt.Sprintf("%s/%d", g.host.name, g.local) == ref {
			return g
		}
	}
	return nil
}
