package dag_test

import (
	"fmt"

	"github.com/tailcause/tailcause/causal/dag"
)

// The effect of KV-cache pressure on end-to-end latency is confounded by
// the prompt-length mix: the backdoor set says what to adjust for.
func ExampleDAG_BackdoorSet() {
	g, err := dag.Default()
	if err != nil {
		panic(err)
	}
	z, err := g.BackdoorSet("kv_usage", "e2e_ms", nil)
	fmt.Println(g.Version(), z, err)

	// A textbook M-bias: adjusting for the collider m would open a path.
	node := func(n string) dag.Node {
		return dag.Node{Name: n, Role: dag.RoleEngineState, Expr: n, Columns: []string{n}}
	}
	m, err := dag.New("m-bias@1",
		[]dag.Node{node("a"), node("b"), node("m"), node("x"), node("y")},
		[][2]string{{"a", "x"}, {"a", "m"}, {"b", "m"}, {"b", "y"}, {"x", "y"}})
	if err != nil {
		panic(err)
	}
	z, _ = m.BackdoorSet("x", "y", nil)
	ok, _ := m.IsBackdoorSet("x", "y", []string{"m"})
	fmt.Println(z, ok)
	// Output:
	// default@1 [engine prompt_mix output_mix prompt_tokens completion_tokens running] <nil>
	// [] false
}
