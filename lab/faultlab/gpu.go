package faultlab

import "math"

// DCGM clock event reason bits (DCGM_FI_DEV_CLOCKS_EVENT_REASONS).
const (
	reasonGPUIdle     = 0x1
	reasonSWPowerCap  = 0x4
	reasonHWSlowdown  = 0x8
	reasonSWThermal   = 0x20
	reasonHWThermal   = 0x40
	reasonHWPowerBrak = 0x80
)

// gpu is one device: identity (fleet.go) and its thermal/power state.
//
// Physics, per tick: board power follows the engine's activity (busy time,
// tensor-core time, DRAM traffic) and the square of the SM clock; the
// temperature relaxes toward inlet + R·P with time constant τ; a power
// governor lowers the clock to hold the power limit (reason 0x4), a thermal
// governor lowers it while the die is above the slowdown threshold (0x20,
// and 0x40 above the hardware threshold, which also halves the clock). The
// engine's step cost reads the resulting clock, the DRAM share left by
// co-located work and the PCIe load, so each fault acts on this GPU only.
type gpu struct {
	idx      int
	local    int
	host     *host
	kind     GPUKind
	uuid     string
	pciBusID string
	device   string
	engine   *engine
	rng      *randSrc

	clock      float64 // active SM clock, MHz
	thermalCap float64 // MHz
	tempC      float64
	powerW     float64
	util       float64 // 0-1 over the last tick
	dramActive float64 // 0-1
	pcieTx     float64 // bytes/s
	pcieRx     float64
	reasons    uint64
	xid        int
	fbUsedMiB  float64

	// fault and decoy modifiers
	thermalMul    float64 // multiplier on thermal resistance (cooling loss)
	powerLimit    float64 // W
	brake         bool
	neighbourPCIe float64 // share of the link used by a neighbour
	neighbourDRAM float64 // share of DRAM bandwidth used by co-located work
	decoyInletC   float64 // inlet temperature offset
	decoyPCIe     float64 // harmless share of PCIe traffic
}

func (g *gpu) init() {
	g.clock = g.kind.MaxSMClockMHz
	g.thermalCap = g.kind.MaxSMClockMHz
	g.thermalMul = 1
	g.powerLimit = g.kind.TDPW
	g.tempC = g.kind.InletC + 8
	g.powerW = g.kind.IdleW
	g.fbUsedMiB = math.Round(0.9*g.kind.MemMiB - 310)
}

// pcieLoad is the utilisation of the GPU's PCIe link by others.
func (g *gpu) pcieLoad() float64 { return math.Min(0.99, g.neighbourPCIe+g.decoyPCIe) }

func (g *gpu) tick(dt float64) {
	k := g.kind
	var busy, tensor, dram, in, out float64
	if e := g.engine; e != nil {
		busy = math.Min(1, e.tickBusy/dt)
		tensor = math.Min(1, e.tickTensor/dt)
		dram = math.Min(1, e.tickDRAM/(k.HBMBytesPerS*dt))
		in, out = e.tickPCIeIn/dt, e.tickPCIeOut/dt
	}
	g.util = busy
	g.dramActive = math.Min(1, dram+g.neighbourDRAM)
	// Background host traffic (telemetry, NCCL bootstrap, page migration).
	bg := 2e6 * (1 + 0.2*g.rng.NormFloat64())
	share := g.neighbourPCIe + g.decoyPCIe
	g.pcieRx = math.Max(0, in+bg+share*k.PCIeBytesPerS*0.55)
	g.pcieTx = math.Max(0, out+bg+share*k.PCIeBytesPerS*0.45)

	activity := 0.30*busy + 0.45*tensor + 0.25*dram + 0.35*g.neighbourDRAM
	dyn := (k.TDPW - k.IdleW) * math.Min(1, activity)
	reasons := uint64(0)
	fPow := 1.0
	if k.IdleW+dyn > g.powerLimit && dyn > 0 {
		fPow = math.Sqrt(math.Max(0.05, (g.powerLimit-k.IdleW)/dyn))
		reasons |= reasonSWPowerCap
	}
	f := math.Min(k.MaxSMClockMHz*fPow, g.thermalCap)
	p := k.IdleW + dyn*(f/k.MaxSMClockMHz)*(f/k.MaxSMClockMHz)

	r := k.ThermalRCPerW * g.thermalMul
	teq := k.InletC + g.decoyInletC + r*p
	g.tempC += (teq - g.tempC) * (1 - math.Exp(-dt/k.ThermalTauS))
	switch {
	case g.tempC > k.SlowdownC:
		g.thermalCap -= 18 * (g.tempC - k.SlowdownC) * dt
	case g.tempC < k.SlowdownC-1:
		g.thermalCap += 40 * dt
	}
	g.thermalCap = math.Max(0.3*k.MaxSMClockMHz, math.Min(k.MaxSMClockMHz, g.thermalCap))
	if g.thermalCap < k.MaxSMClockMHz-1 {
		reasons |= reasonSWThermal
	}
	f = math.Min(k.MaxSMClockMHz*fPow, g.thermalCap)
	if g.tempC > k.HWSlowdownC {
		reasons |= reasonHWThermal | reasonHWSlowdown
		f = math.Min(f, 0.5*k.MaxSMClockMHz)
	}
	if g.brake {
		reasons |= reasonHWPowerBrak | reasonHWSlowdown
		f = math.Min(f, 0.5*k.MaxSMClockMHz)
	}
	// Clocks move in 15 MHz bins.
	g.clock = math.Max(0.25*k.MaxSMClockMHz, math.Floor(f/15)*15)
	g.powerW = k.IdleW + dyn*(g.clock/k.MaxSMClockMHz)*(g.clock/k.MaxSMClockMHz)
	g.powerW *= 1 + 0.01*g.rng.NormFloat64()
	if busy < 0.02 && g.neighbourDRAM == 0 {
		reasons |= reasonGPUIdle
	}
	g.reasons = reasons
}

// smClockShown is what DCGM reports: the idle clock when nothing runs.
func (g *gpu) smClockShown() float64 {
	if g.reasons&reasonGPUIdle != 0 {
		return g.kind.IdleSMClockHz
	}
	return g.clock
}
