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
	print := fs.String("print", "", "print the DDL rendered for a server version (e.g. 18.16 or 24.8) instead of applying it")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if *print != "" {
		v, err := schemas.ParseServerVersion(*print)
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		out, err := schemas.RenderAll(v)
		if err != nil {
			return err
		}
		fmt.Fprint(e.stdout, out)
		return nil
	}
	st, err := sf.open(ctx, e, false)
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
