package chstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tailcause/tailcause/schemas"
)

// Config says where the store is.
type Config struct {
	Addr        string        // host:port of the native protocol
	Database    string        // created when missing
	Username    string        // default "default"
	Password    string        //
	DialTimeout time.Duration // default 5s
	MaxConns    int           // default 4
}

// DefaultConfig is the local development store.
func DefaultConfig() Config {
	return Config{Addr: "127.0.0.1:9000", Database: "tailcause", Username: "default", DialTimeout: 5 * time.Second, MaxConns: 4}
}

// Validate reports a configuration mistake.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("clickhouse address %q: %w", c.Addr, err)
	}
	if c.Database == "" || strings.ContainsAny(c.Database, "`\"' .;") {
		return fmt.Errorf("clickhouse database %q: want a plain identifier", c.Database)
	}
	return nil
}

// Store is an open connection pool to one database.
type Store struct {
	conn    driver.Conn
	version schemas.ServerVersion
	db      string
}

// Open connects, creates the database when missing, and reads the server
// version. It does not migrate.
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
	boot, err := dial(cfg, "default")
	if err != nil {
		return nil, err
	}
	if err := boot.Exec(ctx, "CREATE DATABASE IF NOT EXISTS `"+cfg.Database+"`"); err != nil {
		boot.Close()
		return nil, fmt.Errorf("create database %s at %s: %w", cfg.Database, cfg.Addr, err)
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
	return &Store{conn: conn, version: schemas.ServerVersion{Major: int(sv.Version.Major), Minor: int(sv.Version.Minor)}, db: cfg.Database}, nil
}

func dial(cfg Config, db string) (driver.Conn, error) {
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:         []string{cfg.Addr},
		Auth:         clickhouse.Auth{Database: db, Username: cfg.Username, Password: cfg.Password},
		DialTimeout:  cfg.DialTimeout,
		MaxOpenConns: cfg.MaxConns,
		MaxIdleConns: cfg.MaxConns,
	})
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

// Migrate applies the embedded migrations that are not yet recorded, in
// order, and verifies the checksums of those that are. Every statement is
// idempotent (IF NOT EXISTS), so two processes migrating at once converge.
func (s *Store) Migrate(ctx context.Context, log *slog.Logger) ([]schemas.Migration, error) {
	ms, err := schemas.Migrations()
	if err != nil {
		return nil, err
	}
	if err := s.conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations
(version UInt32, name String, checksum String, applied_at DateTime)
ENGINE = MergeTree ORDER BY version`); err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	applied, err := s.appliedMigrations(ctx)
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
		stmts, err := m.Statements(s.version)
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
	return done, nil
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
// batch. It returns only after the server acknowledged the block.
func (s *Store) Insert(ctx context.Context, t Table, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	b, err := s.conn.PrepareBatch(ctx, t.InsertSQL())
	if err != nil {
		return fmt.Errorf("prepare insert into %s: %w", t.Name, err)
	}
	for i, r := range rows {
		if len(r) != len(t.Columns) {
			_ = b.Abort()
			return fmt.Errorf("insert into %s: row %d has %d values for %d columns", t.Name, i, len(r), len(t.Columns))
		}
		if err := b.Append(r...); err != nil {
			_ = b.Abort()
			return fmt.Errorf("append row %d to %s: %w", i, t.Name, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("send %d rows to %s: %w", len(rows), t.Name, err)
	}
	return nil
}

// IsRetriable reports whether an error from the store is worth retrying:
// connection failures and timeouts are; a schema or data error is not.
func IsRetriable(err error) bool {
	if err == nil {
		return false
	}
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		// Server-side exceptions are about the query or data, except the
		// few that mean "try again later".
		switch ex.Code {
		case 159, 160, 202, 203, 209, 210, 241, 242, 252, 425: // timeouts, too many queries/parts, memory, network, readonly-replica
			return true
		}
		return false
	}
	return true
}
