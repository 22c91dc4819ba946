package causal

import "github.com/tailcause/tailcause/causal/causaltest"

// The synthetic fleet of package causaltest under the names this package's
// tests use (it is shared with causal/incident's tests, so it lives there).
type (
	synthScenario = causaltest.Scenario
	synthFault    = causaltest.Fault
)

var (
	insertSynth      = causaltest.Insert
	insertGPUSamples = causaltest.InsertGPUSamples
	sweepFleet       = causaltest.Fleet
	firstDiff        = causaltest.FirstDiff
	hostName         = causaltest.HostName
	gpuName          = causaltest.GPUName
	podName          = causaltest.PodName
)
