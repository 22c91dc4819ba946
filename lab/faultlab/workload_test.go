package faultlab

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBuiltinTraces(t *testing.T) {
	want := map[string]struct {
		n      int
		hashes bool
		rate   float64 // requests/s, roughly
	}{
		"azure-code":            {8819, false, 2.6},
		"azure-conv":            {19366, false, 5.4},
		"mooncake-conversation": {12031, true, 3.4},
		"mooncake-synthetic":    {3993, true, 3.9},
	}
	for _, name := range TraceNames() {
		tr, err := loadTrace(name)
		if err != nil {
			t.Fatal(err)
		}
		w := want[name]
		if len(tr.reqs) != w.n || (len(tr.hashes) > 0) != w.hashes {
			t.Errorf("%s: %d requests, %d hashes", name, len(tr.reqs), len(tr.hashes))
		}
		if r := tr.nativeRate(); math.Abs(r-w.rate)/w.rate > 0.1 {
			t.Errorf("%s: native rate %.2f/s, want ~%.1f", name, r, w.rate)
		}
	}
	// The attribution travels with the data.
	for _, f := range []string{"workloads/README.md", "workloads/LICENSE-azure-CC-BY-4.0.txt", "workloads/LICENSE-mooncake-Apache-2.0.txt"} {
		b, err := fs.ReadFile(WorkloadFiles(), f)
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	readme, _ := fs.ReadFile(WorkloadFiles(), "workloads/README.md")
	for _, s := range []string{"Splitwise", "Mooncake", "CC-BY 4.0", "Apache-2.0"} {
		if !bytes.Contains(readme, []byte(s)) {
			t.Errorf("README lacks %q", s)
		}
	}
}

func TestParseTraceErrors(t *testing.T) {
	cases := map[string]string{
		"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,12\n": "line 2: want 3 fields",
		"when,what\n": "want header",
		"{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 5}\n":         "line 1: want timestamp",
		"{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5}\n{oops\n": "line 2",
		"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,5,5\n":   "fewer than two requests",
	}
	for in, want := range cases {
		if _, err := parseTrace("x", []byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", in, err, want)
		}
	}
}

// An external trace given by path drives every model (the --trace flag).
func TestExternalTrace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mine.jsonl")
	var b strings.Builder
	for i := 0; i < 400; i++ {
		// one conversation in five continues the previous one's prefix
		ids := []int{i / 5 * 10, i/5*10 + 1, i/5*10 + 2}
		js, _ := json.Marshal(map[string]any{"timestamp": i * 250, "input_length": 1400, "output_length": 64, "hash_ids": ids})
		b.Write(js)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Duration = 3 * time.Minute
	cfg.TraceOverride = path
	c, tr := runCapture(t, cfg)
	for _, r := range c.reqs {
		if r.prompt != 1400 || (r.completion != 64 && !r.failed) {
			t.Fatalf("request %+v is not from the external trace", r)
		}
	}
	if tr.Stats.Requests < 1000 {
		t.Errorf("%d requests", tr.Stats.Requests)
	}
	cfg.TraceOverride = filepath.Join(dir, "missing.csv")
	if err := func() error { _, err := newSim(cfg.resolved(), nil); return err }(); err == nil || !strings.Contains(err.Error(), "missing.csv") {
		t.Errorf("missing trace: %v", err)
	}
}

// Rate scale multiplies arrivals; time compression replays faster.
func TestRateScaleAndCompression(t *testing.T) {
	count := func(mod func(*Config)) float64 {
		cfg := DefaultConfig()
		cfg.Duration = 10 * time.Minute
		mod(&cfg)
		cfg = cfg.resolved()
		s, err := newSim(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, st := range s.streams {
			for st.next < s.end {
				if st.next >= 0 { // not the warm-up
					n++
				}
				st.advance()
			}
		}
		return float64(n)
	}
	base := count(func(*Config) {})
	want := 0.0
	for _, m := range DefaultFleet().Models {
		want += m.Rate * 600
	}
	if math.Abs(base-want)/want > 0.15 {
		t.Errorf("rate scale 1: %v arrivals in 10m, want ~%v", base, want)
	}
	for _, s := range []float64{0.5, 2.5} {
		got := count(func(c *Config) { c.RateScale = s })
		if r := got / base; math.Abs(r-s)/s > 0.15 {
			t.Errorf("rate scale %v: ×%.2f arrivals", s, r)
		}
	}
	// Forcing compression 2 plays every trace twice as fast as recorded:
	// the arrival rate is the traces' native rates doubled.
	native := 0.0
	for _, m := range DefaultFleet().Models {
		for _, st := range m.Workload {
			tr, _ := loadTrace(st.Trace)
			native += tr.nativeRate() * 600
		}
	}
	got := count(func(c *Config) { c.TimeCompression = 2 })
	if math.Abs(got-2*native)/(2*native) > 0.15 {
		t.Errorf("compression 2: %v arrivals, want ~%v", got, 2*native)
	}
}

func TestTruthShape(t *testing.T) {
	cfg := scenarioConfig(t, "thermal_throttle_decoy", 5*time.Minute, 9)
	_, tr := runCapture(t, cfg)
	var buf bytes.Buffer
	if err := tr.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"truth_version", "scenario", "seed", "start", "end", "faults", "decoys", "fleet", "stats"} {
		if _, ok := m[k]; !ok {
			t.Errorf("truth lacks %q", k)
		}
	}
	f := tr.Faults[0]
	if f.Cause != "gpu.thermal_throttle" || !strings.HasPrefix(f.Entity.GPU, "GPU-") || f.Entity.Host != "node-1" ||
		f.Entity.Pod != "llama-3-1-8b-3" || f.Entity.Engine != "0" || f.Entity.Model != "llama-3.1-8b" {
		t.Errorf("fault entity %+v", f.Entity)
	}
	if got := f.End.Sub(f.Onset); got != 90*time.Second || f.Onset != tr.Start.Add(2*time.Minute) {
		t.Errorf("fault window %v–%v", f.Onset, f.End)
	}
	if len(tr.Decoys) != 2 || tr.Decoys[0].Cause != "gpu.pcie_traffic" {
		t.Errorf("decoys %+v", tr.Decoys)
	}
	if tr.Seed != 9 || tr.Scenario != "thermal_throttle_decoy" || len(tr.Fleet.Engines) != 11 || len(tr.Fleet.Hosts) != 4 {
		t.Errorf("truth header %+v", tr)
	}
	if tr.Stats.Requests == 0 || tr.Stats.Spans < tr.Stats.Requests || len(tr.Stats.Models) != 3 {
		t.Errorf("stats %+v", tr.Stats)
	}
}

// Calibration: the default fleet's latencies look like real 7–70B serving on
// H100/H200 (TTFT tens to hundreds of ms, TPOT 10–60 ms at the median).
func TestCalibration(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration = 20 * time.Minute
	_, tr := runCapture(t, cfg)
	for _, m := range tr.Stats.Models {
		t.Logf("%-14s requests %6d  TTFT p50 %7.0f ms p99 %8.0f ms  TPOT p50 %5.1f ms p99 %6.1f ms  e2e p50 %7.0f ms",
			m.Model, m.Requests, m.TTFTP50, m.TTFTP99, m.TPOTP50, m.TPOTP99, m.E2EP50)
		if m.TPOTP50 < 8 || m.TPOTP50 > 60 {
			t.Errorf("%s: TPOT p50 %.1f ms outside 8–60", m.Model, m.TPOTP50)
		}
		if m.TTFTP50 < 20 || m.TTFTP50 > 2000 {
			t.Errorf("%s: TTFT p50 %.0f ms outside 20–2000", m.Model, m.TTFTP50)
		}
	}
	if tr.Stats.Errors != 0 || tr.Stats.Preemptions != 0 {
		t.Errorf("fault-free run: %d errors, %d preemptions", tr.Stats.Errors, tr.Stats.Preemptions)
	}
}
