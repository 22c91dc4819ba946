package enrich

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/tailcause/tailcause/enrich/enrichtest"
	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/otlpfixture"
	"github.com/tailcause/tailcause/internal/testkit"
	"github.com/tailcause/tailcause/schemas"
)

// TestDeadLetterMaxBytesIsTheTopics: the default dead-letter size is what
// topics.json declares for the dead-letter topic.
func TestDeadLetterMaxBytesIsTheTopics(t *testing.T) {
	ts, err := schemas.Topics()
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range ts {
		if tp.Name == schemas.TopicDeadLetter {
			if got := tp.Configs["max.message.bytes"]; got != strconv.Itoa(DefaultDeadLetterMaxBytes) {
				t.Errorf("%s max.message.bytes %s, DefaultDeadLetterMaxBytes %d", tp.Name, got, DefaultDeadLetterMaxBytes)
			}
			return
		}
	}
	t.Fatalf("no %s in topics.json", schemas.TopicDeadLetter)
}

// TestInsertRowsIsolatesRefusedRows: on the real server, a block that
// ClickHouse refuses is narrowed down to the rows to blame — a CHECK
// violation (refused by the server for the whole block), a value the client
// cannot encode — and every other row is written, including a block that
// spans more partitions than one insert may (split until it fits).
func TestInsertRowsIsolatesRefusedRows(t *testing.T) {
	st := chstoretest.Fresh(t)
	ctx := context.Background()
	if err := st.Conn().Exec(ctx, `CREATE TABLE iso (t DateTime, v UInt32, CONSTRAINT small CHECK v < 100)
ENGINE = MergeTree PARTITION BY toYYYYMMDD(t) ORDER BY (t, v)`); err != nil {
		t.Fatal(err)
	}
	p, err := New(testConfig([]string{"127.0.0.1:1"}, "s", "m", "d"), st, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	tbl := chstore.Table{Name: "iso", Columns: []string{"t", "v"}}
	day := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	var rows [][]any
	for i := range 1000 {
		rows = append(rows, []any{day.AddDate(0, 0, i%150), uint32(i % 100)})
	}
	rows[17][1] = uint32(500)  // the server refuses the block
	rows[900][1] = uint32(700) // and again
	rows[500][1] = "seven"     // the client cannot encode it
	blk, err := chstore.RowBlock(len(tbl.Columns), rows)
	if err != nil {
		t.Fatal(err)
	}
	refused, err := p.insertRows(ctx, tbl, blk)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, r := range refused {
		got = append(got, r.index)
	}
	if fmt.Sprint(got) != "[17 500 900]" {
		t.Errorf("refused rows %v, want [17 500 900]", got)
	}
	if n := count(t, st, "SELECT count() FROM iso"); n != 997 {
		t.Errorf("%d rows written, want 997", n)
	}
}

// committedToEnd reports whether group has committed every record of topic.
func committedToEnd(t *testing.T, addr, group, topic string) bool {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(addr), Timeout: 10 * time.Second, Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics) != 1 {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	var parts []int
	var reqs []kafka.OffsetRequest
	for _, pt := range md.Topics[0].Partitions {
		parts = append(parts, pt.ID)
		reqs = append(reqs, kafka.LastOffsetOf(pt.ID))
	}
	lo, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		t.Fatalf("list offsets of %s: %v", topic, err)
	}
	of, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil {
		t.Fatalf("fetch offsets of %s: %v", group, err)
	}
	committed := map[int]int64{}
	for _, pt := range of.Topics[topic] {
		committed[pt.Partition] = pt.CommittedOffset
	}
	for _, pt := range lo.Topics[topic] {
		if pt.LastOffset > 0 && committed[pt.Partition] != pt.LastOffset {
			return false
		}
	}
	return true
}

// deadLetters reads n records of the dead-letter topic (one partition).
func deadLetters(t *testing.T, brokers []string, topic string, n int) []kafka.Message {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: 0, MaxBytes: 16 << 20})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []kafka.Message
	for len(out) < n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read dead letter %d of %d: %v", len(out), n, err)
		}
		out = append(out, m)
	}
	return out
}

func header(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// poisonSetup is faultSetup with topics that take records up to 8 MiB, as
// schemas/kafka/topics.json declares them, and a dead-letter topic that
// takes dlqMax.
func poisonSetup(t *testing.T, dlqMax int) (*chstore.Store, Config) {
	t.Helper()
	addr := testkit.Kafka(t)
	st := chstoretest.Fresh(t)
	big := map[string]string{"max.message.bytes": strconv.Itoa(DefaultDeadLetterMaxBytes)}
	cfg := testConfig([]string{addr}, testkit.FreshTopicWith(t, addr, 3, big), testkit.FreshTopicWith(t, addr, 2, big),
		testkit.FreshTopicWith(t, addr, 1, map[string]string{"max.message.bytes": strconv.Itoa(dlqMax)}))
	cfg.RetryMax = time.Second
	return st, cfg
}

// produceLarge writes one record of n bytes that does not decode (0xff
// forever is no protobuf).
func produceLarge(t *testing.T, brokers []string, topic string, n int) {
	t.Helper()
	pc := kafkax.DefaultConfig()
	pc.Brokers = brokers
	pc.BatchBytes = DefaultDeadLetterMaxBytes - 1<<10
	prod, err := kafkax.NewProducer(pc)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := prod.WriteRecords(ctx, topic, []kafkax.Record{{Key: []byte("big"), Value: bytes.Repeat([]byte{0xff}, n)}}); err != nil {
		t.Fatalf("produce %d bytes: %v", n, err)
	}
}

// TestPoisonDroppedColumnEndsInRejectedRows: with a column of requests and
// one of gpu_samples dropped (code 16 on every insert), the enricher does
// not retry forever: every request and GPU sample ends in rejected_input and
// the dead-letter topic, engine samples are written, offsets are committed
// to the end; once the column is back, later requests are written again.
func TestPoisonDroppedColumnEndsInRejectedRows(t *testing.T) {
	st, cfg := poisonSetup(t, DefaultDeadLetterMaxBytes)
	ctx := context.Background()
	for _, q := range []string{"ALTER TABLE requests DROP COLUMN engine_mean_output_tokens", "ALTER TABLE gpu_samples DROP COLUMN gpu_index"} {
		if err := st.Conn().Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	ps, stop := runPipelines(t, 1, cfg, st)
	firstHalf(t, cfg)
	gpu := uint64(8 * otlpfixture.GPUScrapes)
	refused := func(table string) uint64 {
		return count(t, st, "SELECT count() FROM rejected_input WHERE reason = 'insert' AND startsWith(detail, '"+table+": ')")
	}
	waitFor(t, "the first half and the GPU samples in rejected_input, offsets committed", 90*time.Second, func() bool {
		return refused("requests") >= half && refused("gpu_samples") >= gpu &&
			committedToEnd(t, cfg.Brokers[0], cfg.GroupID, cfg.SpansTopic) && committedToEnd(t, cfg.Brokers[0], cfg.SamplesGroupID, cfg.MetricsTopic)
	})
	if n := refused("requests"); n != half {
		t.Errorf("%d requests rejected, want %d", n, half)
	}
	if n := count(t, st, "SELECT count() FROM engine_samples"); n != 8*otlpfixture.EngineScrapes {
		t.Errorf("engine samples %d, want %d (their table is intact)", n, 8*otlpfixture.EngineScrapes)
	}
	if n := count(t, st, "SELECT count() FROM rejected_input WHERE reason = 'insert' AND (topic = '"+cfg.SpansTopic+"' OR topic = '"+cfg.MetricsTopic+"') AND detail LIKE '%code: 16%'"); n != half+gpu {
		t.Errorf("%d rejected rows name their source topic and code 16, want %d", n, half+gpu)
	}
	if n := ps[0].C.InsertFailures.Load(); n != int64(half+gpu) {
		t.Errorf("insert failures counted %d, want %d", n, half+gpu)
	}
	dl := deadLetters(t, cfg.Brokers, cfg.DeadLetterTopic, int(half+gpu))
	tables := map[string]int{}
	for _, m := range dl {
		if header(m, "tailcause.reason") != "insert" || header(m, "tailcause.source_topic") == "" || !bytes.Contains(m.Value, []byte(`"trace_id"`)) && !bytes.Contains(m.Value, []byte(`"metric"`)) {
			t.Errorf("dead letter %s: headers %v, value %.200s", m.Key, m.Headers, m.Value)
		}
		tables[header(m, "tailcause.table")]++
	}
	if tables["requests"] != half || tables["gpu_samples"] != int(gpu) {
		t.Errorf("dead letters per table %v", tables)
	}

	// The column is back: the rest of the stream is written as usual.
	if err := st.Conn().Exec(ctx, "ALTER TABLE requests ADD COLUMN engine_mean_output_tokens Float64 AFTER engine_mean_prompt_tokens"); err != nil {
		t.Fatal(err)
	}
	secondHalf(t, cfg)
	rest := uint64(otlpfixture.Requests + 1 - half)
	waitFor(t, "the second half in requests", 90*time.Second, func() bool { return rows(t, st, false) >= rest })
	stop()
	if n := rows(t, st, false); n != rest {
		t.Errorf("requests %d, want %d", n, rest)
	}
}

// TestPoisonLargeRecordIsDeadLettered: a record over kafka-go's 1 MiB
// default (the topics allow 8 MiB) that does not decode is dead-lettered
// whole and its offset committed; the records after it are enriched. (With
// the writer at the 1 MiB default, its dead-letter write failed forever and
// the span pipeline stalled, across restarts.)
func TestPoisonLargeRecordIsDeadLettered(t *testing.T) {
	st, cfg := poisonSetup(t, DefaultDeadLetterMaxBytes)
	const size = 1<<20 + 300<<10
	produceLarge(t, cfg.Brokers, cfg.SpansTopic, size)
	produceFixture(t, cfg.Brokers, cfg.SpansTopic, cfg.MetricsTopic)
	ps, stop := runPipelines(t, 1, cfg, st)
	want := uint64(otlpfixture.Requests + 1)
	waitFor(t, "every request, the large record rejected, offsets committed", 90*time.Second, func() bool {
		return rows(t, st, false) >= want &&
			count(t, st, "SELECT count() FROM rejected_input WHERE reason = 'decode' AND payload_bytes = "+strconv.Itoa(size)) == 1 &&
			committedToEnd(t, cfg.Brokers[0], cfg.GroupID, cfg.SpansTopic)
	})
	stop()
	dl := deadLetters(t, cfg.Brokers, cfg.DeadLetterTopic, 1)
	if len(dl[0].Value) != size || header(dl[0], "tailcause.reason") != "decode" || header(dl[0], "tailcause.truncated") != "" {
		t.Errorf("dead letter of %d bytes, reason %q, truncated %q; want the whole %d-byte record", len(dl[0].Value), header(dl[0], "tailcause.reason"), header(dl[0], "tailcause.truncated"), size)
	}
	if n := ps[0].C.DeadLettered.Load(); n != 1 {
		t.Errorf("dead letters counted %d, want 1", n)
	}
}

// TestPoisonDeadLetterRefusedIsSkipped: a record the dead-letter topic
// refuses for good (larger than its max.message.bytes) is tried
// GiveUpAfter times, then counted, logged and skipped: its rejected_input
// row stays, its offset is committed, the records after it are enriched.
func TestPoisonDeadLetterRefusedIsSkipped(t *testing.T) {
	st, cfg := poisonSetup(t, 100_000)
	const size = 300 << 10
	produceLarge(t, cfg.Brokers, cfg.SpansTopic, size)
	produceFixture(t, cfg.Brokers, cfg.SpansTopic, cfg.MetricsTopic)
	ps, stop := runPipelines(t, 1, cfg, st)
	want := uint64(otlpfixture.Requests + 1)
	waitFor(t, "every request, the record rejected, offsets committed", 90*time.Second, func() bool {
		return rows(t, st, false) >= want &&
			count(t, st, "SELECT count() FROM rejected_input WHERE reason = 'decode'") == 1 &&
			committedToEnd(t, cfg.Brokers[0], cfg.GroupID, cfg.SpansTopic)
	})
	stop()
	if n := ps[0].C.DeadLetterDropped.Load(); n != 1 {
		t.Errorf("dropped dead letters %d, want 1", n)
	}
	if n := ps[0].C.DeadLettered.Load(); n != 0 {
		t.Errorf("dead letters written %d, want 0", n)
	}
}

// TestDeadLetterTruncatesToTheTopicLimit: a record larger than the
// dead-letter topic takes keeps its head, says how long it was, and fits.
func TestDeadLetterTruncatesToTheTopicLimit(t *testing.T) {
	cfg := testConfig([]string{"127.0.0.1:1"}, "s", "m", "d")
	cfg.DeadLetterMaxBytes = 1 << 20
	p, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{10, 1<<20 - 8<<10, 1 << 20, 3 << 20} {
		v := bytes.Repeat([]byte{'x'}, n)
		rec := p.deadLetter(kafka.Message{Topic: "otlp_spans", Partition: 2, Offset: 7, Value: v, Headers: []kafka.Header{{Key: "h", Value: []byte("v")}}}, "decode", "bad")
		if rec.Size() > p.deadLetterRecordCap() {
			t.Errorf("%d bytes: dead letter of %d bytes, over the cap %d", n, rec.Size(), p.deadLetterRecordCap())
		}
		trunc := header(kafka.Message{Headers: rec.Headers}, "tailcause.truncated")
		switch {
		case len(rec.Value) == n && trunc != "":
			t.Errorf("%d bytes: whole, yet marked truncated", n)
		case len(rec.Value) < n && trunc != strconv.Itoa(n):
			t.Errorf("%d bytes: cut to %d without saying so (%q)", n, len(rec.Value), trunc)
		}
		if n <= 1<<19 && len(rec.Value) != n {
			t.Errorf("%d bytes: cut to %d, though it fits", n, len(rec.Value))
		}
		if string(rec.Key) != "otlp_spans/2/7" || header(kafka.Message{Headers: rec.Headers}, "h") != "v" {
			t.Errorf("%d bytes: key %s, headers %v", n, rec.Key, rec.Headers)
		}
	}
}

// TestInsertBlocksIndexesTheWholeBatch: a table's rows go in blocks of at
// most Config.BatchRows, in order, and a refused row is named by its index
// in the whole batch.
func TestInsertBlocksIndexesTheWholeBatch(t *testing.T) {
	w := enrichtest.NewRows()
	w.Create("blk", []enrichtest.Column{{Name: "v", Type: reflect.TypeFor[uint32]()}}, func(row map[string]any) error {
		if row["v"].(uint32) >= 100 {
			return errors.New("v too large")
		}
		return nil
	})
	cfg := testConfig([]string{"127.0.0.1:1"}, "s", "m", "d")
	cfg.BatchRows = 3
	p, err := New(cfg, w, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	var vs chstore.Values[uint32]
	for i := range 10 {
		vs = append(vs, uint32(i))
	}
	vs[4], vs[9] = 400, 900
	refused, err := p.insertBlocks(context.Background(), chstore.Table{Name: "blk", Columns: []string{"v"}}, chstore.Block{vs})
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, r := range refused {
		got = append(got, r.index)
	}
	if fmt.Sprint(got) != "[4 9]" {
		t.Errorf("refused rows %v, want [4 9]", got)
	}
	if got := fmt.Sprint(w.Rows("blk", "v")); got != "[[0] [1] [2] [3] [5] [6] [7] [8]]" {
		t.Errorf("written %s", got)
	}
}
