package k8s

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// roles are the tailcause subcommands deployed, one Deployment each.
var roles = []string{"ingest", "enrich", "causal", "query"}

// steps are the subcommands run once before the roles, one Job each, with
// the arguments each must have: the migrations (the serving roles run with
// --no-migrate) and the topics, with three replicas (topics.json declares
// one, for the dev broker).
var steps = map[string][]string{"migrate": {"migrate"}, "topics": {"topics", "--replication=3"}}

// secretName and secretKeys: the Secret created out of band (README.md).
const secretName = "tailcause-secrets"

var secretKeys = []string{"clickhouse-password", "ingest-token", "query-token", "webhook-secret-oncall"}

// rendered is the output of one kustomize build, strictly decoded.
type rendered struct {
	dir         string
	deployments map[string]*appsv1.Deployment
	jobs        map[string]*batchv1.Job
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	accounts    map[string]*corev1.ServiceAccount
	namespaces  map[string]*corev1.Namespace
	pdbs        map[string]*policyv1.PodDisruptionBudget
	hpas        map[string]*autoscalingv2.HorizontalPodAutoscaler
	daemonSets  map[string]*appsv1.DaemonSet
	rbac        map[string]any    // ClusterRole/…, ClusterRoleBinding/…
	namespace   map[string]string // kind/name → metadata.namespace
}

// build runs `kustomize build dir` in-process and decodes every object into
// its Kubernetes API type, rejecting unknown fields (a misspelt or
// misplaced field fails here instead of being dropped by the API server).
func build(t *testing.T, dir string) *rendered {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	r := &rendered{
		dir: dir, deployments: map[string]*appsv1.Deployment{}, jobs: map[string]*batchv1.Job{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, accounts: map[string]*corev1.ServiceAccount{},
		namespaces: map[string]*corev1.Namespace{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{}, namespace: map[string]string{},
		daemonSets: map[string]*appsv1.DaemonSet{}, rbac: map[string]any{},
	}
	for _, res := range m.Resources() {
		y, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		kind, name, apiVersion := res.GetKind(), res.GetName(), res.GetApiVersion()
		decode := func(want string, into any) {
			t.Helper()
			if apiVersion != want {
				t.Errorf("%s: %s %s has apiVersion %s, want %s", dir, kind, name, apiVersion, want)
			}
			if err := yaml.UnmarshalStrict(y, into); err != nil {
				t.Errorf("%s: %s %s: %v", dir, kind, name, err)
			}
		}
		switch kind {
		case "Deployment":
			var o appsv1.Deployment
			decode("apps/v1", &o)
			r.deployments[name] = &o
		case "Job":
			var o batchv1.Job
			decode("batch/v1", &o)
			r.jobs[name] = &o
		case "Service":
			var o corev1.Service
			decode("v1", &o)
			r.services[name] = &o
		case "ConfigMap":
			var o corev1.ConfigMap
			decode("v1", &o)
			r.configMaps[name] = &o
		case "ServiceAccount":
			var o corev1.ServiceAccount
			decode("v1", &o)
			r.accounts[name] = &o
		case "Namespace":
			var o corev1.Namespace
			decode("v1", &o)
			r.namespaces[name] = &o
		case "PodDisruptionBudget":
			var o policyv1.PodDisruptionBudget
			decode("policy/v1", &o)
			r.pdbs[name] = &o
		case "HorizontalPodAutoscaler":
			var o autoscalingv2.HorizontalPodAutoscaler
			decode("autoscaling/v2", &o)
			r.hpas[name] = &o
		case "DaemonSet":
			var o appsv1.DaemonSet
			decode("apps/v1", &o)
			r.daemonSets[name] = &o
		case "ClusterRole":
			var o rbacv1.ClusterRole
			decode("rbac.authorization.k8s.io/v1", &o)
			r.rbac[kind+"/"+name] = &o
		case "ClusterRoleBinding":
			var o rbacv1.ClusterRoleBinding
			decode("rbac.authorization.k8s.io/v1", &o)
			r.rbac[kind+"/"+name] = &o
		default:
			t.Errorf("%s: %s %s: no decoder for this kind: add one to the test", dir, kind, name)
		}
		r.namespace[kind+"/"+name] = res.GetNamespace()
	}
	return r
}

// binaryFacts is what the tailcause binary accepts, read from its sources
// in cmd/tailcause: subcommands, flag names, environment variables, and
// per subcommand (its file, cmd/tailcause/<name>.go) whether it serves the
// observability listener (/metrics, /readyz: obsFlags) and takes
// --no-migrate.
type binaryFacts struct {
	commands, flags, env map[string]bool
	servesObs, noMigrate map[string]bool
}

func readBinaryFacts(t *testing.T) binaryFacts {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "cmd", "tailcause", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no sources of cmd/tailcause: %v", err)
	}
	f := binaryFacts{commands: map[string]bool{}, flags: map[string]bool{}, env: map[string]bool{}, servesObs: map[string]bool{}, noMigrate: map[string]bool{}}
	cmdRe := regexp.MustCompile(`(?m)^\s*"([a-z]+)":\s*\{`)
	flagRe := regexp.MustCompile(`fs\.\w+\(\s*(?:&[\w.]+,\s*)?"([a-z0-9-]+)"`)
	envRe := regexp.MustCompile(`getenv\("(TAILCAUSE_[A-Z0-9_]+)"\)`)
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		name := strings.TrimSuffix(filepath.Base(path), ".go")
		f.servesObs[name] = strings.Contains(src, "of.register(fs, e)") && strings.Contains(src, "of.start(")
		f.noMigrate[name] = strings.Contains(src, "sf.registerNoMigrate(fs)")
		if filepath.Base(path) == "main.go" {
			for _, m := range cmdRe.FindAllStringSubmatch(src, -1) {
				f.commands[m[1]] = true
			}
		}
		for _, m := range flagRe.FindAllStringSubmatch(src, -1) {
			f.flags[m[1]] = true
		}
		for _, m := range envRe.FindAllStringSubmatch(src, -1) {
			f.env[m[1]] = true
		}
	}
	if !f.commands["enrich"] || !f.flags["clickhouse"] || !f.env["TAILCAUSE_KAFKA"] || !f.servesObs["enrich"] || !f.noMigrate["enrich"] {
		t.Fatalf("could not read cmd/tailcause (commands %v): the patterns of this test need updating", f.commands)
	}
	return f
}

func TestBase(t *testing.T) { checkTree(t, build(t, "base"), "") }
func TestProduction(t *testing.T) {
	checkProduction(t, build(t, filepath.Join("overlays", "production")))
}

func checkProduction(t *testing.T, r *rendered) {
	t.Helper()
	checkTree(t, r, "tailcause")
	if r.namespaces["tailcause"] == nil {
		t.Error("production: no Namespace tailcause")
	}
	for _, d := range r.deployments {
		img := d.Spec.Template.Spec.Containers[0].Image
		if !strings.HasPrefix(img, "ghcr.io/tailcause/tailcause:") || strings.HasSuffix(img, ":latest") {
			t.Errorf("production: %s runs image %q: pin a version", d.Name, img)
		}
	}
	if n := *r.deployments["tailcause-enrich"].Spec.Replicas; n != 6 {
		t.Errorf("production: %d enrichers, want 6 (one per otlp_spans partition)", n)
	}
	q := r.deployments["tailcause-query"].Spec.Template.Spec
	if !slices.Contains(q.Containers[0].Args, "--webhooks=/etc/tailcause/webhooks/webhooks.json") {
		t.Errorf("production: query args %v lack --webhooks", q.Containers[0].Args)
	}
	mounted := false
	for _, v := range q.Volumes {
		if v.ConfigMap != nil && strings.HasPrefix(v.ConfigMap.Name, "tailcause-webhooks") {
			cm := r.configMaps[v.ConfigMap.Name]
			mounted = cm != nil && cm.Data["webhooks.json"] != ""
		}
	}
	if !mounted {
		t.Error("production: the webhooks ConfigMap is not mounted into query")
	}
	hpa := r.hpas["tailcause-ingest"]
	if hpa == nil || r.deployments[hpa.Spec.ScaleTargetRef.Name] == nil {
		t.Error("production: the ingest autoscaler targets no Deployment")
	}
	for name, p := range r.pdbs {
		if n := matching(r, p.Spec.Selector.MatchLabels); n != 1 {
			t.Errorf("production: PodDisruptionBudget %s selects %d Deployments", name, n)
		}
	}
}

// checkTree: every role and step, wired to existing config, secrets, ports
// and the binary's real subcommands, flags and environment variables.
func checkTree(t *testing.T, r *rendered, namespace string) {
	t.Helper()
	facts := readBinaryFacts(t)
	for key, ns := range r.namespace {
		if !strings.HasPrefix(key, "Namespace/") && ns != namespace {
			t.Errorf("%s: %s in namespace %q, want %q", r.dir, key, ns, namespace)
		}
	}
	if len(r.daemonSets) != 0 || len(r.rbac) != 0 {
		t.Errorf("%s: the roles need no DaemonSet and no cluster RBAC", r.dir)
	}
	if len(r.deployments) != len(roles) {
		t.Errorf("%s: %d Deployments, want %d (%v)", r.dir, len(r.deployments), len(roles), roles)
	}
	if len(r.jobs) != len(steps) {
		t.Errorf("%s: %d Jobs, want %d (%v)", r.dir, len(r.jobs), len(steps), steps)
	}
	configMapKeys := map[string]bool{}
	for _, role := range roles {
		d := r.deployments["tailcause-"+role]
		if d == nil {
			t.Errorf("%s: no Deployment tailcause-%s", r.dir, role)
			continue
		}
		where := r.dir + ": " + d.Name
		pod := d.Spec.Template
		if matchesAll(d.Spec.Selector.MatchLabels, pod.Labels) != nil || len(d.Spec.Selector.MatchLabels) == 0 {
			t.Errorf("%s: selector %v does not select its pods %v", where, d.Spec.Selector.MatchLabels, pod.Labels)
		}
		c, ok := checkPod(t, r, facts, where, role, pod, configMapKeys)
		if !ok {
			continue
		}
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		if ports["metrics"] != 9464 {
			t.Errorf("%s: no metrics port 9464 (ports %v)", where, ports)
		}
		for probe, want := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
			if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want {
				t.Errorf("%s: want an HTTP probe on %s", where, want)
				continue
			}
			if pn := probe.HTTPGet.Port.StrVal; ports[pn] == 0 {
				t.Errorf("%s: probe %s on port %q the container does not declare", where, want, probe.HTTPGet.Port.String())
			}
		}
		// Where the pod is annotated to be scraped, the role serves
		// /metrics: it runs the observability listener (obsFlags), on the
		// annotated port (its --metrics-addr, default :9464).
		if pod.Annotations["prometheus.io/scrape"] == "true" {
			port := pod.Annotations["prometheus.io/port"]
			addr := ":9464"
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--metrics-addr="); ok {
					addr = v
				}
			}
			if !facts.servesObs[role] {
				t.Errorf("%s: annotated to be scraped, but `tailcause %s` serves no observability listener (cmd/tailcause/%s.go)", where, role, role)
			} else if !strings.HasSuffix(addr, ":"+port) || pod.Annotations["prometheus.io/path"] != "/metrics" {
				t.Errorf("%s: scraped at port %s path %s, but serves /metrics on %q", where, port, pod.Annotations["prometheus.io/path"], addr)
			} else if n, _ := strconv.Atoi(port); !slices.Contains(slices.Collect(maps.Values(ports)), int32(n)) {
				t.Errorf("%s: scrape port %s is not a declared container port (%v)", where, port, ports)
			}
		}
		// Only the migrate Job changes the schema.
		if facts.noMigrate[role] && !slices.Contains(c.Args, "--no-migrate") {
			t.Errorf("%s: args %v: a serving role runs with --no-migrate (the migrate Job migrates)", where, c.Args)
		}
	}
	for step, wantArgs := range steps {
		j := r.jobs["tailcause-"+step]
		if j == nil {
			t.Errorf("%s: no Job tailcause-%s", r.dir, step)
			continue
		}
		where := r.dir + ": Job " + j.Name
		pod := j.Spec.Template
		c, ok := checkPod(t, r, facts, where, step, pod, configMapKeys)
		if !ok {
			continue
		}
		if !slices.Equal(c.Args, wantArgs) {
			t.Errorf("%s: args %v, want %v", where, c.Args, wantArgs)
		}
		if rp := pod.Spec.RestartPolicy; rp != corev1.RestartPolicyOnFailure && rp != corev1.RestartPolicyNever {
			t.Errorf("%s: restartPolicy %q", where, rp)
		}
		if j.Spec.BackoffLimit == nil || j.Spec.ActiveDeadlineSeconds == nil {
			t.Errorf("%s: want a backoffLimit and an activeDeadlineSeconds (a step that cannot finish must end)", where)
		}
		if j.Spec.TTLSecondsAfterFinished == nil {
			t.Errorf("%s: want ttlSecondsAfterFinished: a finished Job's template cannot be changed by the next apply", where)
		}
		if c.LivenessProbe != nil || c.ReadinessProbe != nil || len(c.Ports) != 0 || pod.Annotations["prometheus.io/scrape"] != "" {
			t.Errorf("%s: a step serves nothing: no probes, ports or scrape annotations", where)
		}
	}
	for k := range configMapKeys {
		if !facts.env[k] {
			t.Errorf("%s: ConfigMap key %s is not an environment variable cmd/tailcause reads", r.dir, k)
		}
	}
	for _, k := range []string{"TAILCAUSE_KAFKA", "TAILCAUSE_CLICKHOUSE", "TAILCAUSE_DATABASE"} {
		if !configMapKeys[k] {
			t.Errorf("%s: the ConfigMap lacks %s", r.dir, k)
		}
	}
	checkServices(t, r, map[string][]int32{"tailcause-ingest": {4317, 4318}, "tailcause-query": {80}})
}

// checkPod checks what a role's and a step's pod share: labels, account,
// security, the one tailcause container running `tailcause name` with real
// flags, resources, and its configuration from the ConfigMap (whose keys it
// adds to configMapKeys) and secrets from the one Secret. It returns the
// container.
func checkPod(t *testing.T, r *rendered, facts binaryFacts, where, name string, pod corev1.PodTemplateSpec, configMapKeys map[string]bool) (corev1.Container, bool) {
	t.Helper()
	if pod.Labels["app.kubernetes.io/component"] != name {
		t.Errorf("%s: component label %q", where, pod.Labels["app.kubernetes.io/component"])
	}
	if sa := pod.Spec.ServiceAccountName; r.accounts[sa] == nil {
		t.Errorf("%s: service account %q not in the build", where, sa)
	}
	sc := pod.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("%s: must run as non-root", where)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Errorf("%s: %d containers, want 1", where, len(pod.Spec.Containers))
		return corev1.Container{}, false
	}
	c := pod.Spec.Containers[0]
	if !strings.Contains(c.Image, "tailcause") || len(c.Command) != 0 {
		t.Errorf("%s: image %q command %v: the one tailcause image, its entrypoint", where, c.Image, c.Command)
	}
	if len(c.Args) == 0 || c.Args[0] != name {
		t.Errorf("%s: args %v, want `tailcause %s ...`", where, c.Args, name)
	} else if !facts.commands[name] {
		t.Errorf("%s: cmd/tailcause has no subcommand %q", where, name)
	}
	for _, a := range c.Args[min(1, len(c.Args)):] {
		flagName, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || !facts.flags[flagName] {
			t.Errorf("%s: argument %q is not a flag of cmd/tailcause", where, a)
		}
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem ||
		c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("%s: container must have a read-only root and no privilege escalation", where)
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[res], c.Resources.Limits[res]
		if req.IsZero() || lim.IsZero() || req.Cmp(lim) > 0 {
			t.Errorf("%s: %s request %s limit %s", where, res, req.String(), lim.String())
		}
	}
	// Configuration: the ConfigMap exists and holds only variables the
	// binary reads; secrets come from the one Secret, by known keys.
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			t.Errorf("%s: envFrom other than a ConfigMap", where)
			continue
		}
		cm := r.configMaps[ef.ConfigMapRef.Name]
		if cm == nil {
			t.Errorf("%s: ConfigMap %s not in the build", where, ef.ConfigMapRef.Name)
			continue
		}
		for k := range cm.Data {
			configMapKeys[k] = true
		}
	}
	for _, ev := range c.Env {
		if !facts.env[ev.Name] && !webhookSecretEnv(t, ev.Name) {
			t.Errorf("%s: env %s is read neither by cmd/tailcause nor by a webhook receiver", where, ev.Name)
		}
		if ev.ValueFrom == nil || ev.ValueFrom.SecretKeyRef == nil {
			t.Errorf("%s: env %s: plain values belong in the ConfigMap", where, ev.Name)
			continue
		}
		ref := ev.ValueFrom.SecretKeyRef
		if ref.Name != secretName || !slices.Contains(secretKeys, ref.Key) {
			t.Errorf("%s: env %s from secret %s key %s; want %s with a key of %v", where, ev.Name, ref.Name, ref.Key, secretName, secretKeys)
		}
	}
	mounts := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		mounts[v.Name] = true
		if v.ConfigMap != nil && r.configMaps[v.ConfigMap.Name] == nil {
			t.Errorf("%s: volume %s: ConfigMap %s not in the build", where, v.Name, v.ConfigMap.Name)
		}
	}
	for _, m := range c.VolumeMounts {
		if !mounts[m.Name] {
			t.Errorf("%s: mount of undeclared volume %s", where, m.Name)
		}
	}
	return c, true
}

func checkServices(t *testing.T, r *rendered, want map[string][]int32) {
	t.Helper()
	if len(r.services) != len(want) {
		t.Errorf("%s: %d Services, want %d", r.dir, len(r.services), len(want))
	}
	for name, ports := range want {
		s := r.services[name]
		if s == nil {
			t.Errorf("%s: no Service %s", r.dir, name)
			continue
		}
		var d *appsv1.Deployment
		for _, dep := range r.deployments {
			if matchesAll(s.Spec.Selector, dep.Spec.Template.Labels) == nil {
				if d != nil {
					t.Errorf("%s: Service %s selects pods of %s and %s", r.dir, name, d.Name, dep.Name)
				}
				d = dep
			}
		}
		if d == nil {
			t.Errorf("%s: Service %s selects no pods", r.dir, name)
			continue
		}
		declared := map[string]bool{}
		for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
			declared[p.Name] = true
		}
		var got []int32
		for _, p := range s.Spec.Ports {
			got = append(got, p.Port)
			if !declared[p.TargetPort.StrVal] {
				t.Errorf("%s: Service %s port %d targets %q, not a named port of %s", r.dir, name, p.Port, p.TargetPort.String(), d.Name)
			}
		}
		if !slices.Equal(got, ports) {
			t.Errorf("%s: Service %s ports %v, want %v", r.dir, name, got, ports)
		}
	}
}

func matchesAll(selector, labels map[string]string) error {
	for k, v := range selector {
		if labels[k] != v {
			return fmt.Errorf("label %s=%q, selector wants %q", k, labels[k], v)
		}
	}
	return nil
}

func matching(r *rendered, selector map[string]string) int {
	n := 0
	for _, d := range r.deployments {
		if matchesAll(selector, d.Spec.Template.Labels) == nil {
			n++
		}
	}
	return n
}

// TestSecretKeysDocumented: the README's `kubectl create secret` line
// creates exactly the keys the manifests read.
func TestSecretKeysDocumented(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`--from-literal=([a-z-]+)=`)
	var got []string
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		if !slices.Contains(got, m[1]) {
			got = append(got, m[1])
		}
	}
	sort.Strings(got)
	want := slices.Clone(secretKeys)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("README.md creates secret keys %v, the manifests read %v", got, want)
	}
}

// checkCollectorKustomization builds deploy/otelcol's DaemonSet and checks
// what config.yaml needs from it: the node name, the config mounted where
// the args point, the OTLP host ports, RBAC to discover pods.
func checkCollectorKustomization(t *testing.T, dir string) {
	t.Helper()
	r := build(t, dir)
	ds := r.daemonSets["otelcol-tailcause"]
	if ds == nil || len(r.daemonSets) != 1 {
		t.Fatalf("%s: want one DaemonSet otelcol-tailcause", dir)
	}
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env["K8S_NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("%s: K8S_NODE_NAME must come from spec.nodeName", dir)
	}
	if env["TAILCAUSE_KAFKA"].Value == "" {
		t.Errorf("%s: no TAILCAUSE_KAFKA", dir)
	}
	hostPorts := map[int32]bool{}
	for _, p := range c.Ports {
		if p.HostPort != 0 {
			hostPorts[p.HostPort] = true
		}
	}
	if !hostPorts[4317] || !hostPorts[4318] {
		t.Errorf("%s: engines reach the node's Collector on host ports 4317/4318", dir)
	}
	if !slices.Contains(c.Args, "--config=/etc/otelcol/config.yaml") || len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/etc/otelcol" {
		t.Errorf("%s: args %v mounts %v: config.yaml must be mounted at /etc/otelcol", dir, c.Args, c.VolumeMounts)
	}
	var cm *corev1.ConfigMap
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil {
			cm = r.configMaps[v.ConfigMap.Name]
		}
	}
	if cm == nil || !strings.Contains(cm.Data["config.yaml"], "kubernetes_sd_configs") {
		t.Errorf("%s: the mounted ConfigMap does not hold config.yaml", dir)
	}
	if pod.ServiceAccountName == "" || r.accounts[pod.ServiceAccountName] == nil {
		t.Errorf("%s: service account %q not in the build", dir, pod.ServiceAccountName)
	}
	role, _ := r.rbac["ClusterRole/otelcol-tailcause"].(*rbacv1.ClusterRole)
	binding, _ := r.rbac["ClusterRoleBinding/otelcol-tailcause"].(*rbacv1.ClusterRoleBinding)
	if role == nil || binding == nil || binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Name != pod.ServiceAccountName || binding.Subjects[0].Namespace != r.namespace["DaemonSet/otelcol-tailcause"] {
		t.Errorf("%s: the ClusterRole must be bound to the DaemonSet's service account in its namespace", dir)
	} else if !slices.Contains(role.Rules[0].Resources, "pods") || !slices.Contains(role.Rules[0].Verbs, "watch") {
		t.Errorf("%s: the ClusterRole must allow watching pods", dir)
	}
}
