package main

// The command line's manners, shared by every subcommand: help on stdout
// (synopsis, description, flags, examples, environment), --version, and the
// checks that run on the parsed flags before a subcommand connects anywhere.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tailcause/tailcause/causal"
	"github.com/tailcause/tailcause/causal/dag"
)

// helpDoc is what `tailcause help <cmd>` says besides the flags.
type helpDoc struct {
	synopsis []string // after "tailcause "
	about    string
	examples []string
}

// helpDocs documents every subcommand (TestHelp checks that each has one).
var helpDocs = map[string]helpDoc{
	"ingest": {
		synopsis: []string{"ingest [--kafka brokers] [--grpc-addr :4317] [--http-addr :4318] [flags]"},
		about: "Receive OTLP over gRPC and HTTP (protobuf or JSON, gzip) and write it to Kafka exactly as the Collector's kafka " +
			"exporter does; a request is acknowledged only after Kafka acknowledged every record (acks=all). " +
			"Clients authenticate with a bearer token (TAILCAUSE_INGEST_TOKEN).",
		examples: []string{"TAILCAUSE_INGEST_TOKEN=$(cat /run/secrets/ingest-token) tailcause ingest --kafka kafka-0:9092,kafka-1:9092"},
	},
	"enrich": {
		synopsis: []string{"enrich [--kafka brokers] [--clickhouse host:port] [--database db] [flags]"},
		about: "Consume the OTLP topics, join every request with the engine, KV-cache and GPU state it ran under, and write " +
			"requests, token stalls and samples to ClickHouse; offsets are committed only after ClickHouse acknowledged. " +
			"Undecodable records, rows ClickHouse refuses and events outside the accepted event time go to the " +
			"dead-letter topic and rejected_input.",
		examples: []string{
			"tailcause enrich --kafka kafka-0:9092 --clickhouse clickhouse:9000",
			"tailcause enrich --ttl 0 --max-event-age 0 --group replay-2026-11   # replay old topics into a database without TTL",
		},
	},
	"all": {
		synopsis: []string{"all [--embedded-kafka | --kafka brokers] [--clickhouse host:port] [flags]"},
		about:    "ingest and enrich in one process; with --embedded-kafka on an in-process broker.",
		examples: []string{"TAILCAUSE_INGEST_TOKEN=dev-token-0123456789 tailcause all --embedded-kafka --clickhouse 127.0.0.1:9000"},
	},
	"migrate": {
		synopsis: []string{"migrate [--clickhouse host:port] [--database db] [--ttl 30d]", "migrate --check [--clickhouse host:port] [--database db]", "migrate --print [--ttl 30d]"},
		about: "Apply the embedded ClickHouse migrations, check them without writing anything (--check: exit status 1 unless " +
			"every one is applied), or print their DDL. The serving roles also migrate at start-up unless --no-migrate is " +
			"given (the Kubernetes manifests run this as a Job and the roles with --no-migrate, so only this step needs DDL rights).",
		examples: []string{"tailcause migrate --clickhouse clickhouse:9000 --ttl 90d", "tailcause migrate --check", "tailcause migrate --print --ttl 0"},
	},
	"topics": {
		synopsis: []string{"topics [--kafka brokers] [--replication n] [--check]"},
		about:    "Create the Kafka topics of schemas/kafka/topics.json, or with --check validate them (partitions, replication).",
		examples: []string{"tailcause topics --kafka kafka-0:9092 --replication 3", "tailcause topics --check"},
	},
	"sim": {
		synopsis: []string{"sim [--scenario name|file.json] [--seed n] [--duration d] (--out file | --otlp-grpc host:port | --otlp-http url | --kafka brokers)", "sim --list"},
		about:    "The fault lab: simulate an LLM-serving fleet with injected faults and emit its telemetry in real formats, with the ground truth.",
		examples: []string{"tailcause sim --list", "tailcause sim --scenario thermal_throttle --duration 30m --kafka 127.0.0.1:9092 --start now"},
	},
	"rank": {
		synopsis: []string{"rank --from RFC3339 --to RFC3339 [--scope k=v[,k=v]] [--format json|table] [flags]"},
		about: "Rank the root causes of the tail latency inside [from, to). Without --scope, the whole fleet: every model and " +
			"every engine or host far worse than its peers; one v1 document per breach (a JSON array, most severe first, " +
			"when there are several). When nothing broke against the window's own baseline and the hour before it holds requests, " +
			"the window is asked again with that history, and a breach that began before the window and lasts into it is reported " +
			"(its document says so in its notes): the fault a page points at has often begun before the window asked about. " +
			"Prints one document with status \"ok\" and no culprits when nothing broke (exit status 0 either way). " +
			"It creates and migrates nothing and reads only (--store also writes the incident): a read-only ClickHouse user will do, " +
			"and a database without the current schema is an error naming `tailcause migrate`.",
		examples: []string{
			"tailcause rank --from 2026-11-30T09:00:00Z --to 2026-11-30T10:00:00Z",
			"tailcause rank --from 2026-11-30T09:00:00Z --to 2026-11-30T10:00:00Z --scope model=llama-3-8b --slo-ms 4000 --format table",
		},
	},
	"causal": {
		synopsis: []string{"causal [--scope k=v | --scope-by model] [--interval 1m] [--window 10m] [--once] [flags]"},
		about:    "Watch the tail latency of each scope; open, update and resolve incidents with ranked culprits in ClickHouse.",
		examples: []string{"tailcause causal --clickhouse clickhouse:9000", "tailcause causal --scope model=llama-3-8b --slo-ms 4000 --once"},
	},
	"query": {
		synopsis: []string{"query [--listen 127.0.0.1:8080] [--webhooks file.json] [flags]"},
		about: "Serve the HTTP API (schemas/openapi.json), incident report pages and, with --webhooks, the alert webhooks " +
			"from the durable outbox. The API wants a bearer token (TAILCAUSE_QUERY_TOKEN); webhook secrets are read from " +
			"the environment variables the webhooks config names. /metrics (no token) and /readyz are also served on " +
			"--metrics-addr. Without --webhooks it only reads: with --no-migrate a read-only ClickHouse user will do.",
		examples: []string{
			"TAILCAUSE_QUERY_TOKEN=$(cat /run/secrets/query-token) tailcause query --listen :8080 --webhooks /etc/tailcause/webhooks.json",
			"TAILCAUSE_CLICKHOUSE_USER=reader TAILCAUSE_CLICKHOUSE_PASSWORD=... tailcause query --no-migrate --listen :8080   # read-only",
		},
	},
	"demo": {
		synopsis: []string{"demo [--scenario name] [--hold] [flags]"},
		about:    "The whole story in one command: the fault lab through an in-process Kafka, the enricher and ClickHouse, the ranked incident, the signed webhook, the report page.",
		examples: []string{"tailcause demo", "tailcause demo --scenario thermal_throttle --hold"},
	},
	"eval": {
		synopsis: []string{"eval [--set tune|holdout] [--runs n | --seeds 1,2,3] [--parallel n] [--json file] [flags]"},
		about:    "Score the culprit ranking on randomized fault-lab fleets run through Kafka, enrich and ClickHouse, asked fleet-wide; tables on stdout, one progress line per run on stderr.",
		examples: []string{"tailcause eval --runs 5", "tailcause eval --set holdout --runs 20 --parallel 3 --json holdout.json"},
	},
	"version": {
		synopsis: []string{"version", "--version"},
		about:    "Print the version.",
		examples: []string{"tailcause --version"},
	},
}

// envDocs describes the environment variables the subcommands read; the
// help of a command lists those it reads.
var envDocs = map[string]string{
	"TAILCAUSE_CLICKHOUSE":          "ClickHouse native-protocol address, host:port (--clickhouse)",
	"TAILCAUSE_DATABASE":            "ClickHouse database (--database)",
	"TAILCAUSE_CLICKHOUSE_USER":     "ClickHouse user (--clickhouse-user)",
	"TAILCAUSE_CLICKHOUSE_PASSWORD": "ClickHouse password (no flag: flags show in ps)",
	"TAILCAUSE_KAFKA":               "Kafka bootstrap brokers, comma-separated (--kafka)",
	"TAILCAUSE_METRICS_ADDR":        "listen address of /metrics, /healthz, /readyz (--metrics-addr)",
	"TAILCAUSE_INGEST_TOKEN":        "bearer token OTLP clients must send (--token)",
	"TAILCAUSE_QUERY_TOKEN":         "bearer token of the HTTP API, at least 16 bytes (--token)",
	"TAILCAUSE_QUERY_BASE_URL":      "external URL of the query server, for report links in alerts (--base-url)",
	// Connection security (secure.go; README "Security").
	"TAILCAUSE_CLICKHOUSE_DSN":             "ClickHouse DSN, instead of --clickhouse; may hold the password (--clickhouse-dsn)",
	"TAILCAUSE_CLICKHOUSE_PASSWORD_FILE":   "file holding the ClickHouse password (--clickhouse-password-file)",
	"TAILCAUSE_CLICKHOUSE_TLS":             "true: connect to ClickHouse over TLS (--clickhouse-tls)",
	"TAILCAUSE_CLICKHOUSE_TLS_CA":          "PEM CAs of ClickHouse's certificate (--clickhouse-tls-ca)",
	"TAILCAUSE_CLICKHOUSE_TLS_CERT":        "PEM client certificate for ClickHouse (--clickhouse-tls-cert)",
	"TAILCAUSE_CLICKHOUSE_TLS_KEY":         "PEM key of the ClickHouse client certificate (--clickhouse-tls-key)",
	"TAILCAUSE_CLICKHOUSE_TLS_SERVER_NAME": "name to check in ClickHouse's certificate (--clickhouse-tls-server-name)",
	"TAILCAUSE_KAFKA_TLS":                  "true: connect to Kafka over TLS (--kafka-tls)",
	"TAILCAUSE_KAFKA_TLS_CA":               "PEM CAs of the brokers' certificates (--kafka-tls-ca)",
	"TAILCAUSE_KAFKA_TLS_CERT":             "PEM client certificate for the brokers (--kafka-tls-cert)",
	"TAILCAUSE_KAFKA_TLS_KEY":              "PEM key of the Kafka client certificate (--kafka-tls-key)",
	"TAILCAUSE_KAFKA_TLS_SERVER_NAME":      "name to check in the brokers' certificates (--kafka-tls-server-name)",
	"TAILCAUSE_KAFKA_SASL_MECHANISM":       "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (--kafka-sasl-mechanism)",
	"TAILCAUSE_KAFKA_SASL_USER":            "Kafka SASL user (--kafka-sasl-user)",
	"TAILCAUSE_KAFKA_SASL_PASSWORD":        "Kafka SASL password (no flag: flags show in ps)",
	"TAILCAUSE_KAFKA_SASL_PASSWORD_FILE":   "file holding the Kafka SASL password (--kafka-sasl-password-file)",
	"TAILCAUSE_TLS_CERT":                   "PEM certificate the listeners serve (--tls-cert)",
	"TAILCAUSE_TLS_KEY":                    "PEM key of that certificate (--tls-key)",
	"TAILCAUSE_TLS_CLIENT_CA":              "PEM CAs of the client certificates the listeners require (--tls-client-ca)",
	"TAILCAUSE_INGEST_TOKEN_FILE":          "file holding the ingest bearer token (--token-file)",
	"TAILCAUSE_QUERY_TOKEN_FILE":           "file holding the query API bearer token (--token-file)",
}

// versionString is the version with the toolchain and, when the binary
// carries it, the commit.
func versionString() string {
	s := "tailcause " + version + " (" + runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, kv := range bi.Settings {
			if kv.Key == "vcs.revision" && len(kv.Value) >= 12 {
				s += ", commit " + kv.Value[:12]
			}
		}
	}
	return s + ")"
}

// topUsage is the overview of `tailcause help`.
func topUsage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: tailcause <command> [flags]\n       tailcause help <command>\n       tailcause --version\n\ncommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun `tailcause help <command>` for a command's flags, examples and environment variables;")
	fmt.Fprintln(w, "`tailcause help --markdown` prints them all as the CLI reference ("+cliReference+").")
}

// helpText is what a subcommand's help says: its doc, its flag listing
// (PrintDefaults) and the environment variables it reads, sorted.
type helpText struct {
	doc   helpDoc
	flags string
	env   []string
}

// collectHelp gets a subcommand's flags by running it with -h under an
// empty environment, so that no default taken from the environment — a
// token — is ever shown, and notes the variables it reads.
func collectHelp(ctx context.Context, name string, c command) helpText {
	var flags bytes.Buffer
	read := map[string]bool{}
	he := &env{
		stdout: io.Discard, stderr: &flags, log: slog.New(slog.DiscardHandler),
		getenv: func(k string) string { read[k] = true; return "" },
	}
	_ = c.run(ctx, he, []string{"-h"})
	vars := make([]string, 0, len(read))
	for k := range read {
		vars = append(vars, k)
	}
	slices.Sort(vars)
	return helpText{doc: helpDocs[name], flags: flags.String(), env: vars}
}

// writeHelp prints a subcommand's help: synopsis, description, flags,
// examples and the environment variables it reads.
func writeHelp(ctx context.Context, w io.Writer, name string, c command) {
	h := collectHelp(ctx, name, c)
	fmt.Fprintln(w, "Usage:")
	for _, s := range h.doc.synopsis {
		fmt.Fprintln(w, "  tailcause "+s)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, wrap(h.doc.about, 100))
	if h.flags != "" {
		fmt.Fprintln(w, "\nFlags:")
		io.WriteString(w, h.flags)
	}
	if len(h.doc.examples) > 0 {
		fmt.Fprintln(w, "\nExamples:")
		for _, ex := range h.doc.examples {
			fmt.Fprintln(w, "  "+ex)
		}
	}
	fmt.Fprintln(w, "\nEnvironment:")
	if len(h.env) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, k := range h.env {
		fmt.Fprintf(w, "  %-30s %s\n", k, envDocs[k])
	}
}

// cliReference is where the generated CLI reference is checked in
// (relative to the module root); TestCLIReference keeps it current.
const cliReference = "docs/cli.md"

// writeMarkdown writes the CLI reference (`tailcause help --markdown`):
// every subcommand's help, from the same parts as `tailcause help <cmd>`.
func writeMarkdown(ctx context.Context, w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	slices.Sort(names)
	fmt.Fprintln(w, "# tailcause command-line reference")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "<!-- Generated by `tailcause help --markdown`; do not edit. Regenerate with")
	fmt.Fprintln(w, "     `go run ./cmd/tailcause help --markdown > "+cliReference+"` (TestCLIReference fails when it is stale). -->")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "One binary; every role is a subcommand. `tailcause help <command>` prints the same text as below.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| command | what it does |")
	fmt.Fprintln(w, "|---|---|")
	for _, n := range names {
		fmt.Fprintf(w, "| [`%s`](#tailcause-%s) | %s |\n", n, n, cmds[n].summary)
	}
	for _, n := range names {
		h := collectHelp(ctx, n, cmds[n])
		fmt.Fprintf(w, "\n## tailcause %s\n\n", n)
		fmt.Fprintln(w, "```")
		for _, s := range h.doc.synopsis {
			fmt.Fprintln(w, "tailcause "+s)
		}
		fmt.Fprintln(w, "```")
		fmt.Fprintln(w)
		fmt.Fprintln(w, h.doc.about)
		if h.flags != "" {
			fmt.Fprintln(w, "\nFlags:\n\n```")
			io.WriteString(w, h.flags)
			fmt.Fprintln(w, "```")
		}
		if len(h.doc.examples) > 0 {
			fmt.Fprintln(w, "\nExamples:\n\n```sh")
			for _, ex := range h.doc.examples {
				fmt.Fprintln(w, ex)
			}
			fmt.Fprintln(w, "```")
		}
		fmt.Fprintln(w, "\nEnvironment:")
		fmt.Fprintln(w)
		if len(h.env) == 0 {
			fmt.Fprintln(w, "none")
			continue
		}
		fmt.Fprintln(w, "| variable | meaning |")
		fmt.Fprintln(w, "|---|---|")
		for _, k := range h.env {
			fmt.Fprintf(w, "| `%s` | %s |\n", k, strings.ReplaceAll(envDocs[k], "|", "\\|"))
		}
	}
}

func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for _, word := range strings.Fields(s) {
		if n > 0 && n+1+len(word) > width {
			b.WriteByte('\n')
			n = 0
		} else if n > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}

func isHelpArg(a string) bool { return a == "-h" || a == "--h" || a == "-help" || a == "--help" }

// checkFlags validates the flags that mean the same in every subcommand
// that has them, right after parsing and before anything connects: a
// ClickHouse address needs a port, Kafka brokers and listen addresses are
// host:port, no duration is negative, a quantile lies in (0, 1), an SLO
// threshold is finite and not negative, an SLO signal is an outcome of the
// default DAG, a scope column is one causal knows, and a window (--from/--to, its
// --baseline-from/--baseline-to) is RFC 3339 and not reversed. Each error
// names the flag and the value.
func checkFlags(fs *flag.FlagSet) error {
	var errs []error
	get := func(name string) (string, bool) {
		f := fs.Lookup(name)
		if f == nil {
			return "", false
		}
		return f.Value.String(), true
	}
	if v, ok := get("clickhouse"); ok {
		if err := checkHostPort(v, false); err != nil {
			errs = append(errs, fmt.Errorf("--clickhouse %q: %v", v, err))
		}
	}
	if v, ok := get("kafka"); ok && strings.TrimSpace(v) != "" {
		for _, b := range splitList(v) {
			if err := checkHostPort(b, false); err != nil {
				errs = append(errs, fmt.Errorf("--kafka %q: broker %q: %v", v, b, err))
			}
		}
	}
	for _, name := range []string{"listen", "grpc-addr", "http-addr", "metrics-addr", "otlp-grpc"} {
		if v, ok := get(name); ok && v != "" {
			if err := checkHostPort(v, true); err != nil {
				errs = append(errs, fmt.Errorf("--%s %q: %v", name, v, err))
			}
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok {
			if d, ok := g.Get().(time.Duration); ok && d < 0 {
				errs = append(errs, fmt.Errorf("--%s %s: must not be negative", f.Name, d))
			}
		}
	})
	if v, ok := get("quantile"); ok {
		if q, err := strconv.ParseFloat(v, 64); err != nil || !(q > 0 && q < 1) {
			errs = append(errs, fmt.Errorf("--quantile %s: want a quantile strictly between 0 and 1, e.g. 0.99", v))
		}
	}
	if v, ok := get("slo-ms"); ok {
		if ms, err := strconv.ParseFloat(v, 64); err != nil || ms < 0 || math.IsInf(ms, 0) || math.IsNaN(ms) {
			errs = append(errs, fmt.Errorf("--slo-ms %s: want a finite threshold >= 0 (0: none)", v))
		}
	}
	if v, ok := get("signal"); ok {
		if g, err := dag.Default(); err == nil {
			if _, ok := g.Outcome(v); !ok {
				errs = append(errs, fmt.Errorf("--signal %q: want e2e_latency, ttft or tpot (an outcome of the DAG)", v))
			}
		}
	}
	if v, ok := get("sweep-parallel"); ok {
		if n, err := strconv.Atoi(v); err != nil || n < 1 || n > causal.MaxSweepParallel {
			errs = append(errs, fmt.Errorf("--sweep-parallel %s: want 1 to %d at once (1: one after another)", v, causal.MaxSweepParallel))
		}
	}
	if v, ok := get("max-scopes"); ok {
		if n, err := strconv.Atoi(v); err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("--max-scopes %s: want at least 1 scope", v))
		}
	}
	if v, ok := get("scope-by"); ok && !slices.Contains(causal.ScopeColumns(), v) {
		errs = append(errs, fmt.Errorf("--scope-by %q: want one of %s", v, strings.Join(causal.ScopeColumns(), ", ")))
	}
	errs = append(errs, checkWindow(get, "from", "to"), checkWindow(get, "baseline-from", "baseline-to"))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

// checkWindow checks a pair of RFC 3339 flags: each parses, and the end is
// after the start. Missing or empty flags are the subcommand's business.
func checkWindow(get func(string) (string, bool), from, to string) error {
	fv, okf := get(from)
	tv, okt := get(to)
	var errs []error
	var ft, tt time.Time
	var err error
	if okf && fv != "" {
		if ft, err = time.Parse(time.RFC3339Nano, fv); err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: want RFC 3339 (2026-03-14T09:00:00Z)", from, fv))
		}
	}
	if okt && tv != "" {
		if tt, err = time.Parse(time.RFC3339Nano, tv); err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: want RFC 3339 (2026-03-14T09:00:00Z)", to, tv))
		}
	}
	if len(errs) == 0 && !ft.IsZero() && !tt.IsZero() && !tt.After(ft) {
		errs = append(errs, fmt.Errorf("--%s %s is not after --%s %s: the window is empty or reversed", to, tv, from, fv))
	}
	return errors.Join(errs...)
}

// checkHostPort accepts host:port with a numeric port (0–65535); an empty
// host only for a listen address.
func checkHostPort(v string, listen bool) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return errors.New("want host:port")
	}
	if host == "" && !listen {
		return errors.New("want host:port (no host)")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && !listen) {
		return fmt.Errorf("port %q: want a number from 1 to 65535", port)
	}
	return nil
}
