package causal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tailcause/tailcause/causal/dag"
)

// Session is a connection of its own to the store (Sessioner): the
// statements sent through it run in one server session, so a temporary
// table created with Exec is seen by the later queries and dropped by
// Close.
type Session interface {
	Querier
	Exec(ctx context.Context, stmt string) error
	Close() error
}

// Sessioner is a store that can open a Session. An Analyzer whose Querier
// is one reads the requests of each analysis once, into a snapshot in a
// session of its own; any other Querier is read directly. Session returns
// ErrReadOnly when the store's user may create no temporary table.
type Sessioner interface {
	Session(ctx context.Context) (Session, error)
}

// ErrReadOnly is a Sessioner's answer for a user on a readonly = 1
// profile: no temporary table, so no snapshot; the analysis reads the
// table directly without attempting one (a read-only user's query log
// shows only SELECTs).
var ErrReadOnly = errors.New("the store's user is on a readonly = 1 profile: no temporary tables")

// Reads says how an analysis (or a sweep) read the requests table.
type Reads struct {
	// SnapshotRows is the number of rows of the snapshot every query read:
	// the requests of the scope in the window and the baseline (or the hour
	// before the window), deduplicated once (FINAL) into a temporary table.
	// 0 when no snapshot was made.
	SnapshotRows int64
	// Direct says why no snapshot was made ("" when one was): each query
	// then reads the table with FINAL.
	Direct string
	// SnapshotTime is the time taken to make the snapshot.
	SnapshotTime time.Duration
}

// snapshotTable is the temporary table's name (one per session).
const snapshotTable = "tc_snapshot"

// snapshot is the coverage of a snapshot: the rows of scope (every key
// equal) in ivs, with the columns of outcome y; only those where y is
// finite when finite is set.
type snapshot struct {
	cols   map[string]bool // the columns it holds
	scope  map[string]string
	y      string
	finite bool
	ivs    []Interval
	reads  Reads
}

// covers reports whether every row a question over scope with outcome y
// reads in ivs is in the snapshot (all: the question reads rows whatever
// their outcome).
func (s *snapshot) covers(scope map[string]string, y string, all bool, ivs []Interval) bool {
	for k, v := range s.scope {
		if scope[k] != v {
			return false
		}
	}
	for k := range scope {
		if !s.cols[k] {
			return false
		}
	}
	if s.y != y || s.finite && all {
		return false
	}
	for _, iv := range ivs {
		in := false
		for _, c := range s.ivs {
			if !iv.Start.Before(c.Start) && !iv.End.After(c.End) {
				in = true
			}
		}
		if !in {
			return false
		}
	}
	return true
}

// table is what the queries of an analysis read requests from: the
// snapshot, or the table itself with FINAL (at-least-once delivery:
// duplicates collapse only on merge).
func (a *Analyzer) table() string {
	if a.snap != nil {
		return snapshotTable
	}
	return a.cfg.Table + " FINAL"
}

// uidHash is the SQL of the hash of a request's uid that
// quantilesDeterministic samples by: a column of the snapshot, which holds
// it instead of the uid.
func (a *Analyzer) uidHash() string {
	if a.snap != nil {
		return snapshotUIDHash
	}
	return uidHashSQL
}

// uidHashSQL is the hash of a request's uid over the requests table;
// snapshotUIDHash is the snapshot's column holding it.
const (
	uidHashSQL      = "cityHash64(uid)"
	snapshotUIDHash = "tc_uid_hash"
)

// coverage is what a question with this window and baseline reads: the
// window, and the explicit baseline or else the BaselineLength before the
// window (the default baseline; a change-point baseline lies inside the
// window).
func (a *Analyzer) coverage(win Interval, base *Interval) []Interval {
	if base != nil {
		return []Interval{win, *base}
	}
	return []Interval{{Start: win.Start.Add(-a.cfg.BaselineLength), End: win.Start}, win}
}

// withSnapshot returns the analyzer to answer a question with, and the
// function that releases it. The question is over scope with outcome y and
// reads ivs (only rows where y is finite, unless all). The analyzer is a
// itself when its snapshot covers the question; else one reading a
// snapshot of the question's rows in a session of its own, made now; else
// (DirectReads, a store without sessions, a user who may not create
// temporary tables: readonly = 1) one reading the store directly, with the
// reason. made reports whether a snapshot was made here (its statements
// count as queries of the question).
//
// The snapshot holds only the columns the DAG's nodes, the scope and the
// outcome use, of the rows every query of the question reads (scope,
// finite outcome, window and baseline), read once with FINAL; the queries
// then read it instead, with their own conditions, so their answers are
// those of the direct reads.
func (a *Analyzer) withSnapshot(ctx context.Context, scope map[string]string, y string, all bool, ivs []Interval) (sa *Analyzer, made bool, release func(), err error) {
	noop := func() {}
	if a.snap != nil && a.snap.covers(scope, y, all, ivs) {
		return a, false, noop, nil
	}
	d := a
	if a.direct != nil {
		d = a.direct
	}
	direct := func(why string) *Analyzer {
		c := *d
		c.reads = Reads{Direct: why}
		return &c
	}
	if d.cfg.DirectReads {
		return direct("configured (Config.DirectReads)"), false, noop, nil
	}
	ss, ok := d.db.(Sessioner)
	if !ok {
		return direct("the store opens no sessions"), false, noop, nil
	}
	t0 := time.Now()
	sess, err := ss.Session(ctx)
	if errors.Is(err, ErrReadOnly) {
		return direct(err.Error()), false, noop, nil
	}
	if err != nil {
		return nil, false, noop, fmt.Errorf("open a session for the snapshot: %w", err)
	}
	conds := []string{scopeWhere(scope)}
	if !all {
		conds = append(conds, "isFinite("+y+")")
	}
	parts := make([]string, len(ivs))
	for i, iv := range ivs {
		parts[i] = inInterval(iv)
	}
	conds = append(conds, prune(ivs...), "("+strings.Join(parts, " OR ")+")")
	// A Memory table is read in the blocks it was written in: blocks of
	// 8192 rows, as MergeTree reads its granules, keep the intermediate
	// columns of the fits' hundreds of expressions small (one 1M-row block
	// held ~1 GB per query) and let every query read with all its threads.
	cols := d.snapshotColumns(scope, y)
	stmt := fmt.Sprintf("CREATE TEMPORARY TABLE %s ENGINE = Memory AS SELECT %s, %s AS %s FROM %s FINAL WHERE %s SETTINGS max_block_size = 8192, min_insert_block_size_rows = 8192, min_insert_block_size_bytes = 0",
		snapshotTable, strings.Join(cols, ", "), uidHashSQL, snapshotUIDHash, d.cfg.Table, strings.Join(conds, " AND "))
	if err := sess.Exec(ctx, stmt); err != nil {
		sess.Close()
		// Not permitted (a user without the right), beyond the server's
		// memory limit, or a DAG expression naming something that is not a
		// column: the direct reads give the same answer, slower.
		d.log.Debug("causal snapshot refused: reading the table directly", "error", err)
		return direct("no snapshot: " + err.Error()), false, noop, nil
	}
	var n []float64
	if n, err = queryFloats(ctx, sess, "snapshot rows", "SELECT toFloat64(count()) FROM "+snapshotTable, 1); err != nil {
		sess.Close()
		return nil, false, noop, err
	}
	c := *d
	c.db, c.direct = sess, d
	held := map[string]bool{}
	for _, col := range cols {
		held[col] = true
	}
	c.snap = &snapshot{cols: held, scope: scope, y: y, finite: !all, ivs: ivs, reads: Reads{SnapshotRows: int64(n[0]), SnapshotTime: time.Since(t0)}}
	c.reads = c.snap.reads
	d.log.Debug("causal snapshot", "rows", int64(n[0]), "duration", time.Since(t0))
	return &c, true, func() { sess.Close() }, nil
}

// snapshotStatements is the number of statements making a snapshot sends.
const snapshotStatements = 2

// snapshotColumns are the requests columns the queries of a question over
// scope may read: the time and placement columns, the scope's
// columns, and every column named by a node of the DAG other than an
// outcome (its columns and the identifiers of its expressions), and by the
// outcome y. Not the uid, of which it holds the hash (uidHash); not the
// trace id, the widest column (~20% of the CREATE's server CPU), which only
// the exemplars need: the slowest rows carry a key instead and
// resolveExemplars looks the few trace ids up; nor the other scope columns
// (namespace, service_instance, source): a question whose scope names one
// the snapshot lacks gets a snapshot of its own (covers).
func (a *Analyzer) snapshotColumns(scope map[string]string, y string) []string {
	cols := []string{"start_ns", "start_time", "host", "pod", "engine", "gpu", "model", "service"}
	for k := range scope {
		cols = append(cols, k)
	}
	for _, n := range a.dag.Nodes() {
		if n.Latent || n.Role == dag.RoleOutcome {
			continue
		}
		cols = append(cols, n.Columns...)
		cols = append(cols, sqlIdentifiers(n.Expr)...)
		cols = append(cols, sqlIdentifiers(n.Exposed)...)
	}
	cols = append(cols, sqlIdentifiers(y)...)
	slices.Sort(cols)
	return slices.Compact(cols)
}

// sqlIdentifiers lists the identifiers of a SQL expression that may be
// columns: not function names (followed by a parenthesis), keywords,
// numbers or string literals. A name it takes for a column that is not one
// makes the snapshot fail, and the analysis read the table directly.
func sqlIdentifiers(expr string) []string {
	var out []string
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '\'':
			for i++; i < len(expr) && expr[i] != '\''; i++ {
				if expr[i] == '\\' {
					i++
				}
			}
			i++
		case c >= '0' && c <= '9':
			for i++; i < len(expr) && (isIdent(expr[i]) || expr[i] == '.' || (expr[i] == '-' || expr[i] == '+') && (expr[i-1] == 'e' || expr[i-1] == 'E')); i++ {
			}
		case isIdentStart(c):
			j := i
			for i++; i < len(expr) && isIdent(expr[i]); i++ {
			}
			word := expr[j:i]
			k := i
			for k < len(expr) && expr[k] == ' ' {
				k++
			}
			if (k < len(expr) && expr[k] == '(') || sqlKeywords[strings.ToUpper(word)] {
				continue
			}
			out = append(out, word)
		default:
			i++
		}
	}
	return out
}

var sqlKeywords = map[string]bool{
	"AND": true, "OR": true, "NOT": true, "IN": true, "IS": true, "NULL": true, "TRUE": true, "FALSE": true,
	"BETWEEN": true, "LIKE": true, "ILIKE": true, "CASE": true, "WHEN": true, "THEN": true, "ELSE": true, "END": true,
	"AS": true, "DIV": true, "MOD": true, "INTERVAL": true, "GLOBAL": true,
}
