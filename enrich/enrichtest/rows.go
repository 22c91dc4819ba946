package enrichtest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tailcause/tailcause/internal/chstore"
)

// ClickHouse exception codes the fake raises, so that chstore.IsRetriable
// classifies its failures as it classifies the server's.
const (
	codeNoSuchColumn       = 16
	codeUnknownTable       = 60
	codeViolatedConstraint = 469
)

// Column is a column of a fake table: a value whose type is not Type
// cannot be encoded (chstore.StageAppend), as clickhouse-go refuses a
// string for a UInt32.
type Column struct {
	Name string
	Type reflect.Type
}

// Rows is an in-memory enrich.RowWriter. Create declares its tables; an
// InsertBlock is all or nothing, and fails with the *chstore.InsertError
// the real store returns: StagePrepare for an unknown table or column, or
// a block that does not fit the table (every row alike), StageAppend for
// the first row with a value of the wrong type, StageSend when a table's
// check refuses a row of the block (as a CHECK constraint refuses the
// block). It is safe for concurrent use.
type Rows struct {
	mu     sync.Mutex
	tables map[string]*table
}

type table struct {
	cols  []Column
	check func(row map[string]any) error
	rows  []map[string]any
}

// NewRows returns a writer without tables.
func NewRows() *Rows { return &Rows{tables: map[string]*table{}} }

// Create declares a table; check, when not nil, refuses a row as a CHECK
// constraint would (its error becomes the server's message).
func (w *Rows) Create(name string, cols []Column, check func(row map[string]any) error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tables[name] = &table{cols: slices.Clone(cols), check: check}
}

// InsertBlock writes the block's rows (columns in t.Columns order) or
// none; as the store, it writes nothing for a block without columns or
// rows.
func (w *Rows) InsertBlock(_ context.Context, t chstore.Table, b chstore.Block) error {
	n := b.Len()
	if len(b) == 0 {
		return nil
	}
	if err := b.CheckShape(t); err != nil {
		return &chstore.InsertError{Table: t.Name, Stage: chstore.StagePrepare, Rows: n, Err: err}
	}
	if n == 0 {
		return nil
	}
	rows := b.Rows()
	w.mu.Lock()
	defer w.mu.Unlock()
	tb, ok := w.tables[t.Name]
	if !ok {
		return &chstore.InsertError{Table: t.Name, Stage: chstore.StagePrepare, Rows: len(rows),
			Err: &clickhouse.Exception{Code: codeUnknownTable, Message: fmt.Sprintf("Table %s does not exist", t.Name)}}
	}
	types := make([]reflect.Type, len(t.Columns))
	for i, name := range t.Columns {
		j := slices.IndexFunc(tb.cols, func(c Column) bool { return c.Name == name })
		if j < 0 {
			return &chstore.InsertError{Table: t.Name, Stage: chstore.StagePrepare, Rows: len(rows),
				Err: &clickhouse.Exception{Code: codeNoSuchColumn, Message: fmt.Sprintf("No such column %s in table %s", name, t.Name)}}
		}
		types[i] = tb.cols[j].Type
	}
	block := make([]map[string]any, len(rows))
	for i, r := range rows {
		m := make(map[string]any, len(r))
		for j, v := range r {
			if reflect.TypeOf(v) != types[j] {
				return &chstore.InsertError{Table: t.Name, Stage: chstore.StageAppend, Row: i, Rows: len(rows),
					Err: fmt.Errorf("column %s: cannot encode %T as %v", t.Columns[j], v, types[j])}
			}
			m[t.Columns[j]] = v
		}
		block[i] = m
	}
	if tb.check != nil {
		for _, m := range block {
			if err := tb.check(m); err != nil {
				return &chstore.InsertError{Table: t.Name, Stage: chstore.StageSend, Rows: len(rows),
					Err: &clickhouse.Exception{Code: codeViolatedConstraint, Message: err.Error()}}
			}
		}
	}
	tb.rows = append(tb.rows, block...)
	return nil
}

// Rows returns the rows written to table, in insert order, each as its
// values in cols order (a column never written is nil).
func (w *Rows) Rows(table string, cols ...string) [][]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	tb := w.tables[table]
	if tb == nil {
		return nil
	}
	out := make([][]any, len(tb.rows))
	for i, m := range tb.rows {
		out[i] = make([]any, len(cols))
		for j, c := range cols {
			out[i][j] = m[c]
		}
	}
	return out
}
