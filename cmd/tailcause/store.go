package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/schemas"
)

// storeFlags are the ClickHouse flags every subcommand shares.
type storeFlags struct {
	addr, database, user, password string
	ttl                            ttlFlag
	log                            *slog.Logger
	sec                            chSecurityFlags // DSN, TLS, password file (secure.go)
	noMigrate                      bool            // --no-migrate (serving roles)
}

// schemaUse is what a subcommand does with the schema when it opens the
// store.
type schemaUse int

const (
	// schemaConnect only connects (creating the database): migrate, demo.
	schemaConnect schemaUse = iota
	// schemaMigrate applies pending migrations, or with --no-migrate
	// (registerNoMigrate) checks them like schemaCheck: the serving roles.
	schemaMigrate
	// schemaCheck creates and writes nothing, and fails with
	// chstore.ErrSchema unless every migration is applied: rank.
	schemaCheck
)

// registerNoMigrate adds --no-migrate, for the serving roles.
func (s *storeFlags) registerNoMigrate(fs *flag.FlagSet) {
	fs.BoolVar(&s.noMigrate, "no-migrate", false, "do not apply the ClickHouse migrations at start-up (`tailcause migrate`, a separate step, does): "+
		"create and alter nothing, and refuse to start unless the database holds every migration this binary needs")
}

// replayCommands write fault-lab data, which is dated in the past (early
// 2026), into databases of their own: their --ttl defaults to 0 (none), or
// the default TTL would delete the rows as they are written.
var replayCommands = map[string]bool{"eval": true, "demo": true}

func (s *storeFlags) register(fs *flag.FlagSet, e *env) {
	d := chstore.DefaultConfig()
	fs.StringVar(&s.addr, "clickhouse", orDefault(e.getenv("TAILCAUSE_CLICKHOUSE"), d.Addr), "ClickHouse native-protocol address (env TAILCAUSE_CLICKHOUSE)")
	fs.StringVar(&s.database, "database", orDefault(e.getenv("TAILCAUSE_DATABASE"), d.Database), "ClickHouse database (env TAILCAUSE_DATABASE)")
	fs.StringVar(&s.user, "clickhouse-user", orDefault(e.getenv("TAILCAUSE_CLICKHOUSE_USER"), d.Username), "ClickHouse user")
	s.password = e.getenv("TAILCAUSE_CLICKHOUSE_PASSWORD")
	s.sec.register(fs, e)
	s.ttl = ttlFlag(d.TTL)
	if replayCommands[fs.Name()] {
		s.ttl = 0
	}
	fs.Var(&s.ttl, "ttl", "how long the telemetry tables (requests, token_stalls, gpu_samples, engine_samples) keep rows, by event time: "+
		"30d, 36h, ...; 0 = no TTL on any table (the operational ones otherwise keep 7 to 365 days). "+
		"Applies when the tables are created; rows inserted older than a table's TTL are deleted by ClickHouse (with a warning)")
	s.log = e.log
}

func (s *storeFlags) config() chstore.Config {
	c := chstore.DefaultConfig()
	c.Addr, c.Database, c.Username, c.Password = s.addr, s.database, s.user, s.password
	c.TTL, c.Logger = time.Duration(s.ttl), s.log
	if s.sec.loaded {
		c.Password, c.DSN, c.TLS = s.sec.password, s.sec.dsn, s.sec.tlsCfg
	}
	return c
}

// ttlFlag is a TTL flag: "30d" (days), a Go duration ("36h"), or 0.
type ttlFlag time.Duration

func (t *ttlFlag) String() string {
	d := time.Duration(*t)
	switch {
	case d == 0:
		return "0"
	case d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

func (t *ttlFlag) Set(v string) error {
	v = strings.TrimSpace(v)
	var d time.Duration
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			return fmt.Errorf("ttl %q: want days (30d), a duration (36h) or 0", v)
		}
		d = time.Duration(days) * 24 * time.Hour
	} else if v == "0" {
		d = 0
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return fmt.Errorf("ttl %q: want days (30d), a duration (36h) or 0", v)
		}
	}
	if err := (schemas.Options{TTL: d}).Validate(); err != nil {
		return err
	}
	*t = ttlFlag(d)
	return nil
}

// open connects and migrates or checks the schema (use), retrying while
// the server is not up yet.
func (s *storeFlags) open(ctx context.Context, e *env, use schemaUse) (*chstore.Store, error) {
	if err := s.sec.load(s.password); err != nil {
		return nil, err
	}
	if err := s.config().Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err) // waiting will not fix the flags
	}
	if use == schemaMigrate && s.noMigrate {
		use = schemaCheck
	}
	cfg := s.config()
	cfg.NoCreate = use == schemaCheck
	var last error
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		st, err := chstore.Open(ctx, cfg)
		if err == nil {
			switch use {
			case schemaMigrate:
				_, err = st.Migrate(ctx, e.log)
			case schemaCheck:
				err = st.CheckSchema(ctx)
			}
			if err != nil {
				st.Close()
				return nil, err
			}
			return st, nil
		}
		if errors.Is(err, chstore.ErrUnsupportedServer) || errors.Is(err, chstore.ErrSchema) {
			return nil, err // waiting will not make the server newer, nor migrate it
		}
		last = err
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		e.log.Warn("waiting for ClickHouse", "addr", s.where(), "err", err)
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return nil, fmt.Errorf("connect to ClickHouse at %s: %w", s.where(), last)
}

func orDefault(v, d string) string {
	if v != "" {
		return v
	}
	return d
}
