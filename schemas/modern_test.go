package schemas

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestModernRenderingOnCurrentClickHouse applies the rendering for current
// servers (LowCardinality, codecs, TTL, skip indexes) to a current
// ClickHouse, in process through chDB (pip install chdb), and checks every
// table exists. CI installs chDB; locally the test skips without it.
func TestModernRenderingOnCurrentClickHouse(t *testing.T) {
	if err := exec.Command("python3", "-c", "import chdb").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI must run this test: chDB is missing (pip install chdb)")
		}
		t.Skip("chDB is not installed (pip install chdb): cannot check the modern rendering on a current ClickHouse")
	}
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	v, _ := ParseServerVersion("26.9")
	var stmts []string
	for _, m := range ms {
		ss, err := m.Statements(v)
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, ss...)
	}
	in, _ := json.Marshal(stmts)
	cmd := exec.Command("python3", "testdata/chdb_apply.py")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("apply the modern rendering in chDB: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Logf("chDB ClickHouse %s", lines[0])
	got := strings.Join(lines[1:], " ")
	for _, tbl := range []string{"requests", "token_stalls", "gpu_samples", "engine_samples", "rejected_input", "incidents", "culprits", "alert_outbox", "alert_attempts"} {
		if !strings.Contains(got, `"`+tbl+`"`) {
			t.Errorf("table %s missing after applying the modern rendering; tables: %s", tbl, got)
		}
	}
}
