// Command tailcause is the one binary of the project: every role is a
// subcommand, and all wiring happens here (flags, environment, logger,
// registries). It is the only place that calls os.Exit.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
)

// env is what every subcommand receives from main: no globals.
type env struct {
	stdout io.Writer
	stderr io.Writer
	log    *slog.Logger
	getenv func(string) string
}

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

// commands is the subcommand table. Each entry lives in its own file.
func commands() map[string]command {
	return map[string]command{
		"version": {"print the version", cmdVersion},
		"sim":     {"simulate an LLM-serving fleet with injected faults (the fault lab)", cmdSim},
		"migrate": {"apply the ClickHouse migrations (or --print their DDL)", cmdMigrate},
		"all":     {"ingest + enrich in one process (--embedded-kafka: with an in-process broker)", cmdAll},
		"demo":    {"the whole story in one command: fault lab → pipeline → incident → webhook → report", cmdDemo},
		"eval":    {"score the culprit ranking on randomized fault-lab fleets run through the pipeline, asked fleet-wide", cmdEval},
		"enrich":  {"consume OTLP from Kafka, join requests with engine/GPU state, write ClickHouse", cmdEnrich},
		"rank":    {"rank the root causes of a tail-latency breach in a time window", cmdRank},
		"causal":  {"watch each scope's tail latency; open, update and resolve incidents", cmdCausal},
		"query":   {"serve the HTTP API, incident reports and alert webhooks over ClickHouse", cmdQuery},
		"ingest":  {"receive OTLP (gRPC :4317, HTTP :4318) and write it to Kafka as the Collector's kafka exporter does", cmdIngest},
		"topics":  {"create the declared Kafka topics (or --check them)", cmdTopics},
	}
}

var version = "dev" // set by -ldflags at build time

func cmdVersion(_ context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, versionString())
	return nil
}

// errUsage marks a command-line mistake (exit status 2).
var errUsage = errors.New("usage")

// parseArgs parses a subcommand's flags and checks them (checkFlags): a
// mistake is errUsage (exit status 2) naming the flag, -h is flag.ErrHelp
// (exit 0; the flags are printed to fs's output), and positional arguments
// are refused. A mistake prints no flag list: help is `tailcause help
// <command>`, on stdout.
func parseArgs(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.SetOutput(io.Discard) // the error is returned, not printed twice
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.PrintDefaults()
			return err
		}
		return fmt.Errorf("%w: %v (see tailcause help %s)", errUsage, err, fs.Name())
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q (see tailcause help %s)", errUsage, fs.Args(), fs.Name())
	}
	return checkFlags(fs)
}

func run(ctx context.Context, e *env, args []string) int {
	cmds := commands()
	if len(args) < 1 {
		topUsage(e.stderr, cmds)
		return 2
	}
	switch a := args[0]; {
	case isHelpArg(a) || a == "help" && len(args) == 1:
		topUsage(e.stdout, cmds)
		return 0
	case a == "--version" || a == "-version" || a == "-v":
		fmt.Fprintln(e.stdout, versionString())
		return 0
	case a == "help" && args[1] == "--markdown" && len(args) == 2:
		writeMarkdown(ctx, e.stdout, cmds)
		return 0
	case a == "help":
		c, ok := cmds[args[1]]
		if !ok || len(args) > 2 {
			fmt.Fprintf(e.stderr, "tailcause help: unknown command %q\n", strings.Join(args[1:], " "))
			topUsage(e.stderr, cmds)
			return 2
		}
		writeHelp(ctx, e.stdout, args[1], c)
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "tailcause: unknown command %q\n", args[0])
		topUsage(e.stderr, cmds)
		return 2
	}
	if slices.ContainsFunc(args[1:], isHelpArg) {
		writeHelp(ctx, e.stdout, args[0], c)
		return 0
	}
	if err := c.run(ctx, e, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(e.stderr, "tailcause %s: %v\n", args[0], err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	e := &env{
		stdout: os.Stdout,
		stderr: os.Stderr,
		log:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		getenv: os.Getenv,
	}
	code := run(ctx, e, os.Args[1:])
	stop()
	os.Exit(code)
}
