package schemas

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// dagFiles holds the causal DAG documents; package causal parses and
// validates them (this package only ships the bytes).
//
//go:embed dag/*.json
var dagFiles embed.FS

// DefaultDAG is the name of the DAG the causal module uses unless told
// otherwise; its document carries the version "default@1".
const DefaultDAG = "default"

// DAGJSON returns the embedded DAG document with the given name
// (the file dag/<name>.json).
func DAGJSON(name string) ([]byte, error) {
	if name == "" || strings.ContainsAny(name, "/\\.") {
		return nil, fmt.Errorf("read dag %q: invalid name", name)
	}
	b, err := dagFiles.ReadFile(path.Join("dag", name+".json"))
	if err != nil {
		return nil, fmt.Errorf("read dag %q: %w", name, err)
	}
	return b, nil
}

// DAGNames lists the embedded DAG documents, sorted.
func DAGNames() ([]string, error) {
	entries, err := fs.ReadDir(dagFiles, "dag")
	if err != nil {
		return nil, fmt.Errorf("read embedded dags: %w", err)
	}
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}
