package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var updateCLIReference = flag.Bool("update", false, "rewrite docs/cli.md from `tailcause help --markdown`")

// TestCLIReference: docs/cli.md is what `tailcause help --markdown` prints
// now, so the checked-in reference and the binary's help cannot drift.
// After changing a flag, a help text or a command: go test ./cmd/tailcause
// -run TestCLIReference -update.
func TestCLIReference(t *testing.T) {
	code, got, errs, _ := runEnv(t, secretEnv, 5*time.Second, "help", "--markdown")
	if code != 0 || errs != "" {
		t.Fatalf("tailcause help --markdown: exit %d, stderr %q", code, errs)
	}
	var direct bytes.Buffer
	writeMarkdown(context.Background(), &direct, commands())
	if direct.String() != got {
		t.Error("help --markdown differs from writeMarkdown")
	}
	for _, want := range []string{"## tailcause all\n", "## tailcause query\n", "-max-wait duration", "| `TAILCAUSE_INGEST_TOKEN` |"} {
		if !strings.Contains(got, want) {
			t.Errorf("the reference lacks %q", want)
		}
	}
	if strings.Contains(got, "s3cret") {
		t.Error("the reference shows a value from the environment")
	}
	path := filepath.Join("..", "..", cliReference)
	if *updateCLIReference {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the checked-in reference: %v (generate it: go test ./cmd/tailcause -run TestCLIReference -update)", err)
	}
	if string(want) != got {
		t.Errorf("%s is stale: regenerate it with go test ./cmd/tailcause -run TestCLIReference -update (or go run ./cmd/tailcause help --markdown > %s)\n%s",
			cliReference, cliReference, firstDifference(string(want), got))
	}
}

// firstDifference shows the first line where two texts differ.
func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ":\n  checked in: " + x + "\n  generated:  " + y
		}
	}
	return ""
}
