package chstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tailcause/tailcause/internal/testkit"
	"github.com/tailcause/tailcause/schemas"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	return openTestWith(t, func(*Config) {})
}

func openTestWith(t *testing.T, edit func(*Config)) *Store {
	t.Helper()
	addr := testkit.ClickHouse(t)
	cfg := DefaultConfig()
	cfg.Addr, cfg.Database = addr, testkit.FreshDatabase(t, addr)
	edit(&cfg)
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
	// Every table and view of the migrations is there, on this server.
	rows, err := st.Conn().Query(ctx, "SELECT name FROM system.tables WHERE database = currentDatabase()")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	sort.Strings(names)
	want := []string{"alert_attempts", "alert_claims", "alert_outbox", "culprit_history", "culprits", "engine_samples", "gpu_health_minute", "gpu_samples", "incidents",
		"p99_by_model_minute", "rejected_input", "requests", "schema_migrations", "tail_requests", "token_stalls"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("tables after migrating on ClickHouse %s:\n got %v\nwant %v", st.Version(), names, want)
	}
	for _, tbl := range TelemetryTables {
		if got, err := st.TableTTL(ctx, tbl); err != nil || got.Keep != schemas.DefaultTTL {
			t.Errorf("%s TTL %v (%v), want %v", tbl, got, err, schemas.DefaultTTL)
		}
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

// TestServerVersionCheck: servers older than 24.8 are refused with the
// minimum named; the maintained releases pass.
func TestServerVersionCheck(t *testing.T) {
	version := func(s string) schemas.ServerVersion {
		v, err := schemas.ParseServerVersion(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, s := range []string{"18.16.1", "22.8", "23.12.4", "24.3.2.23", "24.7"} {
		v := version(s)
		err := CheckServerVersion(v)
		if !errors.Is(err, ErrUnsupportedServer) || !strings.Contains(err.Error(), "24.8 or newer") || !strings.Contains(err.Error(), v.String()) {
			t.Errorf("ClickHouse %s: %v, want a refusal naming 24.8", v, err)
		}
	}
	for _, s := range []string{"24.8.1", "24.12", "25.3.5.42", "26.9.2.1", "27.1"} {
		if v := version(s); CheckServerVersion(v) != nil {
			t.Errorf("ClickHouse %s refused: %v", v, CheckServerVersion(v))
		}
	}
}

func TestParseTTL(t *testing.T) {
	for in, want := range map[string]TTL{
		"ReplacingMergeTree PARTITION BY toYYYYMMDD(start_time) ORDER BY (model, service, start_time, uid) TTL start_time + toIntervalDay(30) SETTINGS index_granularity = 8192": {"start_time", 30 * 24 * time.Hour},
		"MergeTree ORDER BY a TTL time + toIntervalHour(36) SETTINGS index_granularity = 8192":                                                                                   {"time", 36 * time.Hour},
		"ReplacingMergeTree PARTITION BY toYYYYMMDD(time) ORDER BY (host, gpu, metric, time_ns) SETTINGS index_granularity = 8192":                                               {},
		"MergeTree ORDER BY a TTL toDate(x) + 1": {},
	} {
		if got := ParseTTL(in); got != want {
			t.Errorf("ParseTTL(%q) = %+v, want %+v", in, got, want)
		}
	}
}

// gpuRow is a gpu_samples row at ts.
func gpuRow(ts time.Time) []any {
	return []any{"h1", "GPU-1", "0", "pod", "ns", "sm_clock_mhz", uint64(ts.UnixNano()), ts.Truncate(time.Second), 1410.0}
}

var gpuSamples = Table{Name: "gpu_samples", Columns: []string{"host", "gpu", "gpu_index", "pod", "namespace", "metric", "time_ns", "time", "value"}}

// TestTTLReplayWarns: with the default 30-day TTL, rows replayed from
// further back are deleted by ClickHouse right after the insert; the store
// counts them and logs a warning that says what to do, instead of letting
// them vanish silently. With --ttl 0 (Config.TTL 0) the same rows stay.
func TestTTLReplayWarns(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	st := openTestWith(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	if _, err := st.Migrate(ctx, nil); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	old := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) // the eval's data
	if now.Sub(old) < schemas.DefaultTTL {
		old = now.Add(-2 * schemas.DefaultTTL)
	}
	if err := st.Insert(ctx, gpuSamples, [][]any{gpuRow(old), gpuRow(old.Add(time.Second)), gpuRow(now)}); err != nil {
		t.Fatal(err)
	}
	// ClickHouse deletes expired rows in a TTL merge, which follows the
	// insert within moments; OPTIMIZE FINAL runs it now.
	if err := st.Conn().Exec(ctx, "OPTIMIZE TABLE gpu_samples FINAL"); err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := st.Conn().QueryRow(ctx, "SELECT count() FROM gpu_samples").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d rows kept with the 30-day TTL, want 1 (ClickHouse deletes the expired ones)", n)
	}
	if st.ExpiredRows() != 2 {
		t.Errorf("ExpiredRows = %d, want 2", st.ExpiredRows())
	}
	out := logs.String()
	for _, want := range []string{"level=WARN", "older than the table's TTL", "table=gpu_samples", "rows=2", "--ttl 0", "ttl=\"time + 30 DAY\""} {
		if !strings.Contains(out, want) {
			t.Errorf("warning lacks %q:\n%s", want, out)
		}
	}

	// No TTL: the same rows are kept and nothing is said.
	logs.Reset()
	keep := openTestWith(t, func(c *Config) { c.TTL, c.Logger = 0, slog.New(slog.NewTextHandler(&logs, nil)) })
	if _, err := keep.Migrate(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := keep.TableTTL(ctx, "gpu_samples"); err != nil || got.Keep != 0 {
		t.Errorf("TTL with Config.TTL 0: %v %v", got, err)
	}
	if err := keep.Insert(ctx, gpuSamples, [][]any{gpuRow(old), gpuRow(old.Add(time.Second)), gpuRow(now)}); err != nil {
		t.Fatal(err)
	}
	if err := keep.Conn().Exec(ctx, "OPTIMIZE TABLE gpu_samples FINAL"); err != nil {
		t.Fatal(err)
	}
	if err := keep.Conn().QueryRow(ctx, "SELECT count() FROM gpu_samples").Scan(&n); err != nil || n != 3 {
		t.Errorf("%d rows kept without a TTL (%v), want 3", n, err)
	}
	if keep.ExpiredRows() != 0 || logs.Len() != 0 {
		t.Errorf("no TTL, yet %d expired rows; log %q", keep.ExpiredRows(), logs.String())
	}

	// Migrating a database whose tables have another TTL says so.
	logs.Reset()
	keep.ttl = 7 * 24 * time.Hour
	if _, err := keep.Migrate(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); strings.Count(out, "keeps the TTL it was created with") != 4 || !strings.Contains(out, "MODIFY TTL time + INTERVAL 7 DAY") {
		t.Errorf("TTL mismatch not reported for the 4 telemetry tables:\n%s", out)
	}
}

func TestConfigAndRetriable(t *testing.T) {
	for _, c := range []Config{{Addr: "nohostport", Database: "x"}, {Addr: "127.0.0.1:9000", Database: "a;b"}, {Addr: "127.0.0.1:9000"}, {Addr: "127.0.0.1:9000", Database: "x", TTL: -time.Hour}} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Error(err)
	}
}

// TestInsertErrors provokes each kind of insert failure on the real server
// and checks what the store says about it: the stage (which rows are to
// blame) and whether retrying the same data can help.
func TestInsertErrors(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	if err := st.Conn().Exec(ctx, `CREATE TABLE p (t DateTime, v UInt32, s String, CONSTRAINT small CHECK v < 100)
ENGINE = MergeTree PARTITION BY toYYYYMMDD(t) ORDER BY t`); err != nil {
		t.Fatal(err)
	}
	tbl := Table{Name: "p", Columns: []string{"t", "v", "s"}}
	day := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	row := func(d int, v any) []any { return []any{day.AddDate(0, 0, d), v, "x"} }
	var days [][]any
	for d := range 150 {
		days = append(days, row(d, uint32(1)))
	}
	check := func(name string, err error, stage InsertStage, code int32, badRow int) {
		t.Helper()
		var ie *InsertError
		if !errors.As(err, &ie) {
			t.Fatalf("%s: %v is not an *InsertError", name, err)
		}
		if ie.Stage != stage || ie.Table != tbl.Name && ie.Table != "nope" {
			t.Errorf("%s: stage %s table %s, want %s (%v)", name, ie.Stage, ie.Table, stage, err)
		}
		if stage == StageAppend && ie.Row != badRow {
			t.Errorf("%s: row %d, want %d", name, ie.Row, badRow)
		}
		var ex *clickhouse.Exception
		if code != 0 && (!errors.As(err, &ex) || ex.Code != code) {
			t.Errorf("%s: %v, want server code %d", name, err, code)
		}
		if IsRetriable(err) {
			t.Errorf("%s: IsRetriable(%v) = true, want a permanent error", name, err)
		}
	}
	// 150 days in one block: more partitions than max_partitions_per_insert_block.
	check("too many partitions", st.Insert(ctx, tbl, days), StageSend, 252, 0)
	check("constraint", st.Insert(ctx, tbl, [][]any{row(0, uint32(1)), row(0, uint32(500))}), StageSend, 469, 0)
	check("type mismatch", st.Insert(ctx, tbl, [][]any{row(0, uint32(1)), row(0, "seven"), row(0, uint32(2))}), StageAppend, 0, 1)
	check("short row", st.Insert(ctx, tbl, [][]any{row(0, uint32(1)), {day}}), StageAppend, 0, 1)
	check("unknown table", st.Insert(ctx, Table{Name: "nope", Columns: []string{"t"}}, [][]any{{day}}), StagePrepare, 60, 0)
	if err := st.Conn().Exec(ctx, "ALTER TABLE p DROP COLUMN s"); err != nil {
		t.Fatal(err)
	}
	check("dropped column", st.Insert(ctx, tbl, [][]any{row(0, uint32(1))}), StagePrepare, 16, 0)

	// The same data in smaller blocks goes in: the 252 was about the block.
	tbl.Columns = tbl.Columns[:2]
	for i := 0; i < len(days); i += 50 {
		var part [][]any
		for _, r := range days[i : i+50] {
			part = append(part, r[:2])
		}
		if err := st.Insert(ctx, tbl, part); err != nil {
			t.Fatalf("50 days: %v", err)
		}
	}

	// A server that is not there is worth waiting for.
	dead := Config{Addr: "127.0.0.1:1", Database: "x", DialTimeout: time.Second, MaxConns: 1}
	if _, err := Open(ctx, dead); err == nil || !IsRetriable(err) {
		t.Errorf("open an unreachable server: %v, retriable %v; want a retriable error", err, IsRetriable(err))
	}
}

func TestIsRetriable(t *testing.T) {
	ex := func(code int32, msg string) error {
		return &InsertError{Table: "requests", Stage: StageSend, Err: &clickhouse.Exception{Code: code, Message: msg}}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"deadline", fmt.Errorf("send: %w", context.DeadlineExceeded), true},
		{"eof", &InsertError{Stage: StageSend, Err: io.EOF}, true},
		{"memory limit", ex(241, "Memory limit (total) exceeded"), true},
		{"timeout", ex(159, "Timeout exceeded"), true},
		{"network", ex(210, "Connection reset by peer"), true},
		{"too many parts", ex(252, "Too many parts (3001 with average size of 1.00 MiB) in table requests. Merges are processing significantly slower than inserts"), true},
		{"replica read-only", ex(242, "Table is in readonly mode"), true},
		{"access denied", ex(497, "default: Not enough privileges"), true},
		{"too many partitions", ex(252, "Too many partitions for single INSERT block (more than 100)"), false},
		{"no such column", &InsertError{Stage: StagePrepare, Err: &clickhouse.Exception{Code: 16, Message: "No such column s"}}, false},
		{"type mismatch", ex(53, "Type mismatch"), false},
		{"cannot parse", ex(6, "Cannot parse"), false},
		{"constraint", ex(469, "Constraint violated"), false},
		{"append", &InsertError{Stage: StageAppend, Err: errors.New("converting string to UInt32 is unsupported")}, false},
	} {
		if got := IsRetriable(tc.err); got != tc.want {
			t.Errorf("%s: IsRetriable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestReadOnlyUserAndSchemaCheck: a store opened with NoCreate by the dev
// server's read-only user creates nothing, CheckSchema tells a missing,
// never-migrated, behind and foreign schema apart (each an ErrSchema that
// names the remedy), and Migrate on a current database runs no statement a
// read-only user is refused.
func TestReadOnlyUserAndSchemaCheck(t *testing.T) {
	addr := testkit.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := testkit.FreshDatabase(t, addr)
	user, pw := testkit.ReadOnlyUser(t, addr, db)
	ro := func(db string) (*Store, error) {
		cfg := DefaultConfig()
		cfg.Addr, cfg.Database, cfg.Username, cfg.Password, cfg.NoCreate, cfg.TTL = addr, db, user, pw, true, 0
		st, err := Open(ctx, cfg)
		if err == nil {
			t.Cleanup(func() { st.Close() })
		}
		return st, err
	}
	if _, err := ro(db + "_absent"); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "does not exist: run `tailcause migrate` first") {
		t.Fatalf("NoCreate on a missing database: %v, want ErrSchema naming the remedy", err)
	}
	st, err := ro(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CheckSchema(ctx); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "never migrated") {
		t.Errorf("empty database: %v, want ErrSchema (never migrated)", err)
	}
	if _, err := st.Migrate(ctx, nil); err == nil {
		t.Error("a read-only user migrated an empty database")
	}

	admin := openTestWith(t, func(c *Config) { c.TTL = 0 })
	if _, err := admin.Migrate(ctx, nil); err != nil {
		t.Fatal(err)
	}
	ms, err := schemas.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	st, err = ro(admin.Database())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CheckSchema(ctx); err != nil {
		t.Errorf("current schema: %v", err)
	}
	if !st.ReadOnly() || admin.ReadOnly() {
		t.Errorf("ReadOnly: %v for %s, %v for default; want true, false", st.ReadOnly(), user, admin.ReadOnly())
	}
	// Current: Migrate only reads, so the read-only user may run it, even
	// from a store opened without NoCreate (the database exists: nothing
	// is created).
	if done, err := st.Migrate(ctx, nil); err != nil || len(done) != 0 {
		t.Errorf("read-only Migrate of a current database: %d applied, %v", len(done), err)
	}
	cfg := DefaultConfig()
	cfg.Addr, cfg.Database, cfg.Username, cfg.Password, cfg.TTL = addr, admin.Database(), user, pw, 0
	if st2, err := Open(ctx, cfg); err != nil {
		t.Errorf("a read-only user opens an existing database without NoCreate: %v", err)
	} else {
		if done, err := st2.Migrate(ctx, nil); err != nil || len(done) != 0 {
			t.Errorf("read-only Migrate (store opened without NoCreate): %d applied, %v", len(done), err)
		}
		st2.Close()
	}
	// Behind: the newest migration is not recorded.
	last := ms[len(ms)-1]
	rewrite := func(sum string, versions int) {
		t.Helper()
		for _, stmt := range []string{"DROP TABLE schema_migrations",
			"CREATE TABLE schema_migrations (version UInt32, name String, checksum String, applied_at DateTime) ENGINE = MergeTree ORDER BY version"} {
			if err := admin.Conn().Exec(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range ms[:versions] {
			c := m.Checksum
			if m.Version == ms[0].Version && sum != "" {
				c = sum
			}
			if err := admin.Insert(ctx, migrationsTable, [][]any{{uint32(m.Version), m.Name, c, time.Now().UTC().Truncate(time.Second)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	rewrite("", len(ms)-1)
	if err := st.CheckSchema(ctx); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), last.Name) ||
		!strings.Contains(err.Error(), fmt.Sprintf("lacks 1 of the %d migrations", len(ms))) {
		t.Errorf("a schema one migration behind: %v, want ErrSchema naming %s", err, last.Name)
	}
	// Migrated by another build: a checksum differs.
	rewrite("0123456789abcdef", len(ms))
	if err := st.CheckSchema(ctx); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), ms[0].Name) || !strings.Contains(err.Error(), "another build") {
		t.Errorf("a foreign checksum: %v, want ErrSchema naming %s", err, ms[0].Name)
	}
}
