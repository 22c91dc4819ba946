package schemas

// Cause is a culprit cause id of the taxonomy: what a ranked culprit says
// made the tail slow. The taxonomy is declared here once; the causal stage
// estimates these causes, the fault lab injects them, and the payload
// schemas (culprits.v1.schema.json, openapi.json) enumerate them
// (TestTaxonomyMatchesSchemas keeps the enums in step).
type Cause string

// The culprit taxonomy. A ranked culprit names one of these and the entity it
// acts on.
const (
	CauseKVPreemption        Cause = "kv_cache.preemption"
	CauseQueueSaturation     Cause = "queue.saturation"
	CauseLongPrompts         Cause = "workload.long_prompts"
	CauseLongOutputs         Cause = "workload.long_outputs"
	CausePrefixMiss          Cause = "prefix_cache.miss"
	CausePrefillInterference Cause = "engine.prefill_interference"
	CauseThermalThrottle     Cause = "gpu.thermal_throttle"
	CausePowerCap            Cause = "gpu.power_cap"
	CauseXIDError            Cause = "gpu.xid_error"
	CausePCIeContention      Cause = "gpu.pcie_contention"
	CauseMemoryBandwidth     Cause = "gpu.memory_bandwidth"
	CauseEntityDegraded      Cause = "entity.degraded"
)

// Causes returns the taxonomy in its canonical order (the order of the
// schemas' enums and of the fault lab's draws). The slice is new on each
// call; the caller owns it.
func Causes() []Cause {
	return []Cause{
		CauseKVPreemption, CauseQueueSaturation, CauseLongPrompts, CauseLongOutputs,
		CausePrefixMiss, CausePrefillInterference, CauseThermalThrottle, CausePowerCap,
		CauseXIDError, CausePCIeContention, CauseMemoryBandwidth, CauseEntityDegraded,
	}
}

// Valid reports whether c is a taxonomy cause id.
func (c Cause) Valid() bool {
	for _, k := range Causes() {
		if c == k {
			return true
		}
	}
	return false
}
