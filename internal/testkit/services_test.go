package testkit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/segmentio/kafka-go"
	"go.uber.org/goleak"

	"github.com/tailcause/tailcause/internal/testkit"
	"github.com/tailcause/tailcause/schemas"
)

// TestMain checks that the kit and the clients, once closed, leave no
// goroutines behind: packages that use goleak can use the kit.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// row covers every column type the base schema uses.
type row struct {
	UID     string
	StartNS uint64
	Start   time.Time
	Err     uint8
	E2E     float64
	Tokens  int64
	Stalls  uint32
	Part    int32
	Keys    []string
}

func TestClickHouseNativeRoundTrip(t *testing.T) {
	addr := testkit.ClickHouse(t)
	db := testkit.FreshDatabase(t, addr)
	conn := testkit.Connect(t, addr, db)
	ctx := context.Background()

	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		t.Fatalf("SELECT version(): %v", err)
	}
	sv, err := schemas.ParseServerVersion(version)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server %s (%s)", version, sv)

	if err := conn.Exec(ctx, `CREATE TABLE t (
		uid String, start_ns UInt64, start_time DateTime, error UInt8, e2e_ms Float64,
		tokens Int64, stalls UInt32, part Int32, keys Array(String)
	) ENGINE = MergeTree PARTITION BY toYYYYMMDD(start_time) ORDER BY (start_time, uid)`); err != nil {
		t.Fatalf("create table: %v", err)
	}

	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var want []row
	for i := range 1000 {
		ts := base.Add(time.Duration(i) * time.Second)
		want = append(want, row{
			UID: fmt.Sprintf("r%04d", i), StartNS: uint64(ts.UnixNano()) + 123, Start: ts,
			Err: uint8(i % 2), E2E: float64(i) / 3, Tokens: int64(-i), Stalls: uint32(i * 7),
			Part: int32(i % 3), Keys: []string{"k", fmt.Sprint(i)},
		})
	}
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO t (uid, start_ns, start_time, error, e2e_ms, tokens, stalls, part, keys)")
	if err != nil {
		t.Fatalf("prepare batch: %v", err)
	}
	for _, r := range want {
		if err := batch.Append(r.UID, r.StartNS, r.Start, r.Err, r.E2E, r.Tokens, r.Stalls, r.Part, r.Keys); err != nil {
			t.Fatalf("append: %v", err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatalf("send batch: %v", err)
	}

	rows, err := conn.Query(ctx, "SELECT uid, start_ns, start_time, error, e2e_ms, tokens, stalls, part, keys FROM t ORDER BY uid")
	if err != nil {
		t.Fatalf("select: %v", err)
	}
	defer rows.Close()
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.UID, &r.StartNS, &r.Start, &r.Err, &r.E2E, &r.Tokens, &r.Stalls, &r.Part, &r.Keys); err != nil {
			t.Fatalf("scan: %v", err)
		}
		r.Start = r.Start.UTC()
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("rows: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("read back (-want +got):\n%s", diff)
	}

	// Aggregation with a query parameter bound client-side.
	var n uint64
	var sum float64
	if err := conn.QueryRow(ctx, "SELECT count(), sum(e2e_ms) FROM t WHERE error = ?", uint8(1)).Scan(&n, &sum); err != nil {
		t.Fatalf("aggregate: %v", err)
	}
	if n != 500 {
		t.Errorf("count of error rows = %d, want 500", n)
	}
}

// TestClickHouseAnalystIsReadOnly checks the read-only user that
// deploy/dev/clickhouse.sh configures: it reads, and a write is refused
// with code 164 (READONLY). (query.TestAnalystReadOnly reads the analyst
// views with it.)
func TestClickHouseAnalystIsReadOnly(t *testing.T) {
	addr := testkit.ClickHouse(t)
	db := testkit.FreshDatabase(t, addr)
	admin := testkit.Connect(t, addr, db)
	if err := admin.Exec(context.Background(), "CREATE TABLE t (a UInt8) ENGINE = MergeTree ORDER BY a"); err != nil {
		t.Fatal(err)
	}
	if err := admin.Exec(context.Background(), "INSERT INTO t (a) SELECT 7"); err != nil {
		t.Fatal(err)
	}
	opts := testkit.ClickHouseOptions(addr, db)
	opts.Auth.Username = "analyst"
	opts.Auth.Password = os.Getenv("CH_ANALYST_PASSWORD")
	if opts.Auth.Password == "" {
		opts.Auth.Password = "analyst"
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	var a uint8
	if err := conn.QueryRow(ctx, "SELECT a FROM t").Scan(&a); err != nil || a != 7 {
		t.Fatalf("analyst SELECT: %d, %v", a, err)
	}
	for _, stmt := range []string{"INSERT INTO t (a) SELECT 8", "CREATE TABLE x (a UInt8) ENGINE = Memory", "DROP TABLE t"} {
		err := conn.Exec(ctx, stmt)
		var ex *clickhouse.Exception
		if !errors.As(err, &ex) || ex.Code != 164 {
			t.Errorf("analyst %q: %v, want code 164 (READONLY)", stmt, err)
		}
	}
	// A wrong password is refused (code 516).
	opts.Auth.Password += "x"
	bad, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	var ex *clickhouse.Exception
	if err := bad.Ping(ctx); !errors.As(err, &ex) || ex.Code != 516 {
		t.Errorf("analyst with a wrong password: %v, want code 516", err)
	}
}

func TestKafkaProduceConsumeCommit(t *testing.T) {
	addr := testkit.Kafka(t)
	topic := testkit.FreshTopic(t, addr, 3)
	group := topic + "_group"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Own transport, closed at the end: kafka-go's default one keeps
	// connections (and goroutines) for the life of the process.
	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	w := &kafka.Writer{
		Addr:         kafka.TCP(addr),
		Transport:    transport,
		Topic:        topic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 10 * time.Millisecond,
	}
	const n = 300
	var msgs []kafka.Message
	for i := range n {
		msgs = append(msgs, kafka.Message{Key: []byte(fmt.Sprintf("k%d", i%17)), Value: []byte(fmt.Sprintf("v%03d", i))})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close writer: %v", err)
	}

	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:     []string{addr},
		GroupID:     group,
		Topic:       topic,
		StartOffset: kafka.FirstOffset,
		MaxWait:     100 * time.Millisecond,
		// CommitInterval 0: CommitMessages commits synchronously.
	})
	var got []string
	for len(got) < n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("fetch after %d messages: %v", len(got), err)
		}
		got = append(got, string(m.Value))
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatalf("close reader: %v", err)
	}
	sort.Strings(got)
	for i, v := range got {
		if want := fmt.Sprintf("v%03d", i); v != want {
			t.Fatalf("message %d = %q, want %q (lost or duplicated)", i, v, want)
		}
	}

	client := &kafka.Client{Addr: kafka.TCP(addr), Transport: transport}
	resp, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: {0, 1, 2}}})
	if err == nil {
		err = resp.Error
	}
	if err != nil {
		t.Fatalf("offset fetch: %v", err)
	}
	var committed int64
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			t.Fatalf("offset fetch partition %d: %v", p.Partition, p.Error)
		}
		committed += p.CommittedOffset
	}
	if committed != n {
		t.Errorf("committed offsets add up to %d, want %d", committed, n)
	}
}

// TestFaultServiceRestarts exercises the fault-test helpers; like every
// test that stops a shared service it runs only in make test's serial fault
// pass (see testkit.EnvFaults).
func TestFaultServiceRestarts(t *testing.T) {
	if os.Getenv(testkit.EnvFaults) == "" {
		t.Skip("fault test: runs in make test's serial pass (TAILCAUSE_TEST_FAULTS=1)")
	}
	chAddr := testkit.ClickHouse(t)
	kAddr := testkit.Kafka(t)
	db := testkit.FreshDatabase(t, chAddr)
	topic := testkit.FreshTopic(t, kAddr, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	conn := testkit.Connect(t, chAddr, db)
	if err := conn.Exec(ctx, "CREATE TABLE t (a UInt8) ENGINE = MergeTree ORDER BY a"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "INSERT INTO t (a) SELECT 7"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	testkit.StopClickHouse(t)
	t.Logf("ClickHouse stopped in %v", time.Since(t0))
	if err := conn.Ping(ctx); err == nil {
		t.Error("ping succeeded while ClickHouse was stopped")
	}
	t0 = time.Now()
	testkit.StartClickHouse(t)
	t.Logf("ClickHouse started in %v", time.Since(t0))
	var a uint8
	// The pool reconnects; the old connections died with the server.
	if err := retry(ctx, func() error { return conn.QueryRow(ctx, "SELECT a FROM t").Scan(&a) }); err != nil || a != 7 {
		t.Errorf("after restart: a=%d err=%v, want the row kept", a, err)
	}
	t.Logf("ClickHouse answered again after %v", time.Since(t0))

	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(kAddr), Topic: topic, Transport: transport, RequiredAcks: kafka.RequireAll, BatchTimeout: 10 * time.Millisecond}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	testkit.RestartKafka(t)
	t.Logf("Kafka restarted in %v", time.Since(t0))
	if err := retry(ctx, func() error { return w.WriteMessages(ctx, kafka.Message{Value: []byte("after")}) }); err != nil {
		t.Fatalf("write after restart: %v", err)
	}
	t.Logf("Kafka accepted a write after %v", time.Since(t0))
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{kAddr}, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	var got []string
	for len(got) < 2 {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read after restart: %v", err)
		}
		got = append(got, string(m.Value))
	}
	if diff := cmp.Diff([]string{"before", "after"}, got); diff != "" {
		t.Errorf("messages across the restart (-want +got):\n%s", diff)
	}
}

func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
