package chstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/testkit"
	"github.com/tailcause/tailcause/schemas"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	addr := testkit.ClickHouse(t)
	cfg := DefaultConfig()
	cfg.Addr, cfg.Database = addr, testkit.FreshDatabase(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestMigrate applies every migration once, records it, does nothing the
// second time, and refuses a migration whose recorded checksum differs.
func TestMigrate(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	ms, err := schemas.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	done, err := st.Migrate(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != len(ms) {
		t.Fatalf("applied %d of %d migrations", len(done), len(ms))
	}
	again, err := st.Migrate(ctx, nil)
	if err != nil || len(again) != 0 {
		t.Fatalf("second migrate applied %d: %v", len(again), err)
	}
	var n uint64
	if err := st.Conn().QueryRow(ctx, "SELECT count() FROM schema_migrations").Scan(&n); err != nil || n != uint64(len(ms)) {
		t.Fatalf("schema_migrations rows %d: %v", n, err)
	}
	// Someone edited an applied migration: refuse, naming it.
	if err := st.Conn().Exec(ctx, "DROP TABLE schema_migrations"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Migrate(ctx, nil); err != nil { // re-records (statements are idempotent)
		t.Fatal(err)
	}
	if err := st.Conn().Exec(ctx, "DROP TABLE schema_migrations"); err != nil {
		t.Fatal(err)
	}
	if err := st.Conn().Exec(ctx, "CREATE TABLE schema_migrations (version UInt32, name String, checksum String, applied_at DateTime) ENGINE = MergeTree ORDER BY version"); err != nil {
		t.Fatal(err)
	}
	if err := st.Insert(ctx, migrationsTable, [][]any{{uint32(1), ms[0].Name, "0000000000000000", time.Now().UTC().Truncate(time.Second)}}); err != nil {
		t.Fatal(err)
	}
	_, err = st.Migrate(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), ms[0].Name) || !strings.Contains(err.Error(), "must not change") {
		t.Fatalf("edited migration not refused: %v", err)
	}
}

func TestInsertChecksRowWidth(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	if err := st.Conn().Exec(ctx, "CREATE TABLE t (a UInt8, b String) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	tbl := Table{Name: "t", Columns: []string{"a", "b"}}
	if err := st.Insert(ctx, tbl, [][]any{{uint8(1)}}); err == nil || !strings.Contains(err.Error(), "1 values for 2 columns") {
		t.Fatalf("short row accepted: %v", err)
	}
	if err := st.Insert(ctx, tbl, [][]any{{uint8(1), "x"}, {uint8(2), "y"}}); err != nil {
		t.Fatal(err)
	}
	if got := tbl.InsertSQL(); got != "INSERT INTO t (a, b)" {
		t.Errorf("insert SQL %q", got)
	}
}

func TestConfigAndRetriable(t *testing.T) {
	for _, c := range []Config{{Addr: "nohostport", Database: "x"}, {Addr: "127.0.0.1:9000", Database: "a;b"}, {Addr: "127.0.0.1:9000"}} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Error(err)
	}
	if IsRetriable(nil) || !IsRetriable(errors.New("dial tcp: connection refused")) {
		t.Error("IsRetriable")
	}
}
