package schemas

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"
)

//go:embed clickhouse/*.sql kafka/topics.json
var files embed.FS

// ServerVersion is a ClickHouse server version, major.minor.
type ServerVersion struct{ Major, Minor int }

// MinServer is the oldest ClickHouse the schema and every query support:
// 24.8, the oldest maintained (LTS) release. Older servers are refused at
// connection time (internal/chstore).
var MinServer = ServerVersion{24, 8}

// ParseServerVersion parses what SELECT version() returns ("18.16.1", "24.3.2.23").
func ParseServerVersion(s string) (ServerVersion, error) {
	parts := strings.SplitN(strings.TrimSpace(s), ".", 3)
	if len(parts) < 2 {
		return ServerVersion{}, fmt.Errorf("parse server version %q: want major.minor", s)
	}
	maj, err := strconv.Atoi(parts[0])
	if err != nil {
		return ServerVersion{}, fmt.Errorf("parse server version %q: %w", s, err)
	}
	min, err := strconv.Atoi(parts[1])
	if err != nil {
		return ServerVersion{}, fmt.Errorf("parse server version %q: %w", s, err)
	}
	return ServerVersion{maj, min}, nil
}

// AtLeast reports whether v >= o.
func (v ServerVersion) AtLeast(o ServerVersion) bool {
	return v.Major > o.Major || (v.Major == o.Major && v.Minor >= o.Minor)
}

func (v ServerVersion) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// DefaultTTL is how long the telemetry tables keep rows by default.
const DefaultTTL = 30 * 24 * time.Hour

// Options are the deployment parameters of the rendering.
type Options struct {
	// TTL is how long the telemetry tables (requests, token_stalls,
	// gpu_samples, engine_samples) keep a row, counted from its event time
	// (start_time, time). The operational tables have fixed TTLs
	// (rejected_input 7 days, incidents and culprits 365, the alert outbox
	// 90). 0 renders no TTL at all: every row is kept. ClickHouse deletes a row
	// inserted older than the TTL right away (in the TTL merge after the
	// insert), so data replayed from further back needs a database created
	// with a longer TTL or none.
	TTL time.Duration
}

// DefaultOptions renders with DefaultTTL.
func DefaultOptions() Options { return Options{TTL: DefaultTTL} }

// Validate reports an option ClickHouse cannot express.
func (o Options) Validate() error {
	if o.TTL < 0 || o.TTL%time.Second != 0 {
		return fmt.Errorf("ttl %v: want 0 (none) or a positive whole number of seconds", o.TTL)
	}
	return nil
}

// TTLInterval renders a TTL as a ClickHouse interval ("30 DAY", "36 HOUR",
// "90 SECOND"), in the largest unit that divides it.
func TTLInterval(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + " DAY"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + " HOUR"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + " MINUTE"
	}
	return strconv.FormatInt(int64(d/time.Second), 10) + " SECOND"
}

// Migration is one numbered migration file.
type Migration struct {
	Version  int
	Name     string
	Checksum string // sha256 of the template source: the same whatever the Options
	source   string
}

// Statements renders the migration and splits it into single statements
// (the native protocol runs one at a time).
func (m Migration) Statements(o Options) ([]string, error) {
	out, err := render(m.Name, m.source, o)
	if err != nil {
		return nil, err
	}
	return SplitStatements(out), nil
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(files, "clickhouse")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var ms []Migration
	seen := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migration %s: name must be NNNN_name.sql", name)
		}
		ver, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: version: %w", name, err)
		}
		if prev, dup := seen[ver]; dup {
			return nil, fmt.Errorf("migrations %s and %s share version %d", prev, name, ver)
		}
		seen[ver] = name
		b, err := files.ReadFile(path.Join("clickhouse", name))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		sum := sha256.Sum256(b)
		ms = append(ms, Migration{Version: ver, Name: name, Checksum: hex.EncodeToString(sum[:]), source: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// RenderAll renders every migration, concatenated; used by golden tests and
// `tailcause migrate --print`.
func RenderAll(o Options) (string, error) {
	ms, err := Migrations()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, m := range ms {
		stmts, err := m.Statements(o)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "-- %s\n", m.Name)
		for _, s := range stmts {
			b.WriteString(s)
			b.WriteString(";\n\n")
		}
	}
	return b.String(), nil
}

func render(name, src string, o Options) (string, error) {
	if err := o.Validate(); err != nil {
		return "", fmt.Errorf("render migration %s: %w", name, err)
	}
	funcs := template.FuncMap{
		// ttl is the table TTL clause of a telemetry table on the event-time
		// column col, or nothing when Options.TTL is 0.
		"ttl": func(col string) string {
			if o.TTL == 0 {
				return ""
			}
			return "\nTTL " + col + " + INTERVAL " + TTLInterval(o.TTL)
		},
		// fixedTTL is the fixed TTL of an operational table (rejected
		// input, incidents, alerts), or nothing when Options.TTL is 0.
		"fixedTTL": func(expr string) string {
			if o.TTL == 0 {
				return ""
			}
			return "\nTTL " + expr
		},
	}
	t, err := template.New(name).Funcs(funcs).Option("missingkey=error").Parse(src)
	if err != nil {
		return "", fmt.Errorf("parse migration %s: %w", name, err)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, nil); err != nil {
		return "", fmt.Errorf("render migration %s: %w", name, err)
	}
	return buf.String(), nil
}

// SplitStatements splits SQL text on semicolons that end a line, dropping
// comment-only and empty statements.
func SplitStatements(sqlText string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		s := strings.TrimSpace(cur.String())
		cur.Reset()
		if s == "" {
			return
		}
		code := false
		for _, line := range strings.Split(s, "\n") {
			l := strings.TrimSpace(line)
			if l != "" && !strings.HasPrefix(l, "--") {
				code = true
				break
			}
		}
		if code {
			out = append(out, s)
		}
	}
	for _, line := range strings.Split(sqlText, "\n") {
		trimmed := strings.TrimRight(line, " \t\r")
		if strings.HasSuffix(trimmed, ";") && !strings.HasPrefix(strings.TrimSpace(trimmed), "--") {
			cur.WriteString(strings.TrimSuffix(trimmed, ";"))
			flush()
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	flush()
	return out
}

// Topic is one Kafka topic of the pipeline.
type Topic struct {
	Name              string            `json:"name"`
	Role              string            `json:"role"` // input | internal | deadletter
	Partitions        int               `json:"partitions"`
	ReplicationFactor int               `json:"replication_factor"`
	Key               string            `json:"key"`
	Configs           map[string]string `json:"configs"`
}

// Topic names, as the Collector's kafka exporter writes them.
const (
	TopicSpans      = "otlp_spans"
	TopicMetrics    = "otlp_metrics"
	TopicLogs       = "otlp_logs"
	TopicDeadLetter = "tailcause.deadletter.v1"
)

// Topics returns the declared topics.
func Topics() ([]Topic, error) {
	b, err := files.ReadFile("kafka/topics.json")
	if err != nil {
		return nil, fmt.Errorf("read topics: %w", err)
	}
	var doc struct {
		Topics []Topic `json:"topics"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&struct {
		Comment string   `json:"comment"`
		Topics  *[]Topic `json:"topics"`
	}{Topics: &doc.Topics}); err != nil {
		return nil, fmt.Errorf("decode topics: %w", err)
	}
	for _, t := range doc.Topics {
		if t.Name == "" || t.Partitions < 1 || t.ReplicationFactor < 1 {
			return nil, fmt.Errorf("topic %q: name, partitions >= 1 and replication_factor >= 1 are required", t.Name)
		}
	}
	return doc.Topics, nil
}
