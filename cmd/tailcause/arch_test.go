package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/tailcause/tailcause"

var stages = []string{"ingest", "enrich", "causal", "query"}

// stageOf returns the stage a module-relative directory belongs to, or "".
func stageOf(rel string) string {
	for _, s := range stages {
		if rel == s || strings.HasPrefix(rel, s+"/") {
			return s
		}
	}
	return ""
}

// TestImportGraph enforces the layering of DESIGN.md: stages never import
// each other, internal/ imports no stage, schemas/ imports nothing of the
// module, lab/ (the fault lab and the eval, an app of its own) is imported
// only by cmd/, by lab/ itself and by tests, and the simulator
// (lab/faultlab) imports no stage. Test files count too, except in cmd/ (the
// wiring) and for imports of lab/.
func TestImportGraph(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if name == "testdata" || name == "bin" || (strings.HasPrefix(name, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		if rel == "cmd" || strings.HasPrefix(rel, "cmd/") || strings.HasPrefix(rel, "deploy/") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		from := stageOf(rel)
		inLab := rel == "lab" || strings.HasPrefix(rel, "lab/")
		isTest := strings.HasSuffix(path, "_test.go")
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(p, module+"/") {
				continue
			}
			target := strings.TrimPrefix(p, module+"/")
			checked++
			switch to := stageOf(target); {
			case rel == "schemas" || strings.HasPrefix(rel, "schemas/"):
				t.Errorf("%s imports %s: schemas/ must import nothing of the module", path, p)
			case strings.HasPrefix(rel, "internal/") && to != "":
				t.Errorf("%s imports stage %s: internal/ is shared plumbing and imports no stage", path, p)
			case from != "" && to != "" && to != from:
				t.Errorf("%s (stage %s) imports stage %s: stages meet only through schemas/ topics and tables", path, from, to)
			case !inLab && !isTest && (target == "lab" || strings.HasPrefix(target, "lab/")):
				t.Errorf("%s imports %s: lab/ is an app of its own, used only by cmd/ and by tests", path, p)
			case (rel == "lab/faultlab" || strings.HasPrefix(rel, "lab/faultlab/")) && to != "":
				t.Errorf("%s imports stage %s: the simulator emits telemetry as real sources do and knows no stage (only lab/eval drives the pipeline)", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no module imports found: the walk is broken")
	}
}

// TestCausalCoreIsPure: the mathematical core and the SQL generation of
// the causal stage (causal/dag, causal/stats, causal/sqlgen) do no I/O: their
// non-test files import no ClickHouse or Kafka client and nothing of
// internal/.
func TestCausalCoreIsPure(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, dir := range []string{"causal/dag", "causal/stats", "causal/sqlgen"} {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", dir, err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				for _, banned := range []string{module + "/internal/", "github.com/ClickHouse/", "github.com/segmentio/kafka-go", "github.com/twmb/", "database/sql", "net/"} {
					if p == strings.TrimSuffix(banned, "/") || strings.HasPrefix(p, banned) {
						t.Errorf("%s imports %s: %s is pure, no I/O", path, p, dir)
					}
				}
			}
		}
	}
}

// TestEveryPackageHasDoc: a doc.go per package says what it owns.
func TestEveryPackageHasDoc(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, dir := range []string{"ingest", "enrich", "enrich/normalize", "enrich/join", "causal", "causal/causaltest", "causal/dag", "causal/incident", "causal/sqlgen", "causal/stats", "schemas", "internal/chstore", "internal/kafkax", "internal/otlpkafka", "internal/testkit", "query", "query/alert", "internal/otlpfixture", "lab/eval", "lab/faultlab", "lab/faultlab/sink", "lab/faultlab/sink/sinktest"} {
		if _, err := os.Stat(filepath.Join(root, dir)); err != nil {
			continue // not every package exists at every stage of the project
		}
		if _, err := os.Stat(filepath.Join(root, dir, "doc.go")); err != nil {
			t.Errorf("%s has no doc.go", dir)
		}
	}
}
