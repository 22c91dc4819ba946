package causal

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/tailcause/tailcause/causal/causaltest"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func golden(t *testing.T, name, got string) {
	t.Helper()
	causaltest.Golden(t, *update, filepath.Join("testdata", name), got)
}
