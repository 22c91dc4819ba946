package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
)

// storeFlags are the ClickHouse flags every subcommand shares.
type storeFlags struct {
	addr, database, user, password string
}

func (s *storeFlags) register(fs *flag.FlagSet, e *env) {
	d := chstore.DefaultConfig()
	fs.StringVar(&s.addr, "clickhouse", orDefault(e.getenv("TAILCAUSE_CLICKHOUSE"), d.Addr), "ClickHouse native-protocol address (env TAILCAUSE_CLICKHOUSE)")
	fs.StringVar(&s.database, "database", orDefault(e.getenv("TAILCAUSE_DATABASE"), d.Database), "ClickHouse database (env TAILCAUSE_DATABASE)")
	fs.StringVar(&s.user, "clickhouse-user", orDefault(e.getenv("TAILCAUSE_CLICKHOUSE_USER"), d.Username), "ClickHouse user")
	s.password = e.getenv("TAILCAUSE_CLICKHOUSE_PASSWORD")
}

func (s *storeFlags) config() chstore.Config {
	c := chstore.DefaultConfig()
	c.Addr, c.Database, c.Username, c.Password = s.addr, s.database, s.user, s.password
	return c
}

// open connects and migrates, retrying while the server is not up yet.
func (s *storeFlags) open(ctx context.Context, e *env, migrate bool) (*chstore.Store, error) {
	var last error
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		st, err := chstore.Open(ctx, s.config())
		if err == nil {
			if migrate {
				if _, err := st.Migrate(ctx, e.log); err != nil {
					st.Close()
					return nil, err
				}
			}
			return st, nil
		}
		last = err
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		e.log.Warn("waiting for ClickHouse", "addr", s.addr, "err", err)
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return nil, fmt.Errorf("connect to ClickHouse at %s: %w", s.addr, last)
}

func orDefault(v, d string) string {
	if v != "" {
		return v
	}
	return d
}
