package testkit

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// ClickHouseOptions returns clickhouse-go options for the test server at
// addr, using database.
//
// The test server is ClickHouse 26.9 (deploy/dev/clickhouse.sh); the
// project supports 24.8 and newer. ReadTimeout bounds each read so that a
// hung query fails the test instead of hanging it.
func ClickHouseOptions(addr, database string) *clickhouse.Options {
	return &clickhouse.Options{
		Protocol:    clickhouse.Native,
		Addr:        []string{addr},
		Auth:        clickhouse.Auth{Database: database, Username: "default"},
		DialTimeout: 5 * time.Second,
		ReadTimeout: 60 * time.Second,
	}
}

// Connect opens a native-protocol connection to database on the server at
// addr and closes it on cleanup.
func Connect(t testing.TB, addr, database string) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(ClickHouseOptions(addr, database))
	if err != nil {
		t.Fatalf("open ClickHouse %s/%s: %v", addr, database, err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := conn.Ping(ctx); err != nil {
		t.Fatalf("ping ClickHouse %s: %v", addr, err)
	}
	return conn
}

// FreshDatabase creates a uniquely named database on the server at addr and
// drops it on cleanup; it returns the name.
func FreshDatabase(t testing.TB, addr string) string {
	t.Helper()
	name := uniqueName(t, "test")
	conn := Connect(t, addr, "default")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// A fresh connection: the test may have restarted the server.
		c, err := clickhouse.Open(ClickHouseOptions(addr, "default"))
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer c.Close()
		if err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return name
}

// ReadOnlyUser is the dev server's read-only user, `analyst` on a profile
// with readonly 1 (deploy/dev/clickhouse.sh), and its password
// (CH_ANALYST_PASSWORD, default "analyst"): it reads, and every write,
// DDL statement or setting is refused with code 164. It checks that the
// user logs in to database on the server at addr, or skips the test (fails
// it under CI).
func ReadOnlyUser(t testing.TB, addr, database string) (user, password string) {
	t.Helper()
	user, password = "analyst", os.Getenv("CH_ANALYST_PASSWORD")
	if password == "" {
		password = "analyst"
	}
	opts := ClickHouseOptions(addr, database)
	opts.Auth.Username, opts.Auth.Password = user, password
	conn, err := clickhouse.Open(opts)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = conn.Ping(ctx)
		cancel()
		conn.Close()
	}
	if err != nil {
		msg := "the test ClickHouse has no read-only user " + user + " (deploy/dev/clickhouse.sh creates one): " + err.Error()
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return user, password
}
