package dag

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// ErrNoBackdoorSet is returned when no set of adjustable nodes satisfies the
// backdoor criterion: the effect is not identified by adjustment and the
// estimator must refuse rather than report a biased number.
var ErrNoBackdoorSet = errors.New("no valid backdoor adjustment set")

// DSeparated reports whether every node of xs is d-separated from every node
// of ys given zs. It uses the reachability ("Bayes-ball") algorithm of Koller
// and Friedman (Algorithm 3.1), O(nodes + edges). Latent nodes are ordinary
// nodes here; they are simply never in zs when the caller builds zs from
// measured nodes. Unknown names are an error.
func (g *DAG) DSeparated(xs, ys, zs []string) (bool, error) {
	x, err := g.lookup(xs)
	if err != nil {
		return false, fmt.Errorf("d-separation: %w", err)
	}
	y, err := g.lookup(ys)
	if err != nil {
		return false, fmt.Errorf("d-separation: %w", err)
	}
	z, err := g.lookup(zs)
	if err != nil {
		return false, fmt.Errorf("d-separation: %w", err)
	}
	reach := g.reachable(x, z, -1)
	for _, v := range y {
		if reach[v] {
			return false, nil
		}
	}
	return true, nil
}

// reachable marks the nodes connected to some node of x by a trail that is
// active given z. When cut >= 0 the outgoing edges of node cut are ignored
// (the backdoor graph G with X's out-edges removed).
func (g *DAG) reachable(x, z []int, cut int) []bool {
	n := len(g.nodes)
	inZ := make([]bool, n)
	for _, v := range z {
		inZ[v] = true
	}
	// anZ: z and its ancestors (a collider is open iff it is in anZ).
	anZ := make([]bool, n)
	stack := append([]int(nil), z...)
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if anZ[v] {
			continue
		}
		anZ[v] = true
		for _, p := range g.parents[v] {
			if p != cut { // an edge out of cut is removed
				stack = append(stack, p)
			}
		}
	}
	const (
		up   = 0 // arrived from a child: moving against an edge
		down = 1 // arrived from a parent: moving along an edge
	)
	visited := make([][2]bool, n)
	reach := make([]bool, n)
	type item struct{ v, dir int }
	queue := make([]item, 0, 2*n)
	for _, v := range x {
		queue = append(queue, item{v, up})
	}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		if visited[it.v][it.dir] {
			continue
		}
		visited[it.v][it.dir] = true
		if !inZ[it.v] {
			reach[it.v] = true
		}
		children := g.children[it.v]
		if it.v == cut {
			children = nil
		}
		if it.dir == up && !inZ[it.v] {
			for _, p := range g.parents[it.v] {
				if p == cut {
					continue
				}
				queue = append(queue, item{p, up})
			}
			for _, c := range children {
				queue = append(queue, item{c, down})
			}
		} else if it.dir == down {
			if !inZ[it.v] {
				for _, c := range children {
					queue = append(queue, item{c, down})
				}
			}
			if anZ[it.v] {
				for _, p := range g.parents[it.v] {
					if p == cut {
						continue
					}
					queue = append(queue, item{p, up})
				}
			}
		}
	}
	for _, v := range x {
		reach[v] = false
	}
	return reach
}

// descendants marks v and everything downstream of it.
func (g *DAG) descendants(v int) []bool {
	de := make([]bool, len(g.nodes))
	stack := []int{v}
	for len(stack) > 0 {
		u := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if de[u] {
			continue
		}
		de[u] = true
		stack = append(stack, g.children[u]...)
	}
	return de
}

// IsBackdoorSet reports whether z satisfies Pearl's backdoor criterion for
// the effect of x on y: no node of z is a descendant of x (or is x or y), and
// z blocks every trail between x and y that starts with an edge into x. A
// latent node in z makes z invalid (it cannot be adjusted for).
func (g *DAG) IsBackdoorSet(x, y string, z []string) (bool, error) {
	xi, yi, err := g.treatmentOutcome(x, y)
	if err != nil {
		return false, err
	}
	zi, err := g.lookup(z)
	if err != nil {
		return false, fmt.Errorf("backdoor set: %w", err)
	}
	de := g.descendants(xi)
	for _, v := range zi {
		if de[v] || v == yi || g.nodes[v].Latent {
			return false, nil
		}
	}
	return !g.reachable([]int{xi}, zi, xi)[yi], nil
}

func (g *DAG) treatmentOutcome(x, y string) (int, int, error) {
	xi, ok := g.index[x]
	if !ok {
		return 0, 0, fmt.Errorf("backdoor: unknown treatment node %q", x)
	}
	yi, ok := g.index[y]
	if !ok {
		return 0, 0, fmt.Errorf("backdoor: unknown outcome node %q", y)
	}
	if xi == yi {
		return 0, 0, fmt.Errorf("backdoor: treatment and outcome are both %q", x)
	}
	return xi, yi, nil
}

// BackdoorOptions tunes BackdoorSet. A nil *BackdoorOptions means defaults.
type BackdoorOptions struct {
	// Cost is the price of adjusting for a node (> 0, finite). Nil means
	// Node.AdjustCost: 1, or the node's cost (placement nodes cost more, as
	// they expand into one indicator column per entity).
	Cost func(Node) float64
	// Exclude names nodes that must not be adjusted for, on top of latent
	// nodes (e.g. a column known to be missing in this window).
	Exclude []string
}

// BackdoorSet returns a minimum-cost set of observed nodes that satisfies the
// backdoor criterion for the effect of x on y, sorted in document order
// (empty, not nil, when no adjustment is needed). When no such set exists,
// because a latent (or excluded) node confounds x and y, or y is a parent of
// x, the error wraps ErrNoBackdoorSet.
//
// Method: a set of non-descendants of x is a backdoor set iff it d-separates
// x and y in G_x (G with x's outgoing edges removed); a minimum separator
// can be chosen among the ancestors of {x, y} in G_x, where d-separation is
// vertex separation in the moral graph of that ancestral set (Lauritzen;
// van der Zander, Liśkiewicz and Textor 2019). The set is therefore a
// minimum-cost vertex cut between x and y in that moral graph restricted to
// adjustable nodes, found by max-flow on the split-vertex network. Every
// positive-cost minimum cut is inclusion-minimal. Among equal-cost cuts the
// one nearest x is returned (deterministic: document order).
func (g *DAG) BackdoorSet(x, y string, opts *BackdoorOptions) ([]string, error) {
	xi, yi, err := g.treatmentOutcome(x, y)
	if err != nil {
		return nil, err
	}
	cost := Node.AdjustCost
	var exclude map[int]bool
	if opts != nil {
		if opts.Cost != nil {
			cost = opts.Cost
		}
		ex, err := g.lookup(opts.Exclude)
		if err != nil {
			return nil, fmt.Errorf("backdoor: exclude: %w", err)
		}
		exclude = map[int]bool{}
		for _, v := range ex {
			exclude[v] = true
		}
	}
	n := len(g.nodes)
	de := g.descendants(xi)

	// Ancestors of {x, y} in G_x (x's out-edges never lead upwards, so
	// only edges out of x need skipping).
	anc := make([]bool, n)
	stack := []int{xi, yi}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if anc[v] {
			continue
		}
		anc[v] = true
		for _, p := range g.parents[v] {
			if p != xi {
				stack = append(stack, p)
			}
		}
	}

	// Moral graph of G_x restricted to anc.
	adj := make([]map[int]bool, n)
	link := func(a, b int) {
		if adj[a] == nil {
			adj[a] = map[int]bool{}
		}
		if adj[b] == nil {
			adj[b] = map[int]bool{}
		}
		adj[a][b], adj[b][a] = true, true
	}
	for v := 0; v < n; v++ {
		if !anc[v] {
			continue
		}
		var ps []int
		for _, p := range g.parents[v] {
			if p != xi {
				ps = append(ps, p)
			}
		}
		for i, p := range ps {
			link(p, v)
			for _, q := range ps[i+1:] {
				link(p, q)
			}
		}
	}
	if adj[xi][yi] {
		return nil, fmt.Errorf("backdoor %s -> %s: %w (%s is a parent of %s, or they share a child upstream)", x, y, ErrNoBackdoorSet, y, x)
	}

	// Split-vertex flow network: v_in = 2v, v_out = 2v+1.
	inf := math.Inf(1)
	capOf := make(map[[2]int]float64)
	nbrs := make([][]int, 2*n)
	addArc := func(a, b int, c float64) {
		if _, ok := capOf[[2]int{a, b}]; !ok {
			nbrs[a] = append(nbrs[a], b)
			nbrs[b] = append(nbrs[b], a)
			capOf[[2]int{b, a}] += 0
		}
		capOf[[2]int{a, b}] += c
	}
	for v := 0; v < n; v++ {
		if !anc[v] {
			continue
		}
		c := inf
		if v != xi && v != yi && !de[v] && !g.nodes[v].Latent && !exclude[v] {
			c = cost(g.nodes[v])
			if !(c > 0) || math.IsInf(c, 0) {
				panic(fmt.Sprintf("causal: BackdoorOptions.Cost(%q) = %v, want finite > 0", g.nodes[v].Name, c))
			}
		}
		addArc(2*v, 2*v+1, c)
		nb := make([]int, 0, len(adj[v]))
		for u := range adj[v] {
			nb = append(nb, u)
		}
		sort.Ints(nb)
		for _, u := range nb {
			addArc(2*v+1, 2*u, inf)
		}
	}
	for i := range nbrs {
		sort.Ints(nbrs[i])
	}
	src, dst := 2*xi+1, 2*yi
	// Edmonds-Karp.
	prev := make([]int, 2*n)
	for {
		for i := range prev {
			prev[i] = -1
		}
		prev[src] = src
		queue := []int{src}
		for len(queue) > 0 && prev[dst] < 0 {
			a := queue[0]
			queue = queue[1:]
			for _, b := range nbrs[a] {
				if prev[b] < 0 && capOf[[2]int{a, b}] > 0 {
					prev[b] = a
					queue = append(queue, b)
				}
			}
		}
		if prev[dst] < 0 {
			break
		}
		bott := inf
		for b := dst; b != src; b = prev[b] {
			bott = math.Min(bott, capOf[[2]int{prev[b], b}])
		}
		if math.IsInf(bott, 1) {
			return nil, fmt.Errorf("backdoor %s -> %s: %w (a trail into %s passes only through latent, excluded or descendant nodes)", x, y, ErrNoBackdoorSet, x)
		}
		for b := dst; b != src; b = prev[b] {
			capOf[[2]int{prev[b], b}] -= bott
			capOf[[2]int{b, prev[b]}] += bott
		}
	}
	// prev now marks the source side of a minimum cut.
	z := []string{}
	for v := 0; v < n; v++ {
		if anc[v] && prev[2*v] >= 0 && prev[2*v+1] < 0 {
			z = append(z, g.nodes[v].Name)
		}
	}
	ok, err := g.IsBackdoorSet(x, y, z)
	if err != nil {
		return nil, err
	}
	if !ok {
		// Unreachable if the theory above holds; refuse rather than
		// return an invalid set.
		return nil, fmt.Errorf("backdoor %s -> %s: internal error: cut %v is not a backdoor set: %w", x, y, z, ErrNoBackdoorSet)
	}
	return z, nil
}
