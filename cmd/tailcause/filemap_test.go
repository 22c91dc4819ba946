package main

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// fileMap reads the paths of DESIGN.md's "File map" table: the
// backquoted paths of each row's first cell, without a trailing slash.
func fileMap(t *testing.T, root string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	quoted := regexp.MustCompile("`([^`]+)`")
	var paths []string
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = strings.TrimSpace(line) == "## File map"
			continue
		}
		if !in || !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range quoted.FindAllStringSubmatch(cells[1], -1) {
			paths = append(paths, strings.TrimSuffix(m[1], "/"))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal(`DESIGN.md has no "## File map" table`)
	}
	return paths
}

// ignoredTopLevel reads the root .gitignore's anchored names (/bin/,
// /tailcause): build outputs, not part of the tree.
func ignoredTopLevel(t *testing.T, root string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".gitignore"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "/") && !strings.Contains(strings.Trim(l, "/"), "/") {
			out[strings.Trim(l, "/")] = true
		}
	}
	return out
}

// TestFileMapMatchesTree keeps DESIGN.md's file map in step with the tree,
// read when the test runs (packages move while the map is edited): every
// listed path exists; every top-level directory has an entry (itself or a
// path under it); every package directly under internal/ is listed itself;
// every other Go package is listed or lies under a listed directory.
func TestFileMapMatchesTree(t *testing.T) {
	root := filepath.Join("..", "..")
	listed := fileMap(t, root)
	for _, p := range listed {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("DESIGN.md's file map lists %s, which does not exist", p)
		}
	}
	covered := func(dir string) bool {
		return slices.ContainsFunc(listed, func(p string) bool { return p == dir || strings.HasPrefix(dir, p+"/") })
	}
	ignored := ignoredTopLevel(t, root)
	top, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range top {
		name := e.Name()
		if !e.IsDir() || strings.HasPrefix(name, ".") || ignored[name] {
			continue
		}
		if !slices.ContainsFunc(listed, func(p string) bool { return p == name || strings.HasPrefix(p, name+"/") }) {
			t.Errorf("top-level directory %s/ has no entry in DESIGN.md's file map", name)
		}
	}
	packages := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			base := d.Name()
			if rel != "." && (strings.HasPrefix(base, ".") || base == "testdata" || ignored[rel]) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if dir == "." || filepath.Base(path) != firstGoFile(t, filepath.Dir(path)) {
			return nil // one check per package directory
		}
		packages++
		parts := strings.Split(dir, "/")
		switch {
		case parts[0] == "internal" && len(parts) == 2:
			if !slices.Contains(listed, dir) {
				t.Errorf("package %s is not listed in DESIGN.md's file map (every internal/ package has its own row)", dir)
			}
		case !covered(dir):
			t.Errorf("package %s is neither listed in DESIGN.md's file map nor under a listed directory", dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if packages < 10 {
		t.Fatalf("found %d package directories under %s: not the module root?", packages, root)
	}
}

// firstGoFile names the first .go file of dir in directory order.
func firstGoFile(t *testing.T, dir string) string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") {
			return e.Name()
		}
	}
	return ""
}

// TestDesignLinksExist: every Markdown link to a local file in the design
// documents, and every *.md file a package's doc.go names, exists (a
// DESIGN-causal.md was named for months that never did).
func TestDesignLinksExist(t *testing.T) {
	root := filepath.Join("..", "..")
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	for _, doc := range []string{"DESIGN.md", "README.md", "causal/DESIGN.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if os.IsNotExist(err) && doc != "DESIGN.md" {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, filepath.Dir(doc), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", doc, target)
			}
		}
	}
	named := regexp.MustCompile(`[A-Za-z0-9_./-]*\.md\b`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "doc.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, name := range named.FindAllString(string(b), -1) {
			if !strings.Contains(name, "DESIGN") && !strings.Contains(name, "README") {
				continue
			}
			_, errRoot := os.Stat(filepath.Join(root, name))
			_, errHere := os.Stat(filepath.Join(filepath.Dir(path), name))
			if errRoot != nil && errHere != nil {
				t.Errorf("%s names %s, which exists neither at the module root nor beside it", path, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
