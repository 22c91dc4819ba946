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
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestRenderGolden pins both renderings of every migration.
func TestRenderGolden(t *testing.T) {
	for _, v := range []ServerVersion{Legacy, Modern} {
		got, err := RenderAll(v)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", "render-"+v.String()+".sql")
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./schemas -update)", err)
		}
		if got != string(want) {
			t.Errorf("rendering for %s differs from %s; rerun with -update if intended", v, path)
		}
	}
}

// TestLegacyRenderingAvoidsNewFeatures: nothing 18.16 lacks reaches it.
func TestLegacyRenderingAvoidsNewFeatures(t *testing.T) {
	legacy, err := RenderAll(Legacy)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"LowCardinality", "CODEC", "TTL ", "INDEX ", "DateTime64", "Map(", "JSONExtract", "toStartOfInterval"} {
		if strings.Contains(legacy, bad) {
			t.Errorf("the 18.16 rendering contains %q", bad)
		}
	}
	modern, err := RenderAll(ServerVersion{24, 8})
	if err != nil {
		t.Fatal(err)
	}
	for _, good := range []string{"LowCardinality(String)", "CODEC(Delta, ZSTD(1))", "TTL start_time + INTERVAL 30 DAY", "INDEX idx_trace trace_id TYPE bloom_filter"} {
		if !strings.Contains(modern, good) {
			t.Errorf("the 24.8 rendering lacks %q", good)
		}
	}
	// Both renderings create the same tables with the same columns, in order.
	if a, b := columnsOf(t, legacy), columnsOf(t, modern); !equal(a, b) {
		t.Errorf("renderings disagree on columns:\n18.16: %v\n24.8:  %v", a, b)
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
		stmts, err := m.Statements(Legacy)
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
	if !(ServerVersion{22, 8}).AtLeast(Modern) || (ServerVersion{22, 7}).AtLeast(Modern) || !(ServerVersion{23, 1}).AtLeast(Modern) {
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
