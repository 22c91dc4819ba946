package causal

import (
	"context"
	"fmt"

	"github.com/tailcause/tailcause/internal/chstore"
)

// Rows is a result set being read: the subset of clickhouse-go's
// driver.Rows the analyzer uses.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// Querier runs one read-only SQL query. The Analyzer needs nothing else
// from the store; every query it sends names its result types explicitly
// (toFloat64, toString), so a row scans into *float64, *string and
// *[]float64.
type Querier interface {
	Query(ctx context.Context, query string) (Rows, error)
}

// QueryFunc adapts a function to Querier.
type QueryFunc func(ctx context.Context, query string) (Rows, error)

// Query calls f.
func (f QueryFunc) Query(ctx context.Context, query string) (Rows, error) { return f(ctx, query) }

// Inserter writes rows into a table, naming the columns the rows hold. It
// returns after the server acknowledged them.
type Inserter interface {
	Insert(ctx context.Context, table string, columns []string, rows [][]any) error
}

// DB is what the incident lifecycle needs: queries and inserts.
type DB interface {
	Querier
	Inserter
}

// StoreDB adapts an open chstore.Store (clickhouse-go's native connection)
// to DB. The store stays owned by the caller.
func StoreDB(st *chstore.Store) DB { return storeDB{st} }

type storeDB struct{ st *chstore.Store }

func (s storeDB) Query(ctx context.Context, query string) (Rows, error) {
	rows, err := s.st.Conn().Query(ctx, query)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (s storeDB) Insert(ctx context.Context, table string, columns []string, rows [][]any) error {
	return s.st.Insert(ctx, chstore.Table{Name: table, Columns: columns}, rows)
}

// Session opens a session of the store (chstore.Session): the Analyzer's
// snapshots live in it. A user on a readonly = 1 profile gets
// ErrReadOnly, without a statement sent.
func (s storeDB) Session(ctx context.Context) (Session, error) {
	if s.st.ReadOnly() {
		return nil, ErrReadOnly
	}
	sess, err := s.st.Session()
	if err != nil {
		return nil, err
	}
	return storeSession{sess}, nil
}

type storeSession struct{ s *chstore.Session }

func (c storeSession) Query(ctx context.Context, query string) (Rows, error) {
	rows, err := c.s.Query(ctx, query)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (c storeSession) Exec(ctx context.Context, stmt string) error { return c.s.Exec(ctx, stmt) }
func (c storeSession) Close() error                                { return c.s.Close() }

// QueryRows runs q on db and calls scan for each row; it closes the rows.
// Its errors name what was read.
func QueryRows(ctx context.Context, db Querier, what, q string, scan func(Rows) error) error {
	rows, err := db.Query(ctx, q)
	if err != nil {
		return fmt.Errorf("query %s: %w", what, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return fmt.Errorf("scan %s: %w", what, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	return nil
}

// queryFloats runs a query that returns exactly one row of n Float64
// columns.
func queryFloats(ctx context.Context, db Querier, what, q string, n int) ([]float64, error) {
	out := make([]float64, n)
	dest := make([]any, n)
	for i := range out {
		dest[i] = &out[i]
	}
	got := 0
	err := QueryRows(ctx, db, what, q, func(r Rows) error {
		got++
		return r.Scan(dest...)
	})
	if err != nil {
		return nil, err
	}
	if got != 1 {
		return nil, fmt.Errorf("query %s: %d rows, want 1", what, got)
	}
	return out, nil
}
