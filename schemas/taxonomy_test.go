package schemas

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestTaxonomyMatchesSchemas: the cause enums of the v1 culprits schema and
// of the OpenAPI document are the taxonomy of taxonomy.go, in its order.
func TestTaxonomyMatchesSchemas(t *testing.T) {
	var want []string
	for _, c := range Causes() {
		want = append(want, string(c))
	}
	enum := func(doc []byte, path ...string) []string {
		t.Helper()
		var v any
		if err := json.Unmarshal(doc, &v); err != nil {
			t.Fatal(err)
		}
		for _, p := range path {
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: no object at %q", path, p)
			}
			v = m[p]
		}
		list, ok := v.([]any)
		if !ok {
			t.Fatalf("%v: not a list: %v", path, v)
		}
		var out []string
		for _, e := range list {
			s, _ := e.(string)
			out = append(out, s)
		}
		return out
	}
	if got := enum(CulpritsV1Schema(), "$defs", "culprit", "properties", "cause", "enum"); !slices.Equal(got, want) {
		t.Errorf("culprits.v1.schema.json cause enum %v, taxonomy %v", got, want)
	}
	if got := enum(OpenAPI(), "components", "schemas", "Culprit", "properties", "cause", "enum"); !slices.Equal(got, want) {
		t.Errorf("openapi.json Culprit cause enum %v, taxonomy %v", got, want)
	}
	for _, c := range Causes() {
		if !c.Valid() {
			t.Errorf("%s not Valid", c)
		}
	}
	if Cause("gpu.overheating").Valid() {
		t.Error("an unknown cause is Valid")
	}
}
