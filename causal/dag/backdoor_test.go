package dag

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// textbook builds a DAG from "a->b" edges; names in latent are latent.
func textbook(t testing.TB, edges []string, latent ...string) *DAG {
	t.Helper()
	lat := map[string]bool{}
	for _, l := range latent {
		lat[l] = true
	}
	var nodes []Node
	seen := map[string]bool{}
	add := func(n string) {
		if seen[n] {
			return
		}
		seen[n] = true
		if lat[n] {
			nodes = append(nodes, Node{Name: n, Role: RoleEngineState, Latent: true})
		} else {
			nodes = append(nodes, Node{Name: n, Role: RoleEngineState, Expr: n, Columns: []string{n}})
		}
	}
	var es [][2]string
	for _, e := range edges {
		a, b, ok := strings.Cut(e, "->")
		if !ok {
			t.Fatalf("edge %q: want a->b", e)
		}
		add(a)
		add(b)
		es = append(es, [2]string{a, b})
	}
	for _, l := range latent {
		add(l)
	}
	g, err := New("test@1", nodes, es)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestBackdoorTextbook(t *testing.T) {
	tests := []struct {
		name    string
		edges   []string
		latent  []string
		want    []string // nil: refuse
		invalid [][]string
		valid   [][]string
	}{
		{name: "confounder", edges: []string{"z->x", "z->y", "x->y"}, want: []string{"z"},
			invalid: [][]string{{}}},
		{name: "mediator", edges: []string{"x->m", "m->y"}, want: []string{},
			invalid: [][]string{{"m"}}},
		{name: "collider", edges: []string{"x->c", "y->c", "x->y"}, want: []string{},
			invalid: [][]string{{"c"}}},
		{name: "m-bias", edges: []string{"a->x", "a->m", "b->m", "b->y", "x->y"}, want: []string{},
			invalid: [][]string{{"m"}}, valid: [][]string{{"m", "a"}, {"m", "b"}, {"a"}}},
		{name: "latent confounder", edges: []string{"u->x", "u->y", "x->y"}, latent: []string{"u"}},
		{name: "latent confounder, observed blocker", edges: []string{"u->z", "z->x", "u->y", "x->y"}, latent: []string{"u"},
			want: []string{"z"}},
		{name: "y causes x", edges: []string{"y->x"}},
		{name: "descendant of x is no adjuster", edges: []string{"u->x", "u->y", "x->d", "u->d", "x->y"}, latent: []string{"u"},
			invalid: [][]string{{"d"}}},
		{name: "one parent blocks two confounders", edges: []string{"a->c", "b->c", "c->x", "a->y", "b->y", "x->y"},
			want: []string{"c"}, valid: [][]string{{"a", "b"}, {"c", "a"}}},
		{name: "single parent cut", edges: []string{"a->c", "b->c", "c->x", "c->y", "x->y"},
			want: []string{"c"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := textbook(t, tc.edges, tc.latent...)
			got, err := g.BackdoorSet("x", "y", nil)
			if tc.want == nil {
				if !errors.Is(err, ErrNoBackdoorSet) {
					t.Fatalf("BackdoorSet = %v, %v; want ErrNoBackdoorSet", got, err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				sort.Strings(got)
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("BackdoorSet = %v, want %v", got, tc.want)
				}
			}
			for _, z := range tc.invalid {
				if ok, err := g.IsBackdoorSet("x", "y", z); err != nil || ok {
					t.Errorf("IsBackdoorSet(%v) = %v, %v; want false", z, ok, err)
				}
			}
			for _, z := range tc.valid {
				if ok, err := g.IsBackdoorSet("x", "y", z); err != nil || !ok {
					t.Errorf("IsBackdoorSet(%v) = %v, %v; want true", z, ok, err)
				}
			}
		})
	}
}

func TestBackdoorCost(t *testing.T) {
	g := textbook(t, []string{"a->c", "b->c", "c->x", "a->y", "b->y", "x->y"})
	cost := func(n Node) float64 {
		if n.Name == "c" {
			return 3
		}
		return 1
	}
	got, err := g.BackdoorSet("x", "y", &BackdoorOptions{Cost: cost})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("with c costing 3: %v, want [a b]", got)
	}
}

func TestDSeparated(t *testing.T) {
	g := textbook(t, []string{"a->b", "b->c", "a->d", "e->d", "d->f"})
	tests := []struct {
		x, y, z []string
		want    bool
	}{
		{[]string{"a"}, []string{"c"}, nil, false},           // chain open
		{[]string{"a"}, []string{"c"}, []string{"b"}, true},  // chain blocked
		{[]string{"b"}, []string{"d"}, nil, false},           // fork open
		{[]string{"b"}, []string{"d"}, []string{"a"}, true},  // fork blocked
		{[]string{"a"}, []string{"e"}, nil, true},            // collider closed
		{[]string{"a"}, []string{"e"}, []string{"d"}, false}, // collider opened
		{[]string{"a"}, []string{"e"}, []string{"f"}, false}, // by a descendant
		{[]string{"c"}, []string{"e"}, []string{"f"}, false},
		{[]string{"c"}, []string{"e"}, []string{"f", "a"}, true},
	}
	for _, tc := range tests {
		got, err := g.DSeparated(tc.x, tc.y, tc.z)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("DSeparated(%v, %v | %v) = %v, want %v", tc.x, tc.y, tc.z, got, tc.want)
		}
	}
	if _, err := g.DSeparated([]string{"nope"}, []string{"a"}, nil); err == nil {
		t.Error("unknown node accepted")
	}
}

func TestBackdoorDefaultDAG(t *testing.T) {
	g, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	z, err := g.BackdoorSet("kv_usage", "e2e_ms", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !contains(z, "prompt_tokens") {
		t.Errorf("kv_usage set %v lacks prompt_tokens: the decoy would pass as a KV fault", z)
	}
	for _, bad := range [][]string{{}, {"engine", "completion_tokens", "running"}} {
		if ok, _ := g.IsBackdoorSet("kv_usage", "e2e_ms", bad); ok {
			t.Errorf("%v accepted for kv_usage: prompt_tokens confounds it", bad)
		}
	}
	// A mediator of the KV effect is never adjusted for.
	if ok, _ := g.IsBackdoorSet("kv_usage", "e2e_ms", append(z, "preemptions")); ok {
		t.Error("adjusting for the mediator preemptions accepted")
	}
	// Without prompt_tokens the KV effect is not identified (its other
	// paths run through descendants of kv_usage): refuse.
	if _, err := g.BackdoorSet("kv_usage", "e2e_ms", &BackdoorOptions{Exclude: []string{"prompt_tokens"}}); !errors.Is(err, ErrNoBackdoorSet) {
		t.Errorf("excluding prompt_tokens: err = %v, want ErrNoBackdoorSet", err)
	}
	// The latent co-located load is blocked through the observed DRAM node.
	z, err = g.BackdoorSet("pcie", "e2e_ms", nil)
	if err != nil || !contains(z, "dram_active") {
		t.Errorf("pcie set %v, %v: want dram_active in it", z, err)
	}
	if _, err := g.BackdoorSet("pcie", "e2e_ms", &BackdoorOptions{Exclude: []string{"dram_active"}}); !errors.Is(err, ErrNoBackdoorSet) {
		t.Errorf("pcie without dram_active: err = %v, want ErrNoBackdoorSet", err)
	}
}

// TestBackdoorRandom checks BackdoorSet against brute force on random DAGs:
// a set is returned iff some valid set exists, it is valid, and no valid set
// is cheaper. It also checks DSeparated against the moralized ancestral
// graph criterion.
func TestBackdoorRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 300; iter++ {
		n := 4 + rng.IntN(5)
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("v%d", i)
		}
		var nodes []Node
		for i, nm := range names {
			nd := Node{Name: nm, Role: RoleEngineState, Expr: nm, Columns: []string{nm}, Cost: float64(1 + rng.IntN(3))}
			if i > 1 && rng.IntN(4) == 0 {
				nd = Node{Name: nm, Role: RoleEngineState, Latent: true}
			}
			nodes = append(nodes, nd)
		}
		var edges [][2]string
		for i := 0; i < n; i++ {
			for j := i + 1; j < n; j++ {
				if rng.Float64() < 0.35 {
					edges = append(edges, [2]string{names[i], names[j]})
				}
			}
		}
		// Shuffle node order so that topological order is not index order.
		rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		g, err := New("rand@1", nodes, edges)
		if err != nil {
			t.Fatal(err)
		}
		var obs []string
		for _, nd := range nodes {
			if !nd.Latent {
				obs = append(obs, nd.Name)
			}
		}
		if len(obs) < 2 {
			continue
		}
		x, y := obs[rng.IntN(len(obs))], obs[rng.IntN(len(obs))]
		if x == y {
			continue
		}
		// Brute force.
		var cands []string
		for _, o := range obs {
			if o != x && o != y {
				cands = append(cands, o)
			}
		}
		best := -1.0
		for mask := 0; mask < 1<<len(cands); mask++ {
			var z []string
			cost := 0.0
			for i, c := range cands {
				if mask&(1<<i) != 0 {
					z = append(z, c)
					nd, _ := g.Node(c)
					cost += nd.AdjustCost()
				}
			}
			ok, err := g.IsBackdoorSet(x, y, z)
			if err != nil {
				t.Fatal(err)
			}
			if ok && (best < 0 || cost < best) {
				best = cost
			}
			// d-separation cross-check on the same triple.
			if d1, _ := g.DSeparated([]string{x}, []string{y}, z); d1 != moralSeparated(g, x, y, z) {
				t.Fatalf("iter %d: DSeparated(%s,%s|%v) = %v disagrees with the moral graph; edges %v", iter, x, y, z, d1, edges)
			}
		}
		z, err := g.BackdoorSet(x, y, nil)
		if best < 0 {
			if !errors.Is(err, ErrNoBackdoorSet) {
				t.Fatalf("iter %d: %s->%s: got %v, %v; brute force finds no set; edges %v", iter, x, y, z, err, edges)
			}
			continue
		}
		if err != nil {
			t.Fatalf("iter %d: %s->%s: %v; brute force finds cost %v; edges %v", iter, x, y, err, best, edges)
		}
		cost := 0.0
		for _, v := range z {
			nd, _ := g.Node(v)
			cost += nd.AdjustCost()
		}
		if cost != best {
			t.Fatalf("iter %d: %s->%s: set %v costs %v, brute force %v; edges %v", iter, x, y, z, cost, best, edges)
		}
	}
}

// moralSeparated: x ⊥ y | z iff z separates x and y in the moral graph of
// the ancestral set of {x, y} ∪ z (Lauritzen et al. 1990).
func moralSeparated(g *DAG, x, y string, z []string) bool {
	anc := map[string]bool{}
	var up func(string)
	up = func(v string) {
		if anc[v] {
			return
		}
		anc[v] = true
		for _, p := range g.Parents(v) {
			up(p)
		}
	}
	up(x)
	up(y)
	for _, v := range z {
		up(v)
	}
	adj := map[string]map[string]bool{}
	link := func(a, b string) {
		if adj[a] == nil {
			adj[a] = map[string]bool{}
		}
		if adj[b] == nil {
			adj[b] = map[string]bool{}
		}
		adj[a][b], adj[b][a] = true, true
	}
	for v := range anc {
		ps := g.Parents(v)
		for i, p := range ps {
			link(p, v)
			for _, q := range ps[i+1:] {
				link(p, q)
			}
		}
	}
	blocked := map[string]bool{}
	for _, v := range z {
		blocked[v] = true
	}
	seen := map[string]bool{x: true}
	stack := []string{x}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if v == y {
			return false
		}
		for u := range adj[v] {
			if !seen[u] && !blocked[u] {
				seen[u] = true
				stack = append(stack, u)
			}
		}
	}
	return true
}
