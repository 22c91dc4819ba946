package eval

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tailcause/tailcause/causal"
	"github.com/tailcause/tailcause/lab/faultlab"
)

// Level is the level a fault acts on, and so the entity a culprit must
// name to be right about it.
type Level string

// The levels.
const (
	LevelModel  Level = "model"  // a whole model: workload shifts, arrival surges, model-wide engine faults
	LevelHost   Level = "host"   // every engine of one host
	LevelEngine Level = "engine" // one engine (pod)
	LevelGPU    Level = "gpu"    // one GPU
)

// FaultLevel is the level of a fault: its target's kind.
func FaultLevel(f faultlab.TruthFault) Level {
	t := f.Target
	switch {
	case t.Model != "":
		return LevelModel
	case t.Host != "":
		return LevelHost
	case t.GPU != "":
		return LevelGPU
	default:
		return LevelEngine
	}
}

// A Scorer decides whether a ranked culprit names an injected fault. The
// rules, strict and without fallbacks:
//
//  1. the culprit's cause equals the fault's;
//  2. every entity field present on both sides agrees (model, service,
//     host, GPU UUID, engine, pod);
//  3. the culprit carries the fields that identify the fault's entity: the
//     model for a model-level fault, the host for a host-level fault, the
//     GPU UUID or the pod for a GPU- or engine-level fault;
//  4. the culprit names exactly the entity the fault acts on: the GPUs of
//     the fleet's engines that its placement fields (host, GPU UUID, pod,
//     engine; and model and service for a model-level fault) select are the
//     GPUs the fault acts on — a culprit on one pod of a model-wide fault,
//     on one GPU of a slow host or of a tensor-parallel engine, or on a
//     whole tensor-parallel engine for a fault of one of its GPUs, is wrong.
//     (A pod that runs on one GPU is that GPU, so naming either identifies
//     it.) Below the model level, the model and service a culprit carries
//     are the scope it was found in: they must select some of those GPUs,
//     not all (a slow host serving two models is named right from either
//     model's breach).
type Scorer struct {
	fleet []faultlab.TruthEngine
}

// NewScorer returns a scorer for the fleet of truth.
func NewScorer(truth *faultlab.Truth) *Scorer {
	return &Scorer{fleet: truth.Fleet.Engines}
}

// Match reports whether culprit c names fault f, and if not, why not.
func (s *Scorer) Match(c causal.Culprit, f faultlab.TruthFault) (bool, string) {
	if string(c.Cause) != f.Cause {
		return false, fmt.Sprintf("cause %s, want %s", c.Cause, f.Cause)
	}
	return s.EntityMatch(c.Entity, f)
}

// EntityMatch applies rules 2–4 to an entity.
func (s *Scorer) EntityMatch(en causal.Entity, f faultlab.TruthFault) (bool, string) {
	te := f.Entity
	for _, p := range [][3]string{
		{"model", en.Model, te.Model}, {"service", en.Service, te.Service}, {"host", en.Host, te.Host},
		{"gpu", en.GPU, te.GPU}, {"engine", en.Engine, te.Engine}, {"pod", en.Pod, te.Pod},
	} {
		if p[1] != "" && p[2] != "" && p[1] != p[2] {
			return false, fmt.Sprintf("%s %q, want %q", p[0], p[1], p[2])
		}
	}
	lvl := FaultLevel(f)
	switch lvl {
	case LevelModel:
		if en.Model == "" {
			return false, "a model-level fault: the culprit names no model"
		}
	case LevelHost:
		if en.Host == "" {
			return false, "a host-level fault: the culprit names no host"
		}
	case LevelGPU, LevelEngine:
		if en.GPU == "" && en.Pod == "" {
			return false, fmt.Sprintf("a %s-level fault: the culprit names neither GPU nor pod", lvl)
		}
	}
	want := s.actedOn(f)
	inScope := s.selected(en)
	if !slices.ContainsFunc(inScope, func(g string) bool { return slices.Contains(want, g) }) {
		return false, "the culprit's entity selects none of the GPUs the fault acts on"
	}
	got := inScope
	if lvl != LevelModel {
		place := en
		place.Model, place.Service = "", ""
		got = s.selected(place)
	}
	if !slices.Equal(got, want) {
		what := "more"
		if len(got) < len(want) {
			what = "fewer"
		}
		return false, fmt.Sprintf("the culprit names %d GPU(s), the %s-level fault acts on %d (%s than the fault's entity)", len(got), lvl, len(want), what)
	}
	return true, ""
}

// Touches says whether an entity (a breach's scope and entity, say)
// selects any GPU the fault acts on.
func (s *Scorer) Touches(en causal.Entity, f faultlab.TruthFault) bool {
	want := s.actedOn(f)
	for _, g := range s.selected(en) {
		if slices.Contains(want, g) {
			return true
		}
	}
	return false
}

// selected lists the GPUs (of engines) whose labels match every field of
// en, sorted.
func (s *Scorer) selected(en causal.Entity) []string {
	var out []string
	for _, e := range s.fleet {
		if (en.Model != "" && en.Model != e.Model) || (en.Service != "" && en.Service != e.Service) ||
			(en.Host != "" && en.Host != e.Host) || (en.Pod != "" && en.Pod != e.Pod) ||
			(en.Engine != "" && en.Engine != e.Engine) {
			continue
		}
		for _, g := range e.GPUs {
			if en.GPU == "" || en.GPU == g {
				out = append(out, g)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// actedOn lists the GPUs (of engines) the fault acts on, sorted.
func (s *Scorer) actedOn(f faultlab.TruthFault) []string {
	var out []string
	for _, a := range f.Affected {
		if a.GPU != "" {
			out = append(out, a.GPU)
			continue
		}
		for _, e := range s.fleet {
			if e.Pod == a.Pod {
				out = append(out, e.GPUs...)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Hit is the outcome of scoring one ranking.
type Hit struct {
	// Rank is the 1-based rank of the first culprit naming a fault (cause
	// and entity), 0 when none does.
	Rank int `json:"rank"`
	// CauseRank is the rank of the first culprit with a fault's cause,
	// whatever its entity, 0 when none.
	CauseRank int `json:"cause_rank"`
	// Why is why the top culprit is not right ("" when it is).
	Why string `json:"why,omitempty"`
}

// At reports a hit within the first k (cause and entity).
func (h Hit) At(k int) bool { return h.Rank > 0 && h.Rank <= k }

// CauseAt reports a cause-level hit within the first k.
func (h Hit) CauseAt(k int) bool { return h.CauseRank > 0 && h.CauseRank <= k }

// Score scores a ranking of culprits (best first) against the faults of
// truth: the first culprit that names a fault.
func (s *Scorer) Score(ranked []causal.Culprit, faults []faultlab.TruthFault) Hit {
	var h Hit
	for i, c := range ranked {
		for _, f := range faults {
			if h.CauseRank == 0 && string(c.Cause) == f.Cause {
				h.CauseRank = i + 1
			}
			if ok, _ := s.Match(c, f); ok && h.Rank == 0 {
				h.Rank = i + 1
			}
		}
	}
	if h.Rank != 1 {
		switch {
		case len(ranked) == 0:
			h.Why = "no culprit"
		case len(faults) > 0:
			var whys []string
			for _, f := range faults {
				_, why := s.Match(ranked[0], f)
				whys = append(whys, why)
			}
			h.Why = strings.Join(whys, "; ")
		}
	}
	return h
}

// ScoreCauses scores a ranking that names causes only (the baselines): a
// cause-level hit; Rank stays 0.
func ScoreCauses(ranked []causal.Cause, faults []faultlab.TruthFault) Hit {
	var h Hit
	for i, c := range ranked {
		for _, f := range faults {
			if h.CauseRank == 0 && string(c) == f.Cause {
				h.CauseRank = i + 1
			}
		}
	}
	return h
}

// Flatten is the ranking a fleet-wide answer gives: the culprits of its
// breaches in order (the most severe breach's culprits first, then the
// next breach's), each cause and entity once, at its best rank.
func Flatten(breaches []*causal.Analysis) []causal.Culprit {
	type key struct {
		c causal.Cause
		e causal.Entity
	}
	seen := map[key]bool{}
	var out []causal.Culprit
	for _, an := range breaches {
		for _, c := range an.Incident.Culprits {
			k := key{c.Cause, c.Entity}
			if seen[k] {
				continue
			}
			seen[k] = true
			out = append(out, c)
		}
	}
	return out
}
