package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/tailcause/tailcause/schemas"
)

func cmdMigrate(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var sf storeFlags
	sf.register(fs, e)
	print := fs.Bool("print", false, "print the DDL (ClickHouse 24.8 and newer, with the --ttl given) instead of applying it")
	check := fs.Bool("check", false, "only check, writing nothing (a read-only user will do): exit 1 unless every migration is applied, as a role started with --no-migrate requires")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if *print && *check {
		return fmt.Errorf("%w: --print and --check: pick one", errUsage)
	}
	if *check {
		st, err := sf.open(ctx, e, schemaCheck)
		if err != nil {
			return err
		}
		defer st.Close()
		fmt.Fprintf(e.stdout, "database %s on ClickHouse %s: every migration is applied\n", st.Database(), st.Version())
		return nil
	}
	if *print {
		out, err := schemas.RenderAll(schemas.Options{TTL: sf.config().TTL})
		if err != nil {
			return err
		}
		fmt.Fprint(e.stdout, out)
		return nil
	}
	st, err := sf.open(ctx, e, schemaConnect)
	if err != nil {
		return err
	}
	defer st.Close()
	done, err := st.Migrate(ctx, e.log)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "database %s on ClickHouse %s: %d migration(s) applied\n", st.Database(), st.Version(), len(done))
	for _, m := range done {
		fmt.Fprintf(e.stdout, "  %s %s\n", m.Name, m.Checksum[:12])
	}
	return nil
}
