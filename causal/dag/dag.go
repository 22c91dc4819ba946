package dag

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/tailcause/tailcause/schemas"
)

// Role says what part of the system a DAG node describes.
type Role string

// Node roles.
const (
	RoleLoad         Role = "load"          // offered load (arrival rate)
	RoleRequestShape Role = "request_shape" // what was asked (prompt/output lengths)
	RoleEngineState  Role = "engine_state"  // engine scheduler and KV-cache state
	RoleGPUState     Role = "gpu_state"     // hardware state of the GPU
	RolePlacement    Role = "placement"     // which engine / GPU served the request
	RoleOutcome      Role = "outcome"       // latencies and errors
)

func (r Role) valid() bool {
	switch r {
	case RoleLoad, RoleRequestShape, RoleEngineState, RoleGPUState, RolePlacement, RoleOutcome:
		return true
	}
	return false
}

// Node is one variable of the causal DAG.
//
// An observed node is measured by Expr, a SQL expression over the columns of
// the requests table (listed in Columns). A latent node has no Expr and can
// never be adjusted for. A cause node names a taxonomy cause; Exposed, when
// set, is a SQL boolean saying that the cause is "on" for a row (the cause is
// then estimated as an indicator; otherwise as the level of Expr).
type Node struct {
	Name        string        `json:"name"`
	Role        Role          `json:"role"`
	Expr        string        `json:"expr,omitempty"`
	Columns     []string      `json:"columns,omitempty"`
	Cause       schemas.Cause `json:"cause,omitempty"`
	Exposed     string        `json:"exposed,omitempty"`
	Latent      bool          `json:"latent,omitempty"`
	Categorical bool          `json:"categorical,omitempty"` // Expr is a label; adjust with one indicator per entity
	Cost        float64       `json:"cost,omitempty"`        // cost of adjusting for it; 0 means 1
	Signal      string        `json:"signal,omitempty"`      // SLO signal an outcome node measures (e2e_latency, ttft, ...)
	// Samples, on a GPU cause node, reads the cause from the per-GPU
	// samples (gpu_samples): it tells which GPU of a multi-GPU engine
	// carries the cause, where a request row (which ran on all of them)
	// cannot.
	Samples *SampleSpec `json:"samples,omitempty"`
	// Floor, on a cause node measured by its level (no Exposed), is the
	// level below which the cause cannot act whatever its baseline: a
	// PCIe link moving a few MB/s does not contend, however far that is
	// above its usual few MB/s. A request is exposed only above both its
	// normal level and Floor; a window none of whose requests reaches
	// Floor has no exposure (the candidate is skipped). 0: no floor.
	Floor float64 `json:"floor,omitempty"`
	Doc   string  `json:"doc,omitempty"`
}

// SampleSpec measures a GPU cause node on the gpu_samples table: the
// samples of Metrics, each scored by Expr (a Float64 SQL expression of the
// sample's value, e.g. the exposure indicator of a throttle bit). The GPU
// whose mean score rose most from the baseline carries the cause.
//
// Fallback, when set, is read instead when none of the GPUs asked about
// has a sample of Metrics: an exporter that does not report them (dcgm-exporter's
// default field set leaves the clock-event reasons off, so a throttle shows
// only as the SM clock below its norm).
type SampleSpec struct {
	Metrics  []string    `json:"metrics"`
	Expr     string      `json:"expr"`
	Fallback *SampleSpec `json:"fallback,omitempty"`
}

// AdjustCost is the cost of putting n in an adjustment set (Cost, or 1).
func (n Node) AdjustCost() float64 {
	if n.Cost == 0 {
		return 1
	}
	return n.Cost
}

// Covariate is the Float64 SQL expression of the node's level.
func (n Node) Covariate() string { return "toFloat64(" + n.Expr + ")" }

// Indicator is the Float64 SQL 0/1 expression "this row's label is value",
// for categorical nodes (placement fixed effects, entity treatments).
func (n Node) Indicator(value string) string {
	return "toFloat64((" + n.Expr + ") = " + QuoteString(value) + ")"
}

// Treatment is the Float64 SQL expression used as the treatment when n is
// the cause under study: the exposure indicator when Exposed is set, the
// level otherwise.
func (n Node) Treatment() string {
	if n.Exposed != "" {
		return "toFloat64(" + n.Exposed + ")"
	}
	return n.Covariate()
}

// Delta is the Float64 SQL expression of Δ_i, how far row i's cause sits
// above its normal level: the exposure indicator when Exposed is set
// (normal = not exposed, and normalLevel is ignored), else
// greatest(level - normalLevel, 0).
func (n Node) Delta(normalLevel float64) string {
	if n.Exposed != "" {
		return n.Treatment()
	}
	return "greatest(" + n.Covariate() + " - " + FormatFloat(normalLevel) + ", 0)"
}

// QuoteString renders s as a ClickHouse string literal.
func QuoteString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' || s[i] == '\'' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('\'')
	return b.String()
}

// FormatFloat renders v as a SQL numeric literal that ClickHouse parses back
// to the same float64 (negative values parenthesised). v must be finite.
func FormatFloat(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		panic(fmt.Sprintf("causal: non-finite SQL literal %v", v))
	}
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if v < 0 {
		return "(" + s + ")"
	}
	return s
}

// DAG is a validated causal DAG. It is immutable and safe for concurrent use.
type DAG struct {
	version  string
	comment  string
	nodes    []Node
	index    map[string]int
	parents  [][]int
	children [][]int
	edges    [][2]string
}

// dagDoc is the JSON form of a DAG.
type dagDoc struct {
	Version string      `json:"version"`
	Comment string      `json:"comment,omitempty"`
	Nodes   []Node      `json:"nodes"`
	Edges   [][2]string `json:"edges"`
}

var nodeName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// ErrInvalid marks a DAG document that failed validation.
var ErrInvalid = errors.New("invalid dag")

// Default parses and validates the DAG shipped in schemas (version
// "default@1").
func Default() (*DAG, error) {
	b, err := schemas.DAGJSON(schemas.DefaultDAG)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// Parse decodes a DAG document (unknown fields are an error) and
// validates it.
func Parse(b []byte) (*DAG, error) {
	var d dagDoc
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("decode dag: %w", err)
	}
	g, err := New(d.Version, d.Nodes, d.Edges)
	if err != nil {
		return nil, err
	}
	g.comment = d.Comment
	return g, nil
}

// New validates nodes and edges (parent, child) and builds a DAG. All
// problems found are reported together, each wrapped with ErrInvalid.
// The DAG keeps copies of its arguments.
func New(version string, nodes []Node, edges [][2]string) (*DAG, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...))
	}
	if version == "" {
		bad("version is empty")
	}
	g := &DAG{version: version, index: make(map[string]int, len(nodes))}
	for i, n := range nodes {
		n.Columns = append([]string(nil), n.Columns...)
		if !nodeName.MatchString(n.Name) {
			bad("node %d: name %q must match %s", i, n.Name, nodeName)
		}
		if _, dup := g.index[n.Name]; dup {
			bad("node %q: duplicate name", n.Name)
			continue
		}
		if !n.Role.valid() {
			bad("node %q: unknown role %q", n.Name, n.Role)
		}
		if n.Latent {
			if n.Expr != "" || len(n.Columns) > 0 || n.Exposed != "" {
				bad("node %q: a latent node has no expr, columns or exposed", n.Name)
			}
			if n.Cause != "" {
				bad("node %q: a latent node cannot be a cause node (it cannot be measured)", n.Name)
			}
		} else {
			if strings.TrimSpace(n.Expr) == "" {
				bad("node %q: an observed node needs expr", n.Name)
			}
			if len(n.Columns) == 0 {
				bad("node %q: an observed node lists the requests columns its expr reads", n.Name)
			}
			for _, c := range n.Columns {
				if !containsWord(n.Expr+" "+n.Exposed, c) {
					bad("node %q: column %q is not used by its expr", n.Name, c)
				}
			}
		}
		if n.Cause != "" && !n.Cause.Valid() {
			bad("node %q: unknown cause %q", n.Name, n.Cause)
		}
		if n.Exposed != "" && n.Cause == "" {
			bad("node %q: exposed is only meaningful on a cause node", n.Name)
		}
		if n.Cause != "" && n.Role == RoleOutcome {
			bad("node %q: an outcome node cannot be a cause", n.Name)
		}
		if n.Signal != "" && n.Role != RoleOutcome {
			bad("node %q: only outcome nodes carry a signal", n.Name)
		}
		if n.Categorical && n.Exposed != "" {
			bad("node %q: a categorical node is treated per entity, not through exposed", n.Name)
		}
		if n.Floor != 0 && (n.Cause == "" || n.Exposed != "" || n.Categorical || n.Floor < 0 || math.IsNaN(n.Floor) || math.IsInf(n.Floor, 0)) {
			bad("node %q: a floor (%v) is a finite level >= 0 of a cause node measured by its level (no exposed, not categorical)", n.Name, n.Floor)
		}
		if n.Samples != nil && (n.Cause == "" || n.Role != RoleGPUState) {
			bad("node %q: samples are only read for GPU cause nodes", n.Name)
		}
		for sp, depth := n.Samples, 0; sp != nil; sp, depth = sp.Fallback, depth+1 {
			if depth == 1 && sp.Fallback != nil {
				bad("node %q: a samples fallback has no fallback of its own", n.Name)
				break
			}
			if len(sp.Metrics) == 0 || !containsWord(sp.Expr, "value") {
				bad("node %q: samples need metrics and an expr of value", n.Name)
			}
			for _, m := range sp.Metrics {
				if !nodeName.MatchString(m) {
					bad("node %q: sample metric %q must match %s", n.Name, m, nodeName)
				}
			}
		}
		if n.Cost < 0 || math.IsNaN(n.Cost) || math.IsInf(n.Cost, 0) {
			bad("node %q: cost %v must be finite and >= 0", n.Name, n.Cost)
		}
		g.index[n.Name] = len(g.nodes)
		g.nodes = append(g.nodes, n)
	}
	g.parents = make([][]int, len(g.nodes))
	g.children = make([][]int, len(g.nodes))
	seen := map[[2]string]bool{}
	for _, e := range edges {
		p, okp := g.index[e[0]]
		c, okc := g.index[e[1]]
		switch {
		case !okp || !okc:
			bad("edge %s -> %s: unknown node", e[0], e[1])
			continue
		case p == c:
			bad("edge %s -> %s: self loop", e[0], e[1])
			continue
		case seen[e]:
			bad("edge %s -> %s: duplicate", e[0], e[1])
			continue
		}
		seen[e] = true
		g.edges = append(g.edges, e)
		g.parents[c] = append(g.parents[c], p)
		g.children[p] = append(g.children[p], c)
	}
	for i := range g.nodes {
		sort.Ints(g.parents[i])
		sort.Ints(g.children[i])
		if g.nodes[i].Role == RoleOutcome {
			for _, c := range g.children[i] {
				if g.nodes[c].Role != RoleOutcome {
					bad("edge %s -> %s: an outcome node only causes outcome nodes", g.nodes[i].Name, g.nodes[c].Name)
				}
			}
		}
	}
	if cyc := g.cycle(); cyc != nil {
		bad("cycle %s", strings.Join(cyc, " -> "))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return g, nil
}

// containsWord reports whether w occurs in s as a whole identifier.
func containsWord(s, w string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		j += i
		before := j == 0 || !isIdent(s[j-1])
		after := j+len(w) == len(s) || !isIdent(s[j+len(w)])
		if before && after {
			return true
		}
		i = j + 1
	}
}

func isIdent(b byte) bool {
	return b == '_' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

// cycle returns the names along one directed cycle, or nil when acyclic.
func (g *DAG) cycle() []string {
	const (
		white = iota
		grey
		black
	)
	color := make([]int, len(g.nodes))
	stack := []int{}
	var found []string
	var visit func(int) bool
	visit = func(v int) bool {
		color[v] = grey
		stack = append(stack, v)
		for _, c := range g.children[v] {
			if color[c] == grey {
				for k := len(stack) - 1; k >= 0; k-- {
					if stack[k] == c {
						for _, s := range stack[k:] {
							found = append(found, g.nodes[s].Name)
						}
						found = append(found, g.nodes[c].Name)
						return true
					}
				}
			}
			if color[c] == white && visit(c) {
				return true
			}
		}
		stack = stack[:len(stack)-1]
		color[v] = black
		return false
	}
	for v := range g.nodes {
		if color[v] == white && visit(v) {
			return found
		}
	}
	return nil
}

// Version is the DAG's version string, e.g. "default@1"; culprits name it in
// method.dag.
func (g *DAG) Version() string { return g.version }

// Nodes returns a copy of the nodes in document order.
func (g *DAG) Nodes() []Node {
	out := make([]Node, len(g.nodes))
	for i, n := range g.nodes {
		n.Columns = append([]string(nil), n.Columns...)
		out[i] = n
	}
	return out
}

// Node returns the node with the given name.
func (g *DAG) Node(name string) (Node, bool) {
	i, ok := g.index[name]
	if !ok {
		return Node{}, false
	}
	n := g.nodes[i]
	n.Columns = append([]string(nil), n.Columns...)
	return n, true
}

// Edges returns a copy of the edges (parent, child) in document order.
func (g *DAG) Edges() [][2]string { return append([][2]string(nil), g.edges...) }

// Parents returns the names of name's parents (document order); nil for an
// unknown node.
func (g *DAG) Parents(name string) []string { return g.names(g.parents, name) }

// Children returns the names of name's children (document order).
func (g *DAG) Children(name string) []string { return g.names(g.children, name) }

func (g *DAG) names(adj [][]int, name string) []string {
	i, ok := g.index[name]
	if !ok {
		return nil
	}
	out := make([]string, 0, len(adj[i]))
	for _, j := range adj[i] {
		out = append(out, g.nodes[j].Name)
	}
	return out
}

// CauseNodes returns the nodes mapped to cause c (document order).
func (g *DAG) CauseNodes(c schemas.Cause) []Node {
	var out []Node
	for _, n := range g.nodes {
		if n.Cause == c {
			out = append(out, n)
		}
	}
	return out
}

// Outcome returns the outcome node that measures an SLO signal
// ("e2e_latency", "ttft", ...).
func (g *DAG) Outcome(signal string) (Node, bool) {
	for _, n := range g.nodes {
		if n.Role == RoleOutcome && n.Signal == signal {
			return n, true
		}
	}
	return Node{}, false
}

// CheckColumns reports the nodes that read a column absent from known (the
// columns of the requests table).
func (g *DAG) CheckColumns(known []string) error {
	set := make(map[string]bool, len(known))
	for _, k := range known {
		set[k] = true
	}
	var errs []error
	for _, n := range g.nodes {
		for _, c := range n.Columns {
			if !set[c] {
				errs = append(errs, fmt.Errorf("%w: node %q reads unknown column %q", ErrInvalid, n.Name, c))
			}
		}
	}
	return errors.Join(errs...)
}

// MarshalJSON writes the document form Parse reads.
func (g *DAG) MarshalJSON() ([]byte, error) {
	return json.Marshal(dagDoc{Version: g.version, Comment: g.comment, Nodes: g.nodes, Edges: g.edges})
}

func (g *DAG) lookup(names []string) ([]int, error) {
	out := make([]int, 0, len(names))
	for _, n := range names {
		i, ok := g.index[n]
		if !ok {
			return nil, fmt.Errorf("unknown node %q", n)
		}
		out = append(out, i)
	}
	return out, nil
}
