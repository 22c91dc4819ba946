package docker

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const root = "../.."

// instr is one Dockerfile instruction, continuation lines joined.
type instr struct {
	cmd, args string
	stage     int
}

func parse(t *testing.T, name string) []instr {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []instr
	var cur strings.Builder
	stage := -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if more, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(more + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		cur.Reset()
		cmd = strings.ToUpper(cmd)
		if cmd == "FROM" {
			stage++
		}
		out = append(out, instr{cmd: cmd, args: strings.TrimSpace(args), stage: stage})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func find(is []instr, cmd string, stage int) []string {
	var out []string
	for _, i := range is {
		if i.cmd == cmd && (stage < 0 || i.stage == stage) {
			out = append(out, i.args)
		}
	}
	return out
}

func last(is []instr) int { return is[len(is)-1].stage }

// goVersion is go.mod's go directive, major.minor.
func goVersion(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	return string(m[1])
}

// containerPorts are the containerPort values of the YAML files matched.
func containerPorts(t *testing.T, glob string) []string {
	files, err := filepath.Glob(filepath.Join(root, glob))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests match %s (%v)", glob, err)
	}
	var out []string
	re := regexp.MustCompile(`containerPort:\s*(\d+)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			out = append(out, string(m[1]))
		}
	}
	return out
}

// checkCommon: a Go builder image of go.mod's version, a non-root final
// user, the exposed ports cover the manifests', COPY sources exist.
func checkCommon(t *testing.T, is []instr, manifests string) {
	t.Helper()
	from := find(is, "FROM", 0)
	if len(from) != 1 || !strings.HasPrefix(from[0], "golang:"+goVersion(t)+"-") {
		t.Errorf("build stage FROM %q, want golang:%s-…", from, goVersion(t))
	}
	fin := last(is)
	user := find(is, "USER", fin)
	if len(user) != 1 || strings.HasPrefix(user[0], "0") || strings.HasPrefix(user[0], "root") {
		t.Errorf("final USER %q: want one non-root user", user)
	}
	exposed := strings.Fields(strings.Join(find(is, "EXPOSE", fin), " "))
	for _, p := range containerPorts(t, manifests) {
		if !slices.Contains(exposed, p) {
			t.Errorf("port %s of %s is not exposed (EXPOSE %v)", p, manifests, exposed)
		}
	}
	for _, c := range find(is, "COPY", -1) {
		if strings.HasPrefix(c, "--from=") {
			continue
		}
		f := strings.Fields(c)
		for _, src := range f[:len(f)-1] {
			if src == "." {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, src)); err != nil {
				t.Errorf("COPY %s: %v", src, err)
			}
		}
	}
}

// entrypoint is the final stage's exec-form ENTRYPOINT.
func entrypoint(t *testing.T, is []instr) []string {
	t.Helper()
	ep := find(is, "ENTRYPOINT", last(is))
	var argv []string
	if len(ep) != 1 || json.Unmarshal([]byte(ep[0]), &argv) != nil || len(argv) == 0 {
		t.Fatalf("ENTRYPOINT %q: want one exec-form (JSON) entry point", ep)
	}
	return argv
}

// copiedFrom is the source in the build stage of the final stage's COPY
// --from=build to dest.
func copiedFrom(t *testing.T, is []instr, dest string) string {
	t.Helper()
	for _, c := range find(is, "COPY", last(is)) {
		f := strings.Fields(c)
		if len(f) == 3 && f[0] == "--from=build" && f[2] == dest {
			return f[1]
		}
	}
	t.Fatalf("the final stage copies nothing from the build stage to %s", dest)
	return ""
}

// TestTailcauseImage runs the image's build command here (the same
// flags, the output redirected) and checks that it gives a static binary
// reporting the version passed, that the entry point is that binary, and
// that the image serves every port the Kubernetes manifests declare.
func TestTailcauseImage(t *testing.T) {
	is := parse(t, "tailcause.Dockerfile")
	checkCommon(t, is, "deploy/k8s/base/*.yaml")
	argv := entrypoint(t, is)
	src := copiedFrom(t, is, argv[0])
	var build string
	for _, r := range find(is, "RUN", 0) {
		if strings.Contains(r, "go build") {
			build = r
		}
	}
	if build == "" || !strings.Contains(build, "CGO_ENABLED=0") || !strings.Contains(build, "-o "+src+" ") {
		t.Fatalf("build RUN %q: want a CGO_ENABLED=0 go build -o %s", build, src)
	}
	out := filepath.Join(t.TempDir(), "tailcause")
	cmd := exec.Command("sh", "-c", strings.Replace(build, "-o "+src+" ", "-o "+out+" ", 1))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "VERSION=docker-test")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamically linked (%v): distroless/static has no libc", p.Type)
		}
	}
	b, err := exec.Command(out, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(b), "tailcause docker-test (go") { // then the toolchain and commit
		t.Errorf("version: %q (%v), want the VERSION build argument", b, err)
	}
}

// TestOtelcolImage checks the Collector image against deploy/otelcol: the
// same builder release as build.sh, the binary the manifest names where
// the builder writes it, the config path the DaemonSet passes, its ports.
func TestOtelcolImage(t *testing.T) {
	is := parse(t, "otelcol.Dockerfile")
	checkCommon(t, is, "deploy/otelcol/daemonset.yaml")
	sh, err := os.ReadFile(filepath.Join(root, "deploy/otelcol/build.sh"))
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`(?m)^BUILDER_VERSION=(\S+)`).FindSubmatch(sh)
	if want == nil || !slices.Contains(find(is, "ARG", 0), "BUILDER_VERSION="+string(want[1])) {
		t.Errorf("ARG %q, want BUILDER_VERSION=%s as in build.sh", find(is, "ARG", 0), want)
	}
	manifest, err := os.ReadFile(filepath.Join(root, "deploy/otelcol/builder-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	field := func(k string) string {
		m := regexp.MustCompile(`(?m)^\s+` + k + `:\s*(\S+)`).FindSubmatch(manifest)
		if m == nil {
			t.Fatalf("builder-config.yaml has no %s", k)
		}
		return string(m[1])
	}
	wd := find(is, "WORKDIR", 0)
	if len(wd) != 1 {
		t.Fatalf("WORKDIR %q", wd)
	}
	argv := entrypoint(t, is)
	if got, want := copiedFrom(t, is, argv[0]), filepath.Join(wd[0], field("output_path"), field("name")); got != want {
		t.Errorf("binary copied from %s; the builder writes %s", got, want)
	}
	ds, err := os.ReadFile(filepath.Join(root, "deploy/otelcol/daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`--config=(\S+?)\]?\s`).FindSubmatch(ds)
	if m == nil {
		t.Fatal("the DaemonSet passes no --config")
	}
	cmdArgs := find(is, "CMD", last(is))
	if len(cmdArgs) != 1 || !strings.Contains(cmdArgs[0], "--config="+string(m[1])) {
		t.Errorf("CMD %q, want the DaemonSet's --config=%s", cmdArgs, m[1])
	}
	if !slices.Contains(find(is, "COPY", last(is)), "deploy/otelcol/config.yaml "+string(m[1])) {
		t.Errorf("the default config is not copied to %s", m[1])
	}
}
