package schemas

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestRenderGolden pins the rendering of every migration (default options).
func TestRenderGolden(t *testing.T) {
	got, err := RenderAll(DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "render.sql")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./schemas -update)", err)
	}
	if got != string(want) {
		t.Errorf("rendering differs from %s; rerun with -update if intended", path)
	}
}

// TestRenderTTL: the telemetry tables get the configured TTL on their
// event-time column and the operational tables their fixed ones; TTL 0
// renders none; the columns never change with the options.
func TestRenderTTL(t *testing.T) {
	def, err := RenderAll(DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, good := range []string{"LowCardinality(String)", "CODEC(Delta, ZSTD(1))", "INDEX idx_trace trace_id TYPE bloom_filter",
		"ORDER BY (model, service, start_time, uid)\nTTL start_time + INTERVAL 30 DAY;",
		"ORDER BY (host, gpu, metric, time_ns)\nTTL time + INTERVAL 30 DAY;",
		"TTL received_at + INTERVAL 7 DAY", "TTL opened_at + INTERVAL 365 DAY", "TTL created_at + INTERVAL 90 DAY"} {
		if !strings.Contains(def, good) {
			t.Errorf("the default rendering lacks %q", good)
		}
	}
	if n := strings.Count(def, "INTERVAL 30 DAY"); n != 4 {
		t.Errorf("%d tables with the 30-day TTL, want the 4 telemetry tables", n)
	}
	none, err := RenderAll(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(none, "\nTTL ") {
		t.Errorf("TTL 0 must render no TTL at all:\n%s", none)
	}
	odd, err := RenderAll(Options{TTL: 36 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(odd, "INTERVAL 36 HOUR") != 4 {
		t.Error("a 36h TTL is not rendered in hours on the 4 telemetry tables")
	}
	if a, b := columnsOf(t, def), columnsOf(t, none); !equal(a, b) {
		t.Errorf("renderings disagree on columns:\n%v\n%v", a, b)
	}
	for _, bad := range []Options{{TTL: -time.Hour}, {TTL: 1500 * time.Millisecond}} {
		if _, err := RenderAll(bad); err == nil {
			t.Errorf("TTL %v accepted", bad.TTL)
		}
	}
	for d, want := range map[time.Duration]string{30 * 24 * time.Hour: "30 DAY", 36 * time.Hour: "36 HOUR", 90 * time.Minute: "90 MINUTE", 61 * time.Second: "61 SECOND"} {
		if got := TTLInterval(d); got != want {
			t.Errorf("TTLInterval(%v) = %q, want %q", d, got, want)
		}
	}
}

var colRE = regexp.MustCompile(`(?m)^    ([a-z_0-9]+)\s+[A-Z]`)

func columnsOf(t *testing.T, sql string) []string {
	t.Helper()
	var out []string
	for _, m := range colRE.FindAllStringSubmatch(sql, -1) {
		out = append(out, m[1])
	}
	if len(out) < 50 {
		t.Fatalf("found only %d columns: the pattern is broken", len(out))
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMigrationsOrderedWithStableChecksums(t *testing.T) {
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if m.Version != i+1 {
			t.Errorf("migration %s has version %d, want %d: versions are consecutive from 1", m.Name, m.Version, i+1)
		}
		if len(m.Checksum) != 64 {
			t.Errorf("%s checksum %q", m.Name, m.Checksum)
		}
		stmts, err := m.Statements(DefaultOptions())
		if err != nil || len(stmts) == 0 {
			t.Errorf("%s: %d statements, %v", m.Name, len(stmts), err)
		}
	}
	again, _ := Migrations()
	for i := range ms {
		if ms[i].Checksum != again[i].Checksum {
			t.Errorf("%s checksum not stable", ms[i].Name)
		}
	}
}

func TestParseServerVersion(t *testing.T) {
	for in, want := range map[string]ServerVersion{"18.16.1": {18, 16}, "24.3.2.23": {24, 3}, " 22.8 ": {22, 8}} {
		got, err := ParseServerVersion(in)
		if err != nil || got != want {
			t.Errorf("ParseServerVersion(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "18", "x.y", "18.x"} {
		if _, err := ParseServerVersion(bad); err == nil {
			t.Errorf("ParseServerVersion(%q) accepted", bad)
		}
	}
	if !(ServerVersion{24, 8}).AtLeast(MinServer) || (ServerVersion{24, 7}).AtLeast(MinServer) || !(ServerVersion{25, 1}).AtLeast(MinServer) || (ServerVersion{18, 16}).AtLeast(MinServer) {
		t.Error("AtLeast")
	}
}

func TestSplitStatements(t *testing.T) {
	got := SplitStatements("-- only a comment;\nCREATE TABLE a (x UInt8) ENGINE = Memory;\n\n-- c\nSELECT ';' ;\n  ;\n")
	// A semicolon in a comment line ends nothing; empty statements vanish.
	if len(got) != 2 || got[0] != "-- only a comment;\nCREATE TABLE a (x UInt8) ENGINE = Memory" || got[1] != "-- c\nSELECT ';'" {
		t.Errorf("%q", got)
	}
}

func TestTopicsFile(t *testing.T) {
	ts, err := Topics()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tp := range ts {
		names[tp.Name] = true
	}
	for _, n := range []string{TopicSpans, TopicMetrics, TopicLogs, TopicDeadLetter} {
		if !names[n] {
			t.Errorf("topics.json lacks %s", n)
		}
	}
}

func TestCulpritsSchemaIsJSON(t *testing.T) {
	var v map[string]any
	if err := json.NewDecoder(bytes.NewReader(CulpritsV1Schema())).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if v["$schema"] == nil || v["properties"] == nil {
		t.Errorf("not a JSON Schema: %v", v["$schema"])
	}
}
