package chstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Block is rows held column by column, for InsertBlock: Block[i] holds the
// values of the table's column i, and every column has the same length.
// Typed columns (Values) go to clickhouse-go a column at a time, with no
// value boxed and no per-row type switch: the row path's cost (Insert:
// a []any per row, a type switch per value) is what it saves.
type Block []Column

// Column is one column of a Block. Its implementations are this package's:
// Values (typed) and Any (values as Insert takes them).
type Column interface {
	// Len is the number of rows.
	Len() int
	// Slice is rows [lo, hi), sharing the column's storage.
	Slice(lo, hi int) Column
	// Value is row i's value, as Insert takes it.
	Value(i int) any
	// clone is a copy that shares no storage with the column.
	clone() Column
	// appendTo appends the column to a batch's column; lowCard says the
	// table's column is LowCardinality.
	appendTo(c driver.BatchColumn, lowCard bool) error
}

// Values is a column of values of one Go type that clickhouse-go appends as
// a slice ([]string, []uint64, []float64, []time.Time, [][]string, ...).
type Values[T any] []T

// Len is the number of rows.
func (v Values[T]) Len() int { return len(v) }

// Slice is rows [lo, hi).
func (v Values[T]) Slice(lo, hi int) Column { return v[lo:hi:hi] }

// Value is row i's value.
func (v Values[T]) Value(i int) any { return v[i] }

func (v Values[T]) clone() Column { return slices.Clone(v) }

func (v Values[T]) appendTo(c driver.BatchColumn, lowCard bool) error {
	if s, ok := any([]T(v)).([]string); ok && lowCard {
		return appendLowCardinality(c, s)
	}
	return c.Append([]T(v))
}

// appendLowCardinality appends strings to a LowCardinality(String) column
// one by one (its slice Append boxes every element through reflection),
// boxing a value once for its run of equal values: consecutive rows repeat
// host, model, metric.
func appendLowCardinality(c driver.BatchColumn, s []string) error {
	var last string
	var box any
	for i, v := range s {
		if box == nil || v != last {
			last, box = v, v
		}
		if err := c.AppendRow(box); err != nil {
			return fmt.Errorf("row %d: %w", i, err)
		}
	}
	return nil
}

// Any is a column of values as Insert takes them (any type clickhouse-go
// appends as a row's value), appended one by one: for rows built as []any.
type Any []any

// Len is the number of rows.
func (v Any) Len() int { return len(v) }

// Slice is rows [lo, hi).
func (v Any) Slice(lo, hi int) Column { return v[lo:hi:hi] }

// Value is row i's value.
func (v Any) Value(i int) any { return v[i] }

func (v Any) clone() Column { return slices.Clone(v) }

func (v Any) appendTo(c driver.BatchColumn, _ bool) error {
	for i, x := range v {
		if err := c.AppendRow(x); err != nil {
			return fmt.Errorf("row %d: %w", i, err)
		}
	}
	return nil
}

// RowBlock is rows (each its values in column order, width of them) as a
// Block of Any columns.
func RowBlock(width int, rows [][]any) (Block, error) {
	b := make(Block, width)
	cols := make([]Any, width)
	for j := range cols {
		cols[j] = make(Any, len(rows))
	}
	for i, r := range rows {
		if len(r) != width {
			return nil, fmt.Errorf("row %d: %d values for %d columns", i, len(r), width)
		}
		for j, v := range r {
			cols[j][i] = v
		}
	}
	for j := range cols {
		b[j] = cols[j]
	}
	return b, nil
}

// Len is the number of rows (0 for a block without columns).
func (b Block) Len() int {
	if len(b) == 0 {
		return 0
	}
	return b[0].Len()
}

// Slice is rows [lo, hi) of every column, sharing their storage.
func (b Block) Slice(lo, hi int) Block {
	out := make(Block, len(b))
	for i, c := range b {
		out[i] = c.Slice(lo, hi)
	}
	return out
}

// Clone is a copy of b that shares no column storage with it (the values'
// own storage, a string's bytes or an array's elements, stays shared).
func (b Block) Clone() Block {
	out := make(Block, len(b))
	for i, c := range b {
		out[i] = c.clone()
	}
	return out
}

// Row is row i's values in column order.
func (b Block) Row(i int) []any {
	r := make([]any, len(b))
	for j, c := range b {
		r[j] = c.Value(i)
	}
	return r
}

// Rows is every row, as Insert takes them.
func (b Block) Rows() [][]any {
	out := make([][]any, b.Len())
	for i := range out {
		out[i] = b.Row(i)
	}
	return out
}

// ErrBlockShape is a block that does not fit its table: a column too many
// or too few, or columns of unequal length. It is permanent.
var ErrBlockShape = errors.New("block does not fit the table")

// CheckShape is why b cannot be a block of t (an ErrBlockShape), or nil.
func (b Block) CheckShape(t Table) error {
	if len(b) != len(t.Columns) {
		return fmt.Errorf("%w: %d columns for the %d of %s", ErrBlockShape, len(b), len(t.Columns), t.Name)
	}
	for i, c := range b {
		if c.Len() != b.Len() {
			return fmt.Errorf("%w: column %s has %d rows, column %s %d", ErrBlockShape, t.Columns[i], c.Len(), t.Columns[0], b.Len())
		}
	}
	return nil
}

// InsertBlock sends b as one batch, a column at a time. It returns only
// after the server acknowledged the block; a block without columns, or
// whose columns are all empty, is nothing to write. A failure is an
// *InsertError whose Stage says which rows are to blame, exactly as
// Insert's for the same rows: a block that does not fit the table (a
// column too many or too few, columns of unequal length) is StagePrepare,
// every row alike; when the client cannot encode a column, the block is
// sent again row by row (Insert), which names the row it cannot encode
// (StageAppend) or writes them all.
func (s *Store) InsertBlock(ctx context.Context, t Table, b Block) error {
	n := b.Len()
	if len(b) == 0 {
		return nil
	}
	if err := b.CheckShape(t); err != nil {
		return &InsertError{Table: t.Name, Stage: StagePrepare, Rows: n, Err: err}
	}
	if n == 0 {
		return nil
	}
	batch, err := s.conn.PrepareBatch(ctx, t.InsertSQL())
	if err != nil {
		return &InsertError{Table: t.Name, Stage: StagePrepare, Rows: n, Err: err}
	}
	types := batch.Columns()
	for i, c := range b {
		lowCard := i < len(types) && strings.HasPrefix(string(types[i].Type()), "LowCardinality(")
		if err := c.appendTo(batch.Column(i), lowCard); err != nil {
			_ = batch.Abort()
			return s.Insert(ctx, t, b.Rows())
		}
	}
	if err := batch.Send(); err != nil {
		return &InsertError{Table: t.Name, Stage: StageSend, Rows: n, Err: err}
	}
	s.noteExpired(ctx, t, n, func(col int) func(int) (time.Time, bool) {
		if ts, ok := b[col].(Values[time.Time]); ok {
			return func(i int) (time.Time, bool) { return ts[i], true }
		}
		return func(i int) (time.Time, bool) { v, ok := b[col].Value(i).(time.Time); return v, ok }
	})
	return nil
}
