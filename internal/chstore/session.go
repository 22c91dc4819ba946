package chstore

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Session is a connection of its own to the store's database: every
// statement sent through it runs in one server session and sees the
// temporary tables created there (a temporary table belongs to the
// connection that created it, and the store's pool hands statements to any
// of its connections). Close drops them. It is not safe for concurrent use:
// one statement at a time, each one's rows closed before the next.
//
// It is a clickhouse-go pool of one connection. clickhouse-go hands a
// query's connection back to its pool only once the goroutine reading the
// rows has finished (after Rows.Close returned), and frees the pool's slot
// before it puts the connection back: a statement sent in that instant got
// a fresh connection, without the session's tables (2 statements in 30 on
// a busy machine). Each statement therefore waits until the connection is
// idle again. A statement that fails on the server ends the connection,
// and its temporary tables with it: a later statement then fails (code 60,
// unknown table) rather than reading another session's state.
type Session struct {
	conn driver.Conn
	used bool
}

// Session opens a session with the store's address, credentials and
// database. The caller closes it.
func (s *Store) Session() (*Session, error) {
	cfg := s.cfg
	cfg.MaxConns = 1
	conn, err := dial(cfg, s.db)
	if err != nil {
		return nil, fmt.Errorf("open a session: %w", err)
	}
	return &Session{conn: conn}, nil
}

// settle waits, at most a second, until the session's connection is back
// in its pool.
func (s *Session) settle() {
	if !s.used {
		s.used = true
		return
	}
	for deadline := time.Now().Add(time.Second); s.conn.Stats().Idle == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Microsecond)
	}
}

// Query runs a query in the session; the caller closes the rows.
func (s *Session) Query(ctx context.Context, query string) (driver.Rows, error) {
	s.settle()
	return s.conn.Query(ctx, query)
}

// Exec runs a statement in the session.
func (s *Session) Exec(ctx context.Context, stmt string) error {
	s.settle()
	return s.conn.Exec(ctx, stmt)
}

// Close ends the session and drops its temporary tables.
func (s *Session) Close() error { return s.conn.Close() }
