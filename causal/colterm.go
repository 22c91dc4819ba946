package causal

import (
	"math"
	"strconv"
	"strings"
)

// A colTerm is a design expression (a regressor, outcome, sum or row
// condition) as the Go fits evaluate it (colfit.go): a tree over atoms,
// SQL expressions that ClickHouse evaluates once per analysis into a
// column of the frame. The compiler recognises only the shapes the
// analyzer itself writes around node expressions (Hinges, guard, products
// of indicators, 1 − w, a label compared with a literal) and leaves
// everything else an atom, so an unrecognised expression costs a column,
// never a different number: every recognised shape computes in float64
// exactly what ClickHouse computes for it.
type colTerm struct {
	kind termKind
	atom string  // termAtom: the Float64 SQL of the column; termEq: the String SQL of the label
	v    float64 // termConst: the value; termHinge: the knot
	lit  string  // termEq: the literal
	args []*colTerm
	aid  int // termAtom, termEq: the atom's number in its design (colFrame.bind)
}

type termKind uint8

const (
	termConst    termKind = iota
	termAtom              // a Float64 column read from ClickHouse
	termHinge             // greatest(arg − v, 0)
	termGuard             // if(isFinite(arg), arg, 0)
	termProd              // arg0 · arg1 · …
	termOneMinus          // 1 − arg
	termEq                // toFloat64(label = lit)
	termFinite            // isFinite(arg), as a row condition
)

// termCompiler compiles expressions; labels are the SQL expressions known
// to be strings (placement columns and categorical nodes), the only ones a
// comparison with a string literal is evaluated on in Go.
type termCompiler struct {
	labels map[string]bool
}

// compile returns the term of a Float64 expression.
func (tc termCompiler) compile(expr string) *colTerm {
	s := unwrap(strings.TrimSpace(expr))
	if v, ok := numberLiteral(s); ok {
		return &colTerm{kind: termConst, v: v}
	}
	if parts := splitTop(s, " * "); len(parts) > 1 && allTokens(parts) {
		t := &colTerm{kind: termProd}
		for _, p := range parts {
			t.args = append(t.args, tc.compile(p))
		}
		return t
	}
	if rest, ok := strings.CutPrefix(s, "1 - "); ok && isToken(rest) {
		return &colTerm{kind: termOneMinus, args: []*colTerm{tc.compile(rest)}}
	}
	if args, ok := callArgs(s, "greatest"); ok && len(args) == 2 && args[1] == "0" {
		if parts := splitTop(args[0], " - "); len(parts) == 2 && isToken(parts[0]) {
			if k, ok := numberLiteral(unwrap(parts[1])); ok {
				return &colTerm{kind: termHinge, v: k, args: []*colTerm{tc.compile(parts[0])}}
			}
		}
	}
	if args, ok := callArgs(s, "if"); ok && len(args) == 3 && args[0] == "isFinite("+args[1]+")" && args[2] == "0" {
		return &colTerm{kind: termGuard, args: []*colTerm{tc.compile(args[1])}}
	}
	if args, ok := callArgs(s, "toFloat64"); ok && len(args) == 1 {
		if t := tc.eq(args[0]); t != nil {
			return t
		}
		// toFloat64 of a number is that number: toFloat64(toFloat64(x)) is
		// the column of toFloat64(x).
		return tc.compile(args[0])
	}
	return &colTerm{kind: termAtom, atom: "toFloat64(" + s + ")"}
}

// eq compiles "label = 'lit'" (label a known string expression), else nil.
func (tc termCompiler) eq(s string) *colTerm {
	parts := splitTop(unwrap(strings.TrimSpace(s)), " = ")
	if len(parts) != 2 {
		return nil
	}
	label := unwrap(parts[0])
	lit, ok := unquote(parts[1])
	if !ok || !tc.labels[label] {
		return nil
	}
	return &colTerm{kind: termEq, atom: "toString(" + label + ")", lit: lit}
}

// condition compiles one conjunct of a WHERE: isFinite(x), a label
// comparison, or any other boolean (an atom, true when not 0).
func (tc termCompiler) condition(expr string) *colTerm {
	s := unwrap(strings.TrimSpace(expr))
	if args, ok := callArgs(s, "isFinite"); ok && len(args) == 1 {
		return &colTerm{kind: termFinite, args: []*colTerm{tc.compile(args[0])}}
	}
	if t := tc.eq(s); t != nil {
		return t
	}
	return &colTerm{kind: termAtom, atom: "toFloat64(" + s + ")"}
}

// conjuncts splits a WHERE at its top-level ANDs (nil: there is a
// top-level OR, and the whole is one condition).
func conjuncts(where string) []string {
	where = strings.TrimSpace(where)
	if where == "" {
		return nil
	}
	if len(splitTop(where, " OR ")) > 1 {
		return []string{where}
	}
	return splitTop(where, " AND ")
}

// atoms appends the atoms of t (numeric and label) to the sets.
func (t *colTerm) atoms(nums, labels map[string]bool) {
	switch t.kind {
	case termAtom:
		nums[t.atom] = true
	case termEq:
		labels[t.atom] = true
	}
	for _, a := range t.args {
		a.atoms(nums, labels)
	}
}

// numberLiteral parses a plain SQL numeric literal (FormatFloat's output,
// a negative one in parentheses).
func numberLiteral(s string) (float64, bool) {
	s = unwrap(s)
	if s == "" || !(s[0] >= '0' && s[0] <= '9' || s[0] == '-' || s[0] == '.') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
			return 0, false
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}

// scanTop calls f for every byte of s outside quotes and parentheses.
func scanTop(s string, f func(i int) bool) {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'':
			for i++; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' {
					i++
				}
			}
		case c == '(' || c == '[':
			depth++
		case c == ')' || c == ']':
			depth--
		case depth == 0:
			if !f(i) {
				return
			}
		}
	}
}

// splitTop splits s at the top-level occurrences of sep.
func splitTop(s, sep string) []string {
	var out []string
	last := 0
	scanTop(s, func(i int) bool {
		if i >= last && strings.HasPrefix(s[i:], sep) {
			out = append(out, strings.TrimSpace(s[last:i]))
			last = i + len(sep)
		}
		return true
	})
	return append(out, strings.TrimSpace(s[last:]))
}

// isToken reports whether s has no top-level space: an operand that binds
// tighter than any binary operator (an identifier, a call, a literal, a
// parenthesised expression).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	ok := true
	scanTop(s, func(i int) bool {
		if s[i] == ' ' {
			ok = false
		}
		return ok
	})
	return ok
}

func allTokens(parts []string) bool {
	for _, p := range parts {
		if !isToken(p) {
			return false
		}
	}
	return true
}

// unwrap removes parentheses around the whole of s.
func unwrap(s string) string {
	for len(s) >= 2 && s[0] == '(' && s[len(s)-1] == ')' {
		depth, whole := 0, true
		for i := 0; i < len(s)-1; i++ {
			switch s[i] {
			case '(':
				depth++
			case ')':
				depth--
			case '\'':
				for i++; i < len(s) && s[i] != '\''; i++ {
					if s[i] == '\\' {
						i++
					}
				}
			}
			if depth == 0 {
				whole = false
				break
			}
		}
		if !whole {
			return s
		}
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	return s
}

// callArgs returns the top-level arguments of name(...) when s is exactly
// that call.
func callArgs(s, name string) ([]string, bool) {
	if !strings.HasPrefix(s, name+"(") || !strings.HasSuffix(s, ")") {
		return nil, false
	}
	inner := s[len(name):]
	if unwrap(inner) == inner && inner != "()" {
		return nil, false // the parenthesis closes before the end
	}
	inner = inner[1 : len(inner)-1]
	parts := splitTop(inner, ",")
	return parts, true
}

// unquote reads a QuoteString literal.
func unquote(s string) (string, bool) {
	if len(s) < 2 || s[0] != '\'' || s[len(s)-1] != '\'' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s)-1:
			i++
			b.WriteByte(s[i])
		case c == '\\' || c == '\'':
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}
