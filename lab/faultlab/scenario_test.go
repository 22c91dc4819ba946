package faultlab

import (
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/schemas"
)

func TestBuiltinScenarios(t *testing.T) {
	ents, err := fs.ReadDir(scenarioFS, "scenarios")
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	faultFree, withDecoys := 0, 0
	for _, e := range ents {
		name := strings.TrimSuffix(e.Name(), ".json")
		sc, err := LoadScenario(name)
		if err != nil {
			t.Errorf("%s: %v", e.Name(), err)
			continue
		}
		if sc.Name != name {
			t.Errorf("%s: name %q does not match the file name", e.Name(), sc.Name)
		}
		if sc.Description == "" {
			t.Errorf("%s: no description", e.Name())
		}
		if err := sc.Validate(DefaultFleet(), 10*time.Minute); err != nil {
			t.Errorf("%s: invalid for a 10-minute run: %v", e.Name(), err)
		}
		for _, f := range sc.Faults {
			covered[f.Cause] = true
		}
		if len(sc.Faults) == 0 {
			faultFree++
		}
		if len(sc.Decoys) > 0 {
			withDecoys++
		}
	}
	for _, c := range Causes() {
		if !covered[c.ID] {
			t.Errorf("no built-in scenario injects %s", c.ID)
		}
	}
	if faultFree == 0 || withDecoys == 0 {
		t.Errorf("want fault-free scenarios and scenarios with decoys, got %d and %d", faultFree, withDecoys)
	}
	list, err := ListScenarios()
	if err != nil || len(list) != len(ents) {
		t.Fatalf("ListScenarios: %d, %v; want %d", len(list), err, len(ents))
	}
	if !slices.IsSortedFunc(list, func(a, b ScenarioInfo) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("ListScenarios not sorted")
	}
}

// Every cause of the taxonomy (schemas.Causes) is injectable, by its exact
// id and in its order, and the simulator injects nothing else.
func TestCausesMatchTaxonomy(t *testing.T) {
	var want, got []string
	for _, c := range schemas.Causes() {
		want = append(want, string(c))
	}
	for _, c := range Causes() {
		got = append(got, c.ID)
	}
	if !slices.Equal(got, want) {
		t.Errorf("causes %v, want %v", got, want)
	}
	for id := range injections {
		if !id.Valid() {
			t.Errorf("injections describes %q, which is not a taxonomy cause", id)
		}
	}
}

func TestBadScenarios(t *testing.T) {
	cases := map[string][]string{
		"bad_unknown_field.json":     {"faults[0]: unknown field \"magnitud\""},
		"bad_unknown_cause.json":     {"faults[0].cause: unknown cause \"gpu.overheating\"", "gpu.thermal_throttle"},
		"bad_missing_entity.json":    {"faults[0].target: gpu: no GPU \"node-9/0\""},
		"bad_missing_pod.json":       {"faults[0].target: engine: no engine pod \"llama-3-1-8b-99\"", "llama-3-1-8b-7"},
		"bad_negative_duration.json": {"faults[0].duration: negative duration \"-5m\""},
		"bad_wrong_target_kind.json": {"faults[0].target: model target not allowed here (allowed: gpu, host)"},
		"bad_magnitude.json":         {"faults[0].magnitude: 1.5 not in (0, 0.99]"},
		"bad_type.json":              {"faults[0].magnitude: want a number, got a string"},
		"bad_two_targets.json":       {"faults[0].target: name exactly one of"},
		"bad_onset_past_end.json":    {"faults[0].onset: \"45m\" is at or past the end of the run (30m0s)"},
		"bad_decoy_kind.json":        {"decoys[0].kind: unknown decoy kind \"gpu.fan_speed\""},
		"bad_trailing.json":          {"trailing data"},
		"bad_xid_param.json":         {"faults[0].xid: only for gpu.xid_error"},
		"bad_fleet.json":             {"fleet: models[0]: llama-3.1-70b does not fit H100 GPUs at tp 1"},
	}
	files, _ := filepath.Glob("testdata/bad_*.json")
	if len(files) != len(cases) {
		t.Errorf("%d bad_*.json files, %d cases", len(files), len(cases))
	}
	for file, wants := range cases {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join("testdata", file)
			_, err := LoadScenario(path)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if !strings.Contains(msg, "scenario "+path+":") {
				t.Errorf("error does not name the file: %v", msg)
			}
			for _, w := range wants {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q\n lacks %q", msg, w)
				}
			}
		})
	}
}

func TestCustomFleetScenario(t *testing.T) {
	sc, err := LoadScenario("testdata/good_custom_fleet.json")
	if err != nil {
		t.Fatal(err)
	}
	// The default fleet has no gpu-a: running it there is an error, running
	// it with its own fleet is not.
	if err := sc.Validate(DefaultFleet(), 0); err == nil || !strings.Contains(err.Error(), "no GPU \"gpu-a/1\"") {
		t.Errorf("against the default fleet: %v", err)
	}
	cfg := DefaultConfig()
	cfg.Scenario = sc
	c, tr := runCapture(t, cfg)
	if tr.DurationS != 600 || len(tr.Fleet.Engines) != 2 || tr.Faults[0].Entity.Pod != "mistral-7b-1" {
		t.Errorf("truth: duration %v, engines %d, fault entity %+v", tr.DurationS, len(tr.Fleet.Engines), tr.Faults[0].Entity)
	}
	brake := false
	for _, p := range c.series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gpu-a/1", 6*time.Minute, 8*time.Minute) {
		brake = brake || uint64(p.value)&reasonHWPowerBrak != 0
	}
	if !brake {
		t.Error("power brake bit never set")
	}
}

func TestParseOffset(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"20m", 20 * time.Minute, ""},
		{"40%", 24 * time.Minute, ""},
		{"0s", 0, ""},
		{"100%", time.Hour, ""},
		{"-1m", 0, "negative"},
		{"-5%", 0, "negative"},
		{"150%", 0, "more than the whole run"},
		{"soon", 0, "soon"},
		{"", 0, "missing"},
	}
	for _, c := range cases {
		got, err := parseOffset(c.in, time.Hour)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []func(*Config){
		func(c *Config) { c.RateScale = -1 },
		func(c *Config) { c.StepSpanShare = 2 },
		func(c *Config) { c.Duration = -time.Minute },
		func(c *Config) { c.DCGMScrapeInterval = time.Millisecond },
		func(c *Config) { c.Fleet.Models[0].Engines = 20 },
		func(c *Config) { c.Fleet.Hosts[0].GPU = "A100" },
		func(c *Config) { c.Fleet.Models[1].Name = "gpt-5" },
	}
	for i, f := range bad {
		c := DefaultConfig()
		f(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("case %d: accepted", i)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("default config: %v", err)
	}
}
