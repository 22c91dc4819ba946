package causaltest

import (
	"os"
	"testing"
)

// Golden compares got with the golden file at path, after writing got
// there when update is set (a test's -update flag).
func Golden(t testing.TB, update bool, path, got string) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file (run with -update after review):\n%s", path, got)
	}
}
