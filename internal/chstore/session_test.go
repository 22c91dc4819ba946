package chstore

import (
	"context"
	"testing"
	"time"
)

// TestSessionKeepsTemporaryTables: a temporary table created through a
// session is seen by the session's later statements (many of them, in a
// row: a pool of one must hand back the same connection each time) and not
// by the store's pool, and it is gone with the session.
func TestSessionKeepsTemporaryTables(t *testing.T) {
	st := openTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := st.Session()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Exec(ctx, "CREATE TEMPORARY TABLE snap ENGINE = Memory AS SELECT number AS n FROM numbers(1000)"); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if n, err := sessionCount(ctx, s, "SELECT count() FROM snap WHERE n < 500"); err != nil || n != 500 {
			t.Fatalf("statement %d through the session: %d rows, %v", i, n, err)
		}
	}
	var n uint64
	if err := st.Conn().QueryRow(ctx, "SELECT count() FROM snap").Scan(&n); err == nil {
		t.Errorf("the store's pool sees the session's temporary table (%d rows)", n)
	}
	s.Close()
	s2, err := st.Session()
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if n, err := sessionCount(ctx, s2, "SELECT count() FROM snap"); err == nil {
		t.Errorf("a new session sees the closed session's temporary table (%d rows)", n)
	}
}

func sessionCount(ctx context.Context, s *Session, q string) (uint64, error) {
	rows, err := s.Query(ctx, q)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n uint64
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
	}
	return n, rows.Err()
}
