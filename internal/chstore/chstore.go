package chstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tailcause/tailcause/schemas"
)

// Config says where the store is.
type Config struct {
	Addr        string        // host:port of the native protocol (unless DSN)
	Database    string        // created when missing (unless NoCreate)
	Username    string        // default "default"
	Password    string        //
	DialTimeout time.Duration // default 5s
	MaxConns    int           // default 4
	// TTL is how long the telemetry tables (requests, token_stalls,
	// gpu_samples, engine_samples) keep a row by its event time; 0 puts no
	// TTL on any table (see schemas.Options). It applies to the tables
	// Migrate creates: an existing table keeps its TTL (Migrate warns when
	// a telemetry table's differs). DefaultConfig: schemas.DefaultTTL (30
	// days).
	TTL time.Duration
	// DSN, when set, says where the server is instead of Addr, in
	// clickhouse-go's format (clickhouse.ParseDSN, native protocol only):
	// several hosts (clickhouse://h1:9440,h2:9440/db), user and password,
	// secure=true (TLS), skip_verify, tls_server_name, settings. A database
	// it names replaces Database; Username and Password fill what it leaves
	// out. It may hold a password: no error or log line shows it.
	DSN string
	// TLS, when set, secures every connection (a CA bundle, a client
	// certificate: tlsfiles.ClientConfig); it replaces the TLS settings a
	// DSN's secure=true would make.
	TLS *tls.Config
	// Logger gets the store's warnings (rows inserted older than their
	// table's TTL, TTL mismatches); nil: slog.Default().
	Logger *slog.Logger
	// NoCreate opens an existing database and creates nothing: no CREATE
	// DATABASE (which a read-only user may not run, even with IF NOT
	// EXISTS), and no connection to the server's default database (which
	// a user allowed one database may not open). A missing database is an
	// ErrSchema. Roles that do not migrate (--no-migrate, rank) set it.
	NoCreate bool
}

// DefaultConfig is the local development store.
func DefaultConfig() Config {
	return Config{Addr: "127.0.0.1:9000", Database: "tailcause", Username: "default", DialTimeout: 5 * time.Second, MaxConns: 4, TTL: schemas.DefaultTTL}
}

// Validate reports a configuration mistake.
func (c Config) Validate() error {
	if c.DSN != "" {
		var err error
		if c, _, err = c.resolve(); err != nil {
			return err
		}
	} else if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("clickhouse address %q: %w", c.Addr, err)
	}
	if c.Database == "" || strings.ContainsAny(c.Database, "`\"' .;") {
		return fmt.Errorf("clickhouse database %q: want a plain identifier", c.Database)
	}
	if err := (schemas.Options{TTL: c.TTL}).Validate(); err != nil {
		return fmt.Errorf("clickhouse %w", err)
	}
	return nil
}

// Store is an open connection pool to one database.
type Store struct {
	conn    driver.Conn
	version schemas.ServerVersion
	db      string
	ttl     time.Duration
	log     *slog.Logger
	cfg     Config // as opened: Session dials with it

	expiredRows atomic.Int64
	mu          sync.Mutex
	tableTTLs   map[string]TTL       // as the server has them, read on first use
	warned      map[string]time.Time // last expired-rows warning per table
	unwarned    map[string]int64     // expired rows since that warning
}

// ErrUnsupportedServer marks a server older than schemas.MinServer (not
// worth retrying).
var ErrUnsupportedServer = errors.New("unsupported ClickHouse server")

// CheckServerVersion refuses a server older than schemas.MinServer.
func CheckServerVersion(v schemas.ServerVersion) error {
	if !v.AtLeast(schemas.MinServer) {
		return fmt.Errorf("%w: ClickHouse %s is too old: tailcause needs ClickHouse %s or newer (the maintained releases; deploy/dev/clickhouse.sh runs 26.9)", ErrUnsupportedServer, v, schemas.MinServer)
	}
	return nil
}

// Open connects, creates the database when missing, reads the server
// version and refuses a server older than schemas.MinServer (24.8). It does
// not migrate.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Username == "" {
		cfg.Username = "default"
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 4
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.DSN != "" {
		cfg, _, _ = cfg.resolve() // its hosts and database, for the messages below
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.NoCreate {
		return openExisting(ctx, cfg)
	}
	boot, err := dial(cfg, "default")
	if err != nil {
		return nil, err
	}
	// The version first: an old server may not even know the statements below.
	if bv, err := boot.ServerVersion(); err != nil {
		boot.Close()
		return nil, fmt.Errorf("read clickhouse server version at %s: %w", cfg.Addr, err)
	} else if err := CheckServerVersion(schemas.ServerVersion{Major: int(bv.Version.Major), Minor: int(bv.Version.Minor)}); err != nil {
		boot.Close()
		return nil, fmt.Errorf("clickhouse at %s: %w", cfg.Addr, err)
	}
	// Created only when missing: a user without the CREATE DATABASE grant
	// (or on a read-only profile) is refused even IF NOT EXISTS.
	var exists uint64
	if err := (deadlineFree{boot}).QueryRow(ctx, "SELECT count() FROM system.databases WHERE name = ?", cfg.Database).Scan(&exists); err != nil {
		boot.Close()
		return nil, fmt.Errorf("look up database %s at %s: %w", cfg.Database, cfg.Addr, err)
	}
	if exists == 0 {
		if err := boot.Exec(ctx, "CREATE DATABASE IF NOT EXISTS `"+cfg.Database+"`"); err != nil {
			boot.Close()
			return nil, fmt.Errorf("create database %s at %s: %w", cfg.Database, cfg.Addr, err)
		}
	}
	boot.Close()
	conn, err := dial(cfg, cfg.Database)
	if err != nil {
		return nil, err
	}
	sv, err := conn.ServerVersion()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("read clickhouse server version at %s: %w", cfg.Addr, err)
	}
	if conn, err = readOnlyAware(ctx, conn, cfg.Username); err != nil {
		return nil, err
	}
	return &Store{
		conn: conn, version: schemas.ServerVersion{Major: int(sv.Version.Major), Minor: int(sv.Version.Minor)}, db: cfg.Database,
		ttl: cfg.TTL, log: cfg.Logger, cfg: cfg,
		tableTTLs: map[string]TTL{}, warned: map[string]time.Time{}, unwarned: map[string]int64{},
	}, nil
}

// openExisting connects to cfg.Database only (Config.NoCreate).
func openExisting(ctx context.Context, cfg Config) (*Store, error) {
	conn, err := dial(cfg, cfg.Database)
	if err != nil {
		return nil, err
	}
	sv, err := conn.ServerVersion()
	if err != nil {
		conn.Close()
		var ex *clickhouse.Exception
		if errors.As(err, &ex) && ex.Code == codeUnknownDatabase {
			return nil, fmt.Errorf("%w: database %s does not exist: run `tailcause migrate` first", ErrSchema, cfg.Database)
		}
		return nil, fmt.Errorf("read clickhouse server version at %s: %w", cfg.Addr, err)
	}
	v := schemas.ServerVersion{Major: int(sv.Version.Major), Minor: int(sv.Version.Minor)}
	if err := CheckServerVersion(v); err != nil {
		conn.Close()
		return nil, fmt.Errorf("clickhouse at %s: %w", cfg.Addr, err)
	}
	if conn, err = readOnlyAware(ctx, conn, cfg.Username); err != nil {
		return nil, err
	}
	return &Store{
		conn: conn, version: v, db: cfg.Database, ttl: cfg.TTL, log: cfg.Logger, cfg: cfg,
		tableTTLs: map[string]TTL{}, warned: map[string]time.Time{}, unwarned: map[string]int64{},
	}, nil
}

// readOnlyAware is conn, or deadlineFree{conn} for a user on a readonly = 1
// profile: such a user may change no setting, and clickhouse-go sends
// max_execution_time with every statement whose context has a deadline. It
// closes conn on error.
func readOnlyAware(ctx context.Context, conn driver.Conn, user string) (driver.Conn, error) {
	var level uint64
	if err := (deadlineFree{conn}).QueryRow(ctx, "SELECT toUInt64(getSetting('readonly'))").Scan(&level); err != nil {
		conn.Close()
		return nil, fmt.Errorf("read the readonly setting of clickhouse user %s: %w", user, err)
	}
	if level == 1 {
		return deadlineFree{conn}, nil
	}
	return conn, nil
}

// deadlineFree runs statements under a context without a deadline that is
// cancelled when the caller's ends. clickhouse-go turns a deadline of more
// than a second into the setting max_execution_time, which a user on a
// readonly = 1 profile (ClickHouse's stock "readonly" profile, the dev
// server's analyst) is refused with code 164: every query of the query API
// and of rank failed so. The caller's deadline still ends the statement
// (the client cancels it); only the server-side limit is lost.
type deadlineFree struct{ driver.Conn }

// withoutDeadline is ctx without its deadline, cancelled when ctx ends
// (bounded: only a context with a deadline is replaced).
func withoutDeadline(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); !ok {
		return ctx
	}
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	context.AfterFunc(ctx, cancel)
	return c
}

func (d deadlineFree) Query(ctx context.Context, q string, args ...any) (driver.Rows, error) {
	return d.Conn.Query(withoutDeadline(ctx), q, args...)
}

func (d deadlineFree) QueryRow(ctx context.Context, q string, args ...any) driver.Row {
	return d.Conn.QueryRow(withoutDeadline(ctx), q, args...)
}

func (d deadlineFree) Select(ctx context.Context, dest any, q string, args ...any) error {
	return d.Conn.Select(withoutDeadline(ctx), dest, q, args...)
}

func (d deadlineFree) Exec(ctx context.Context, q string, args ...any) error {
	return d.Conn.Exec(withoutDeadline(ctx), q, args...)
}

// ReadOnly reports whether the store's user is on a readonly = 1 profile:
// nothing but reads is allowed, no setting and no temporary table, so a
// caller with a write-free fallback (a snapshot in a temporary table) takes
// it without attempting the write.
func (s *Store) ReadOnly() bool {
	_, ok := s.conn.(deadlineFree)
	return ok
}

// Exception codes the schema checks recognise.
const (
	codeUnknownTable    = 60
	codeUnknownDatabase = 81
)

// ErrSchema marks a database without the schema this binary needs: missing,
// never migrated, behind the embedded migrations, or migrated with other
// ones. Waiting does not fix it; `tailcause migrate` does.
var ErrSchema = errors.New("schema not current")

// CheckSchema reports, without writing anything, whether every embedded
// migration is applied with its checksum: the check of a role that does not
// migrate (--no-migrate, rank). Migrations applied beyond the embedded ones
// (a newer binary migrated first, as in a rolling upgrade) are accepted:
// they only add. Failures are ErrSchema and name the remedy.
func (s *Store) CheckSchema(ctx context.Context) error {
	ms, err := schemas.Migrations()
	if err != nil {
		return err
	}
	applied, err := s.appliedMigrations(ctx)
	var ex *clickhouse.Exception
	if errors.As(err, &ex) && ex.Code == codeUnknownTable {
		return fmt.Errorf("%w: database %s was never migrated (no schema_migrations table): run `tailcause migrate` first", ErrSchema, s.db)
	}
	if err != nil {
		return err
	}
	var missing []string
	for _, m := range ms {
		sum, ok := applied[uint32(m.Version)]
		switch {
		case !ok:
			missing = append(missing, m.Name)
		case sum != m.Checksum:
			return fmt.Errorf("%w: database %s has migration %s applied with checksum %s, this binary embeds %s: it was migrated by another build of tailcause", ErrSchema, s.db, m.Name, short(sum), short(m.Checksum))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: database %s lacks %d of the %d migrations this binary needs (%s): run `tailcause migrate` first", ErrSchema, s.db, len(missing), len(ms), strings.Join(missing, ", "))
	}
	return nil
}

func dial(cfg Config, db string) (driver.Conn, error) {
	opts, err := cfg.options(db)
	if err != nil {
		return nil, err
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open clickhouse %s: %w", cfg.Addr, err)
	}
	return conn, nil
}

// Conn is the underlying connection for queries.
func (s *Store) Conn() driver.Conn { return s.conn }

// Version is the server's version.
func (s *Store) Version() schemas.ServerVersion { return s.version }

// Database is the database the store works in.
func (s *Store) Database() string { return s.db }

// Close releases the connections.
func (s *Store) Close() error { return s.conn.Close() }

// Ping checks reachability (used by readiness probes and retry loops).
func (s *Store) Ping(ctx context.Context) error { return s.conn.Ping(ctx) }

// TTL is the store's configured telemetry TTL (Config.TTL; 0: none).
func (s *Store) TTL() time.Duration { return s.ttl }

// ExpiredRows counts the rows inserted older than their table's TTL (which
// ClickHouse deletes at once).
func (s *Store) ExpiredRows() int64 { return s.expiredRows.Load() }

// Migrate applies the embedded migrations that are not yet recorded, in
// order, and verifies the checksums of those that are. Every statement is
// idempotent (IF NOT EXISTS), so two processes migrating at once converge.
// The checksum is that of the migration's template, so the TTL it is
// rendered with (Config.TTL) is not part of it: a telemetry table keeps the
// TTL it was created with, and Migrate warns when that differs from the
// configured one.
func (s *Store) Migrate(ctx context.Context, log *slog.Logger) ([]schemas.Migration, error) {
	ms, err := schemas.Migrations()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.tableTTLs = map[string]TTL{} // tables may have been dropped and are re-created
	s.mu.Unlock()
	// Read first: a database that is current gets no statement but
	// SELECTs, so a role may start with a user that cannot write DDL.
	applied, err := s.appliedMigrations(ctx)
	var ex *clickhouse.Exception
	if errors.As(err, &ex) && ex.Code == codeUnknownTable {
		if err := s.conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations
(version UInt32, name String, checksum String, applied_at DateTime)
ENGINE = MergeTree ORDER BY version`); err != nil {
			return nil, fmt.Errorf("create schema_migrations: %w", err)
		}
		applied, err = s.appliedMigrations(ctx)
	}
	if err != nil {
		return nil, err
	}
	var done []schemas.Migration
	for _, m := range ms {
		if sum, ok := applied[uint32(m.Version)]; ok {
			if sum != m.Checksum {
				return done, fmt.Errorf("migration %s was applied with checksum %s but the embedded file has %s: migrations must not change once applied; add a new one", m.Name, short(sum), short(m.Checksum))
			}
			continue
		}
		stmts, err := m.Statements(schemas.Options{TTL: s.ttl})
		if err != nil {
			return done, err
		}
		for i, st := range stmts {
			if err := s.conn.Exec(ctx, st); err != nil {
				return done, fmt.Errorf("apply migration %s statement %d on ClickHouse %s: %w", m.Name, i+1, s.version, err)
			}
		}
		if err := s.Insert(ctx, migrationsTable, [][]any{{uint32(m.Version), m.Name, m.Checksum, time.Now().UTC().Truncate(time.Second)}}); err != nil {
			return done, fmt.Errorf("record migration %s: %w", m.Name, err)
		}
		if log != nil {
			log.Info("applied migration", "name", m.Name, "server", s.version.String(), "database", s.db)
		}
		done = append(done, m)
	}
	s.checkTTLs(ctx)
	return done, nil
}

// TelemetryTables are the tables whose TTL is Config.TTL.
var TelemetryTables = []string{"requests", "token_stalls", "gpu_samples", "engine_samples"}

// TelemetryTTLColumn is the event-time column each telemetry table's TTL
// counts from.
var TelemetryTTLColumn = map[string]string{"requests": "start_time", "token_stalls": "start_time", "gpu_samples": "time", "engine_samples": "time"}

// checkTTLs warns about telemetry tables whose TTL is not the configured one.
func (s *Store) checkTTLs(ctx context.Context) {
	for _, tbl := range TelemetryTables {
		got, err := s.TableTTL(ctx, tbl)
		if err != nil || got.Keep == s.ttl {
			continue
		}
		fix := "ALTER TABLE " + tbl + " REMOVE TTL"
		if s.ttl > 0 {
			fix = "ALTER TABLE " + tbl + " MODIFY TTL " + TelemetryTTLColumn[tbl] + " + INTERVAL " + schemas.TTLInterval(s.ttl)
		}
		s.log.Warn("table keeps the TTL it was created with, not the configured one (the TTL applies to tables the migrations create)",
			"database", s.db, "table", tbl, "table_ttl", got.String(), "configured_ttl", ttlString(s.ttl), "to_change_it", fix)
	}
}

// TTL is a table's row TTL as the server has it: a row whose Column is
// older than Keep is dropped (Keep 0: no TTL, or one of another form).
type TTL struct {
	Column string
	Keep   time.Duration
}

func (t TTL) String() string {
	if t.Keep == 0 {
		return "none"
	}
	return t.Column + " + " + ttlString(t.Keep)
}

func ttlString(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return schemas.TTLInterval(d)
}

// ttlRE matches the TTL clause of system.tables.engine_full, e.g.
// "TTL start_time + toIntervalDay(30)".
var ttlRE = regexp.MustCompile(`\bTTL\s+([A-Za-z_][A-Za-z0-9_]*)\s*\+\s*toInterval(Second|Minute|Hour|Day|Week|Month|Quarter|Year)\((\d+)\)`)

// ttlUnits are the interval lengths; calendar units are taken at their
// longest, so a row counted as expired surely is.
var ttlUnits = map[string]time.Duration{
	"Second": time.Second, "Minute": time.Minute, "Hour": time.Hour, "Day": 24 * time.Hour,
	"Week": 7 * 24 * time.Hour, "Month": 31 * 24 * time.Hour, "Quarter": 92 * 24 * time.Hour, "Year": 366 * 24 * time.Hour,
}

// ParseTTL reads the TTL of an engine_full string (a TTL of another form
// than "column + interval" reads as none).
func ParseTTL(engineFull string) TTL {
	m := ttlRE.FindStringSubmatch(engineFull)
	if m == nil {
		return TTL{}
	}
	n, err := strconv.ParseInt(m[3], 10, 64)
	if err != nil {
		return TTL{}
	}
	return TTL{Column: m[1], Keep: time.Duration(n) * ttlUnits[m[2]]}
}

// TableTTL reads a table's TTL from the server (cached until the next
// Migrate).
func (s *Store) TableTTL(ctx context.Context, table string) (TTL, error) {
	s.mu.Lock()
	t, ok := s.tableTTLs[table]
	s.mu.Unlock()
	if ok {
		return t, nil
	}
	var engine string
	if err := s.conn.QueryRow(ctx, "SELECT engine_full FROM system.tables WHERE database = ? AND name = ?", s.db, table).Scan(&engine); err != nil {
		return TTL{}, fmt.Errorf("read the TTL of %s.%s: %w", s.db, table, err)
	}
	t = ParseTTL(engine)
	s.mu.Lock()
	s.tableTTLs[table] = t
	s.mu.Unlock()
	return t, nil
}

// expiredWarnEvery bounds the expired-rows warnings to one per table per
// interval (with the count since the last one).
const expiredWarnEvery = time.Minute

// noteExpired counts the rows of an insert that are older than the table's
// TTL — ClickHouse deletes them in the TTL merge that follows the insert
// within moments, so a replay of data older than the TTL would otherwise
// vanish without a word — and warns. n is the insert's row count; column
// gives the reader of a column's values (ok false for a value that is not a
// time.Time).
func (s *Store) noteExpired(ctx context.Context, t Table, n int, column func(col int) func(i int) (time.Time, bool)) {
	ttl, err := s.TableTTL(ctx, t.Name)
	if err != nil || ttl.Keep == 0 {
		return
	}
	col := -1
	for i, c := range t.Columns {
		if c == ttl.Column {
			col = i
			break
		}
	}
	if col < 0 {
		return
	}
	now := time.Now()
	cutoff := now.Add(-ttl.Keep)
	var expired int64
	var oldest time.Time
	at := column(col)
	for i := range n {
		ts, ok := at(i)
		if !ok || !ts.Before(cutoff) {
			continue
		}
		expired++
		if oldest.IsZero() || ts.Before(oldest) {
			oldest = ts
		}
	}
	if expired == 0 {
		return
	}
	s.expiredRows.Add(expired)
	s.mu.Lock()
	s.unwarned[t.Name] += expired
	pending := s.unwarned[t.Name]
	warn := now.Sub(s.warned[t.Name]) >= expiredWarnEvery
	if warn {
		s.warned[t.Name] = now
		s.unwarned[t.Name] = 0
	}
	s.mu.Unlock()
	if warn {
		s.log.Warn("rows older than the table's TTL were inserted: ClickHouse deletes them at once (replay older data into a database created with --ttl 0 or a longer --ttl)",
			"database", s.db, "table", t.Name, "rows", pending, "total", s.expiredRows.Load(), "oldest", oldest.UTC().Format(time.RFC3339), "ttl", ttl.String())
	}
}

var migrationsTable = Table{Name: "schema_migrations", Columns: []string{"version", "name", "checksum", "applied_at"}}

func (s *Store) appliedMigrations(ctx context.Context) (map[uint32]string, error) {
	rows, err := s.conn.Query(ctx, "SELECT version, checksum FROM schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	defer rows.Close()
	out := map[uint32]string{}
	for rows.Next() {
		var v uint32
		var sum string
		if err := rows.Scan(&v, &sum); err != nil {
			return nil, fmt.Errorf("scan schema_migrations: %w", err)
		}
		out[v] = sum
	}
	return out, rows.Err()
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// Table is a destination table with its column list, in insert order.
type Table struct {
	Name    string
	Columns []string
}

// InsertSQL is the INSERT statement naming every column.
func (t Table) InsertSQL() string {
	return "INSERT INTO " + t.Name + " (" + strings.Join(t.Columns, ", ") + ")"
}

// Insert sends rows (each a slice of values in t.Columns order) as one
// batch. It returns only after the server acknowledged the block. A failure
// is an *InsertError, whose Stage says which rows are to blame.
func (s *Store) Insert(ctx context.Context, t Table, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	b, err := s.conn.PrepareBatch(ctx, t.InsertSQL())
	if err != nil {
		return &InsertError{Table: t.Name, Stage: StagePrepare, Rows: len(rows), Err: err}
	}
	for i, r := range rows {
		if len(r) != len(t.Columns) {
			_ = b.Abort()
			return &InsertError{Table: t.Name, Stage: StageAppend, Row: i, Rows: len(rows), Err: fmt.Errorf("%d values for %d columns", len(r), len(t.Columns))}
		}
		if err := b.Append(r...); err != nil {
			_ = b.Abort()
			return &InsertError{Table: t.Name, Stage: StageAppend, Row: i, Rows: len(rows), Err: err}
		}
	}
	if err := b.Send(); err != nil {
		return &InsertError{Table: t.Name, Stage: StageSend, Rows: len(rows), Err: err}
	}
	s.noteExpired(ctx, t, len(rows), func(col int) func(int) (time.Time, bool) {
		return func(i int) (time.Time, bool) { v, ok := rows[i][col].(time.Time); return v, ok }
	})
	return nil
}

// InsertStage is where an Insert failed.
type InsertStage uint8

const (
	// StagePrepare: the server refused the INSERT statement itself (an
	// unknown table or column, no grant, no connection): every row of the
	// batch would fail alike.
	StagePrepare InsertStage = iota + 1
	// StageAppend: the client could not encode row Row for its column
	// types (a type mismatch): that row is bad, the rows before it were not.
	StageAppend
	// StageSend: the server refused the block (a constraint, too many
	// partitions, a value out of range) or the connection failed: some rows
	// or all, or none when it is retriable.
	StageSend
)

func (st InsertStage) String() string {
	switch st {
	case StagePrepare:
		return "prepare"
	case StageAppend:
		return "append"
	case StageSend:
		return "send"
	}
	return "unknown"
}

// InsertError is a failed Insert.
type InsertError struct {
	Table string
	Stage InsertStage
	Row   int // StageAppend: the index of the row that could not be encoded
	Rows  int // rows in the batch
	Err   error
}

func (e *InsertError) Error() string {
	switch e.Stage {
	case StagePrepare:
		return fmt.Sprintf("prepare insert into %s: %v", e.Table, e.Err)
	case StageAppend:
		return fmt.Sprintf("append row %d to %s: %v", e.Row, e.Table, e.Err)
	}
	return fmt.Sprintf("send %d rows to %s: %v", e.Rows, e.Table, e.Err)
}

func (e *InsertError) Unwrap() error { return e.Err }

// retriableCodes are the server exceptions that say "try again later" with
// the same data: timeouts, overload, memory, the network, replication and
// Keeper trouble, too many parts (merges behind), and the credentials and
// grants of the connecting user (the configuration, not the data, is at
// fault: there is nothing to isolate, and dead-lettering every row would
// turn a credentials mistake into a replay). Every other code — unknown
// table or column (16, 47, 60), type and parse errors (6, 27, 38, 41, 53,
// 70, 117, 321, 349), constraints (469), too many partitions in one insert
// (252 with that message) — is about what was inserted, and permanent.
var retriableCodes = map[int32]bool{
	3: true, 32: true, // UNEXPECTED_END_OF_FILE, ATTEMPT_TO_READ_AFTER_EOF: a cut stream
	159: true, 160: true, 209: true, 210: true, // TIMEOUT_EXCEEDED, TOO_SLOW, SOCKET_TIMEOUT, NETWORK_ERROR
	164: true, 192: true, 291: true, 497: true, 516: true, // READONLY, UNKNOWN_USER, DATABASE_ACCESS_DENIED, ACCESS_DENIED, AUTHENTICATION_FAILED
	173: true, 241: true, // CANNOT_ALLOCATE_MEMORY, MEMORY_LIMIT_EXCEEDED
	201: true, 202: true, 203: true, 745: true, // QUOTA_EXCEEDED, TOO_MANY_SIMULTANEOUS_QUERIES, NO_FREE_CONNECTION, SERVER_OVERLOADED
	225: true, 242: true, 285: true, 286: true, 319: true, 999: true, // NO_ZOOKEEPER, TABLE_IS_READ_ONLY, TOO_FEW_LIVE_REPLICAS, UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE, UNKNOWN_STATUS_OF_INSERT, KEEPER_EXCEPTION
	236: true, 394: true, 735: true, // ABORTED, QUERY_WAS_CANCELLED, QUERY_WAS_CANCELLED_BY_CLIENT
	373: true, 425: true, 439: true, 473: true, 733: true, 1000: true, // SESSION_IS_LOCKED, SYSTEM_ERROR, CANNOT_SCHEDULE_TASK, DEADLOCK_AVOIDED, TABLE_IS_BEING_RESTARTED, POCO_EXCEPTION
}

// codeTooManyParts is TOO_MANY_PARTS, which the server also raises for an
// insert that spans more partitions than max_partitions_per_insert_block.
const codeTooManyParts = 252

// IsRetriable reports whether an error from the store is worth retrying
// with the same data: connection failures, timeouts and the exceptions of
// retriableCodes are; a row the client cannot encode (StageAppend), a block
// that does not fit its table (ErrBlockShape) and every
// other server exception (schema, type, constraint, too many partitions in
// one insert) are not. An error that is neither a server exception nor an
// encoding error is taken as a connection failure (retriable).
func IsRetriable(err error) bool {
	if err == nil {
		return false
	}
	var ie *InsertError
	if errors.As(err, &ie) && ie.Stage == StageAppend || errors.Is(err, ErrBlockShape) {
		return false
	}
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		if ex.Code == codeTooManyParts {
			// "Too many parts": merges are behind, later succeeds.
			// "Too many partitions for single INSERT block": this block
			// never will (a smaller one may).
			return !strings.Contains(strings.ToLower(ex.Message), "partitions")
		}
		return retriableCodes[ex.Code]
	}
	return true
}
