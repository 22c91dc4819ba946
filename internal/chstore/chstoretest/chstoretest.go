package chstoretest

import (
	"context"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/testkit"
)

// Fresh opens a fresh database (testkit.FreshDatabase) with every migration
// applied, or skips the test when no test ClickHouse is configured. The
// telemetry tables have no TTL (Config.TTL 0): tests and benchmarks write
// rows at fixed dates (the fault lab's are in early 2026), which a TTL
// counted from today would delete.
func Fresh(t testing.TB) *chstore.Store {
	t.Helper()
	addr := testkit.ClickHouse(t)
	cfg := chstore.DefaultConfig()
	cfg.Addr, cfg.Database, cfg.TTL = addr, testkit.FreshDatabase(t, addr), 0
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := chstore.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx, nil); err != nil {
		t.Fatalf("migrate %s: %v", cfg.Database, err)
	}
	return st
}
