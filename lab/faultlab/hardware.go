package faultlab

import (
	"fmt"
	"slices"
	"strings"
)

// GPUKind describes one GPU product as the simulator needs it. Numbers are
// the public datasheet values of the SXM parts; the efficiency factors that
// turn peaks into achieved rates live in the step-cost model (engine.go).
type GPUKind struct {
	Name          string  // short name used in configs: "H100", "H200"
	ModelName     string  // DCGM modelName label
	MemMiB        float64 // framebuffer size
	HBMBytesPerS  float64 // peak DRAM bandwidth
	BF16FLOPS     float64 // dense peak
	TDPW          float64 // board power limit
	IdleW         float64
	MaxSMClockMHz float64
	IdleSMClockHz float64 // MHz shown by DCGM when idle
	MemClockMHz   float64
	PCIeBytesPerS float64 // one direction, Gen5 x16
	NVLinkBytesPS float64 // one direction, per GPU
	SlowdownC     float64 // software thermal slowdown threshold
	HWSlowdownC   float64 // hardware thermal slowdown threshold
	InletC        float64 // inlet air temperature
	ThermalRCPerW float64 // steady-state °C above inlet per watt
	ThermalTauS   float64 // thermal time constant
}

// ModelArch describes a transformer well enough to cost its steps.
type ModelArch struct {
	Name        string
	Params      float64 // parameter count
	Layers      int
	Hidden      int
	KVHeads     int
	HeadDim     int
	MaxModelLen int
}

// WeightBytes is the bf16 weight footprint of the whole model.
func (m ModelArch) WeightBytes() float64 { return 2 * m.Params }

// KVBytesPerToken is the bf16 K+V footprint of one token over all layers.
func (m ModelArch) KVBytesPerToken() float64 {
	return float64(2 * m.Layers * m.KVHeads * m.HeadDim * 2)
}

var gpuKinds = []GPUKind{
	{
		Name: "H100", ModelName: "NVIDIA H100 80GB HBM3", MemMiB: 81559,
		HBMBytesPerS: 3.35e12, BF16FLOPS: 989e12, TDPW: 700, IdleW: 72,
		MaxSMClockMHz: 1980, IdleSMClockHz: 345, MemClockMHz: 2619,
		PCIeBytesPerS: 64e9, NVLinkBytesPS: 450e9,
		SlowdownC: 87, HWSlowdownC: 92, InletC: 27, ThermalRCPerW: 0.062, ThermalTauS: 40,
	},
	{
		Name: "H200", ModelName: "NVIDIA H200", MemMiB: 143771,
		HBMBytesPerS: 4.8e12, BF16FLOPS: 989e12, TDPW: 700, IdleW: 76,
		MaxSMClockMHz: 1980, IdleSMClockHz: 345, MemClockMHz: 3201,
		PCIeBytesPerS: 64e9, NVLinkBytesPS: 450e9,
		SlowdownC: 87, HWSlowdownC: 92, InletC: 27, ThermalRCPerW: 0.060, ThermalTauS: 45,
	},
}

var modelArchs = []ModelArch{
	{Name: "llama-3.1-8b", Params: 8.03e9, Layers: 32, Hidden: 4096, KVHeads: 8, HeadDim: 128, MaxModelLen: 32768},
	{Name: "qwen2.5-32b", Params: 32.8e9, Layers: 64, Hidden: 5120, KVHeads: 8, HeadDim: 128, MaxModelLen: 32768},
	{Name: "llama-3.1-70b", Params: 70.6e9, Layers: 80, Hidden: 8192, KVHeads: 8, HeadDim: 128, MaxModelLen: 131072},
	{Name: "mistral-7b", Params: 7.25e9, Layers: 32, Hidden: 4096, KVHeads: 8, HeadDim: 128, MaxModelLen: 32768},
}

// GPUKinds lists the GPU products the simulator knows, in a fixed order.
func GPUKinds() []GPUKind { return slices.Clone(gpuKinds) }

// ModelArchs lists the model architectures the simulator knows.
func ModelArchs() []ModelArch { return slices.Clone(modelArchs) }

func lookupGPU(name string) (GPUKind, error) {
	for _, g := range gpuKinds {
		if g.Name == name {
			return g, nil
		}
	}
	names := make([]string, len(gpuKinds))
	for i, g := range gpuKinds {
		names[i] = g.Name
	}
	return GPUKind{}, fmt.Errorf("unknown GPU %q (known: %s)", name, strings.Join(names, ", "))
}

func lookupArch(name string) (ModelArch, error) {
	for _, m := range modelArchs {
		if m.Name == name {
			return m, nil
		}
	}
	names := make([]string, len(modelArchs))
	for i, m := range modelArchs {
		names[i] = m.Name
	}
	return ModelArch{}, fmt.Errorf("unknown model %q (known: %s)", name, strings.Join(names, ", "))
}
