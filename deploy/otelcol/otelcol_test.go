package otelcol

import (
	"bufio"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tailcause/tailcause/schemas"
)

var configs = []string{"config.yaml", "config.otlp.yaml"}

func load(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return m
}

func get(t *testing.T, m map[string]any, path ...string) any {
	t.Helper()
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("no map above %q in %v", p, path)
		}
		cur = mm[p]
	}
	return cur
}

// binary returns the Collector build, or "" (the test skips; CI fails).
func binary(t *testing.T) string {
	t.Helper()
	path := os.Getenv("TAILCAUSE_OTELCOL_BIN")
	if path == "" {
		out, err := exec.Command("bash", "build.sh", "--path").Output()
		if err != nil {
			t.Fatalf("build.sh --path: %v", err)
		}
		path = strings.TrimSpace(string(out))
	}
	if _, err := os.Stat(path); err != nil {
		msg := "no Collector build at " + path + ": run `make collector` (deploy/otelcol/build.sh) or set TAILCAUSE_OTELCOL_BIN"
		if os.Getenv("CI") != "" {
			t.Fatal("CI must not skip the Collector config validation: " + msg)
		}
		t.Skip(msg)
	}
	return path
}

// TestValidateWithBinary runs `otelcol validate` on each shipped config.
// Without K8S_NODE_NAME a config must fail: a node Collector that does not
// know its node would send data tailcause cannot join.
func TestValidateWithBinary(t *testing.T) {
	bin := binary(t)
	for _, c := range configs {
		cmd := exec.Command(bin, "validate", "--config", c)
		cmd.Env = append(os.Environ(), "K8S_NODE_NAME=node-1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("validate %s: %v\n%s", c, err, out)
		}
		cmd = exec.Command(bin, "validate", "--config", c)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "K8S_NODE_NAME=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "host.name") {
			t.Errorf("validate %s without K8S_NODE_NAME: %v\n%s", c, err, out)
		}
	}
}

// TestConfigsAgree: both configs receive and process alike; only the
// exporter differs.
func TestConfigsAgree(t *testing.T) {
	a, b := load(t, configs[0]), load(t, configs[1])
	for _, k := range []string{"extensions", "receivers", "processors"} {
		if !reflect.DeepEqual(a[k], b[k]) {
			t.Errorf("%s differ between %s and %s", k, configs[0], configs[1])
		}
	}
	pa, pb := get(t, a, "service", "pipelines").(map[string]any), get(t, b, "service", "pipelines").(map[string]any)
	for name, p := range pa {
		q := pb[name].(map[string]any)
		for _, k := range []string{"receivers", "processors"} {
			if !reflect.DeepEqual(p.(map[string]any)[k], q[k]) {
				t.Errorf("pipeline %s: %s differ", name, k)
			}
		}
	}
}

// TestKafkaExporterContract: what enrich relies on (DESIGN.md, telemetry
// reference section 4).
func TestKafkaExporterContract(t *testing.T) {
	c := load(t, "config.yaml")
	k := get(t, c, "exporters", "kafka").(map[string]any)
	for signal, topic := range map[string]string{"traces": schemas.TopicSpans, "metrics": schemas.TopicMetrics, "logs": schemas.TopicLogs} {
		s := k[signal].(map[string]any)
		if s["topic"] != topic || s["encoding"] != "otlp_proto" {
			t.Errorf("kafka %s: topic %v encoding %v, want %s otlp_proto", signal, s["topic"], s["encoding"], topic)
		}
	}
	if k["partition_traces_by_id"] != true || k["partition_metrics_by_resource_attributes"] != true {
		t.Error("traces must be partitioned by trace id and metrics by resource attributes")
	}
	if get(t, c, "exporters", "kafka", "producer", "required_acks") != "all" {
		t.Error("the kafka exporter must wait for acks=all")
	}
	for _, name := range configs {
		c := load(t, name)
		jobs := get(t, c, "receivers", "prometheus", "config", "scrape_configs").([]any)
		intervals := map[string]any{}
		for _, j := range jobs {
			jm := j.(map[string]any)
			intervals[jm["job_name"].(string)] = jm["scrape_interval"]
			if h, ok := jm["honor_timestamps"]; ok && h != true {
				t.Errorf("%s: job %v must honour timestamps", name, jm["job_name"])
			}
		}
		if intervals["dcgm-exporter"] != "30s" || intervals["llm-engine"] != "10s" {
			t.Errorf("%s: scrape intervals %v, want dcgm-exporter 30s, llm-engine 10s", name, intervals)
		}
		for _, p := range []string{"traces", "metrics", "logs"} {
			procs := get(t, c, "service", "pipelines", p, "processors").([]any)
			if len(procs) == 0 || procs[0] != "memory_limiter" || procs[len(procs)-1] != "batch" {
				t.Errorf("%s pipeline %s: processors %v: memory_limiter first, batch last", name, p, procs)
			}
		}
	}
}

// TestOneRelease: every module of the manifest is of one release, and
// build.sh installs the builder of that release.
func TestOneRelease(t *testing.T) {
	f, err := os.Open("builder-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gomod := regexp.MustCompile(`gomod:\s*(\S+)\s+(v\S+)`)
	want := map[string]*regexp.Regexp{
		"github.com/open-telemetry/opentelemetry-collector-contrib/": regexp.MustCompile(`^v0\.165\.1$`),
		"go.opentelemetry.io/collector/":                             regexp.MustCompile(`^v(0\.165\.0|1\.71\.0)$`),
	}
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := gomod.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n++
		ok := false
		for prefix, re := range want {
			if strings.HasPrefix(m[1], prefix) {
				ok = re.MatchString(m[2])
			}
		}
		if !ok {
			t.Errorf("%s %s is not of the release v0.165 (core v0.165.0/v1.71.0, contrib v0.165.1)", m[1], m[2])
		}
	}
	if n < 8 {
		t.Errorf("only %d modules in the manifest", n)
	}
	b, err := os.ReadFile("build.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "BUILDER_VERSION=0.165.0") {
		t.Error("build.sh does not install builder v0.165.0")
	}
}
