package kafkax_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/kafkax/kafkaxtest"
	"github.com/tailcause/tailcause/internal/testkit"
	"github.com/tailcause/tailcause/schemas"
)

// A broker the producer conformance suite runs on. Every case makes its own
// topics, so cases share a broker without seeing one another's records.
type broker struct {
	name string
	// addr returns the bootstrap address for t (skipping t, or failing it
	// under CI, when the broker is not there).
	addr func(t *testing.T) string
}

// brokers are the backends of the suite, as litestream runs one replica
// client suite on every backend: the in-process kfake broker the fast tests
// use, and the real Kafka 4.x broker of deploy/dev (TAILCAUSE_TEST_KAFKA;
// `make test` provides it, and CI fails rather than skip without it).
func brokers() []broker {
	return []broker{
		{"kfake", func(t *testing.T) string {
			_, addrs := kafkaxtest.Cluster(t, 1)
			return addrs[0]
		}},
		{"kafka", func(t *testing.T) string { return testkit.Kafka(t) }},
	}
}

// TestProducerConformance holds Producer to the same assertions on every
// broker: what the roles rely on (placement, order, headers, acks, size
// limits, errors, shutdown) must not be an artefact of the fake.
func TestProducerConformance(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, addr string)
	}{
		{"RecordsLandWithKeysHeadersAndOrder", testRecordsLand},
		{"ConcurrentWritersBeyondOneBatch", testConcurrentWriters},
		{"Compression", testCompression},
		{"LargestEncoderRecordFitsDeclaredTopic", testLargestRecord},
		{"RecordOverProducerLimitIsPermanent", testOverProducerLimit},
		{"RecordOverTopicLimitIsPermanent", testOverTopicLimit},
		{"MissingTopicFails", testMissingTopic},
		{"EmptyWriteContactsNoBroker", testEmptyWrite},
		{"CloseIsIdempotentAndKeepsAcknowledgedWrites", testClose},
	}
	for _, b := range brokers() {
		t.Run(b.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, b.addr(t)) })
			}
		})
	}
}

// suiteProducer is newProducer with a role's patience: a partition whose
// leader is still settling just after its topic was created answers
// NotLeaderForPartition (retriable) on the real broker, and the roles retry
// it; mod then sets what the case is about.
func suiteProducer(t *testing.T, addr string, mod func(*kafkax.Config)) *kafkax.Producer {
	t.Helper()
	return newProducer(t, []string{addr}, func(c *kafkax.Config) {
		c.MaxAttempts = 10
		c.BackoffMin, c.BackoffMax = 50*time.Millisecond, 500*time.Millisecond
		if mod != nil {
			mod(c)
		}
	})
}

func writeCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// readAll returns every record of topic, ordered by partition and offset,
// and fails t unless there are exactly want. The count comes from the
// partitions' end offsets, so a record too many is seen, not only one too
// few.
func readAll(t *testing.T, addr, topic string, want int) []*kgo.Record {
	t.Helper()
	n := endOffsets(t, addr, topic)
	if n != int64(want) {
		t.Fatalf("%s holds %d records, want %d", topic, n, want)
	}
	if n == 0 {
		return nil
	}
	got := kafkaxtest.Consume(t, []string{addr}, topic, want, 60*time.Second)
	sort.SliceStable(got, func(i, j int) bool {
		if got[i].Partition != got[j].Partition {
			return got[i].Partition < got[j].Partition
		}
		return got[i].Offset < got[j].Offset
	})
	return got
}

// endOffsets is the sum of the end offsets of topic's partitions: the number
// of records written to a fresh topic.
func endOffsets(t *testing.T, addr, topic string) int64 {
	t.Helper()
	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(addr), Timeout: 30 * time.Second, Transport: transport}
	ctx := writeCtx(t)
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics) != 1 || md.Topics[0].Error != nil {
		t.Fatalf("metadata of %s: %v %+v", topic, err, md)
	}
	var reqs []kafka.OffsetRequest
	for _, p := range md.Topics[0].Partitions {
		reqs = append(reqs, kafka.LastOffsetOf(p.ID))
	}
	resp, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		t.Fatalf("list offsets of %s: %v", topic, err)
	}
	var n int64
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			t.Fatalf("list offsets of %s/%d: %v", topic, p.Partition, p.Error)
		}
		n += p.LastOffset
	}
	return n
}

// topicExists asks the broker's metadata whether topic exists.
func topicExists(t *testing.T, addr, topic string) bool {
	t.Helper()
	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(addr), Timeout: 30 * time.Second, Transport: transport}
	md, err := client.Metadata(writeCtx(t), &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	return len(md.Topics) == 1 && md.Topics[0].Error == nil
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

type header struct{ Key, Value string }

func kafkaxHeaders(hs []kafkax.Header) []header {
	out := make([]header, len(hs))
	for i, h := range hs {
		out[i] = header{h.Key, string(h.Value)}
	}
	return out
}

func kgoHeaders(hs []kgo.RecordHeader) []header {
	out := make([]header, len(hs))
	for i, h := range hs {
		out[i] = header{h.Key, string(h.Value)}
	}
	return out
}

// testRecordsLand: keyed records land on the partition franz-go's default
// partitioner picks (the Collector's kafka exporter writes with it), with
// their headers in order, each exactly once, records of one key in the
// order written; an unkeyed record stays unkeyed.
func testRecordsLand(t *testing.T, addr string) {
	const parts = 6
	topic := testkit.FreshTopic(t, addr, parts)
	p := suiteProducer(t, addr, nil)
	var recs []kafkax.Record
	for i := 0; i < 60; i++ {
		recs = append(recs, kafkax.Record{
			Key:   []byte(fmt.Sprintf("%032x", i%20)),
			Value: []byte(fmt.Sprintf("value-%d", i)),
			Headers: []kafkax.Header{
				{Key: "otelcol.signal", Value: []byte("traces")},
				{Key: "tailcause.seq", Value: []byte(fmt.Sprint(i))},
				{Key: "tailcause.empty", Value: []byte{}},
			},
		})
	}
	recs = append(recs, kafkax.Record{Value: []byte("unkeyed"), Headers: []kafkax.Header{{Key: "otelcol.signal", Value: []byte("logs")}}})
	if err := p.WriteRecords(writeCtx(t), topic, recs); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, addr, topic, len(recs))

	written := map[string]kafkax.Record{}
	for _, r := range recs {
		written[string(r.Value)] = r
	}
	franz := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	seen := map[string]bool{}
	last := map[string]int{} // key → index of its last record read
	for _, r := range got {
		w, ok := written[string(r.Value)]
		switch {
		case !ok:
			t.Errorf("read a record never written: %q", r.Value)
			continue
		case seen[string(r.Value)]:
			t.Errorf("record %q read twice", r.Value)
		}
		seen[string(r.Value)] = true
		if diff := cmp.Diff(kafkaxHeaders(w.Headers), kgoHeaders(r.Headers)); diff != "" {
			t.Errorf("record %q headers (-written +read):\n%s", r.Value, diff)
		}
		if w.Key == nil {
			if r.Key != nil {
				t.Errorf("unkeyed record %q read with key %q", r.Value, r.Key)
			}
			continue
		}
		if string(r.Key) != string(w.Key) {
			t.Errorf("record %q: key %q, written %q", r.Value, r.Key, w.Key)
		}
		if want := franz.Partition(&kgo.Record{Key: r.Key}, parts); int(r.Partition) != want {
			t.Errorf("key %s on partition %d, franz-go puts it on %d", r.Key, r.Partition, want)
		}
		var n int
		fmt.Sscanf(string(r.Value), "value-%d", &n)
		if prev, ok := last[string(r.Key)]; ok && n < prev {
			t.Errorf("key %s: value %d read after %d", r.Key, n, prev)
		}
		last[string(r.Key)] = n
	}
}

// testConcurrentWriters: writers sharing one producer, each writing more
// records than a batch holds, in several calls: every record lands exactly
// once and each writer's records of a key keep their order.
func testConcurrentWriters(t *testing.T, addr string) {
	const writers, calls, perCall = 6, 5, 70
	topic := testkit.FreshTopic(t, addr, 3)
	p := suiteProducer(t, addr, func(c *kafkax.Config) { c.BatchRecords = 50 })
	ctx := writeCtx(t)
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := 0; c < calls; c++ {
				recs := make([]kafkax.Record, perCall)
				for i := range recs {
					recs[i] = kafkax.Record{Key: fmt.Appendf(nil, "w%d-k%d", w, i%7), Value: fmt.Appendf(nil, "%d/%d", w, c*perCall+i)}
				}
				if err := p.WriteRecords(ctx, topic, recs); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, addr, topic, writers*calls*perCall)
	seen := map[string]bool{}
	last := map[string]int{}
	for _, r := range got {
		if seen[string(r.Value)] {
			t.Errorf("record %s read twice", r.Value)
		}
		seen[string(r.Value)] = true
		var w, n int
		if _, err := fmt.Sscanf(string(r.Value), "%d/%d", &w, &n); err != nil {
			t.Fatalf("value %q: %v", r.Value, err)
		}
		if prev, ok := last[string(r.Key)]; ok && n < prev {
			t.Errorf("key %s: record %d read after %d", r.Key, n, prev)
		}
		last[string(r.Key)] = n
	}
}

// testCompression: every codec the configuration accepts writes records a
// consumer reads back byte for byte.
func testCompression(t *testing.T, addr string) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		t.Run(codec, func(t *testing.T) {
			topic := testkit.FreshTopic(t, addr, 1)
			p := suiteProducer(t, addr, func(c *kafkax.Config) { c.Compression = codec })
			var recs []kafkax.Record
			for i := 0; i < 20; i++ {
				v := append(randomBytes(rng, 200), make([]byte, 2000)...) // part noise, part compressible
				recs = append(recs, kafkax.Record{Key: []byte{byte(i)}, Value: v})
			}
			if err := p.WriteRecords(writeCtx(t), topic, recs); err != nil {
				t.Fatal(err)
			}
			got := readAll(t, addr, topic, len(recs))
			for i, r := range got {
				if !slices.Equal(r.Value, recs[i].Value) || !slices.Equal(r.Key, recs[i].Key) {
					t.Errorf("record %d read back different (%d bytes, written %d)", i, len(r.Value), len(recs[i].Value))
				}
			}
		})
	}
}

// testLargestRecord: the largest value otlpkafka's encoder makes (its
// MaxMessageBytes, the Collector's 1,000,000) lands on a topic configured as
// schemas/kafka/topics.json declares the input topics, through a producer
// sized as the roles size it.
func testLargestRecord(t *testing.T, addr string) {
	declared, err := schemas.Topics()
	if err != nil {
		t.Fatal(err)
	}
	var configs map[string]string
	for _, d := range declared {
		if d.Name == schemas.TopicSpans {
			configs = d.Configs
		}
	}
	if configs["max.message.bytes"] == "" {
		t.Fatalf("schemas declares no max.message.bytes for %s", schemas.TopicSpans)
	}
	topic := testkit.FreshTopicWith(t, addr, 1, configs)
	const value = 1_000_000
	p := suiteProducer(t, addr, func(c *kafkax.Config) { c.BatchBytes = value + 64<<10 })
	rec := kafkax.Record{Key: []byte("0123456789abcdef0123456789abcdef"), Value: randomBytes(rand.New(rand.NewPCG(3, 4)), value)}
	if err := p.WriteRecords(writeCtx(t), topic, []kafkax.Record{rec}); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, addr, topic, 1)
	if !slices.Equal(got[0].Value, rec.Value) {
		t.Errorf("read %d bytes back, different from the %d written", len(got[0].Value), len(rec.Value))
	}
}

// testOverProducerLimit: a record larger than the producer's batch is
// refused before anything is sent — permanent, matching
// kafka.MessageSizeTooLarge — and the other records of the call are not
// written either.
func testOverProducerLimit(t *testing.T, addr string) {
	topic := testkit.FreshTopic(t, addr, 1)
	p := suiteProducer(t, addr, func(c *kafkax.Config) { c.BatchBytes = 2048 })
	err := p.WriteRecords(writeCtx(t), topic, []kafkax.Record{{Value: []byte("small")}, {Value: make([]byte, 4096)}})
	if err == nil || kafkax.IsRetriable(err) {
		t.Fatalf("oversize record: err %v, retriable %v; want a permanent error", err, kafkax.IsRetriable(err))
	}
	if !errors.Is(err, kafka.MessageSizeTooLarge) {
		t.Errorf("err %v does not match kafka.MessageSizeTooLarge", err)
	}
	readAll(t, addr, topic, 0)
}

// testOverTopicLimit: a record the producer takes but the topic's
// max.message.bytes does not is refused by the broker — permanent, matching
// kafka.MessageSizeTooLarge, nothing written — and the producer goes on
// writing records that fit.
func testOverTopicLimit(t *testing.T, addr string) {
	topic := testkit.FreshTopicWith(t, addr, 1, map[string]string{"max.message.bytes": "4096"})
	p := suiteProducer(t, addr, nil)
	big := kafkax.Record{Value: randomBytes(rand.New(rand.NewPCG(5, 6)), 16<<10)}
	err := p.WriteRecords(writeCtx(t), topic, []kafkax.Record{big})
	if err == nil || kafkax.IsRetriable(err) {
		t.Fatalf("record over the topic's limit: err %v, retriable %v; want a permanent error", err, kafkax.IsRetriable(err))
	}
	if !errors.Is(err, kafka.MessageSizeTooLarge) {
		t.Errorf("err %v does not match kafka.MessageSizeTooLarge", err)
	}
	var ke *kafkax.Error
	if !errors.As(err, &ke) || ke.Op != "write" || ke.Topic != topic {
		t.Errorf("error %#v is not a *kafkax.Error of the write to %s", err, topic)
	}
	readAll(t, addr, topic, 0)
	if err := p.WriteRecords(writeCtx(t), topic, []kafkax.Record{{Value: []byte("fits")}}); err != nil {
		t.Fatalf("write after a refused record: %v", err)
	}
	if got := readAll(t, addr, topic, 1); string(got[0].Value) != "fits" {
		t.Errorf("read %q", got[0].Value)
	}
}

// testMissingTopic: a write to a topic that does not exist fails at once
// with a retriable *kafkax.Error naming it (kafka.UnknownTopicOrPartition),
// and creates nothing (the brokers do not auto-create topics; `tailcause
// topics` does).
func testMissingTopic(t *testing.T, addr string) {
	var rnd [4]byte
	for i := range rnd {
		rnd[i] = byte(rand.Uint32())
	}
	topic := fmt.Sprintf("missing_%x", rnd)
	p := suiteProducer(t, addr, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := p.WriteRecords(ctx, topic, []kafkax.Record{{Value: []byte("x")}})
	if err == nil {
		t.Fatalf("write to missing topic %s succeeded", topic)
	}
	var ke *kafkax.Error
	if !errors.As(err, &ke) || ke.Op != "write" || ke.Topic != topic {
		t.Errorf("error %#v is not a *kafkax.Error of the write to %s", err, topic)
	}
	// Retriable: the topics Job may not have run yet, and a role retries.
	if !errors.Is(err, kafka.UnknownTopicOrPartition) || !kafkax.IsRetriable(err) {
		t.Errorf("missing topic: %v (retriable %v), want a retriable kafka.UnknownTopicOrPartition", err, kafkax.IsRetriable(err))
	}
	if topicExists(t, addr, topic) {
		t.Errorf("the write created topic %s", topic)
	}
}

// testEmptyWrite: writing no records returns nil at once, even to a topic
// that does not exist.
func testEmptyWrite(t *testing.T, addr string) {
	p := suiteProducer(t, addr, nil)
	for _, recs := range [][]kafkax.Record{nil, {}} {
		if err := p.WriteRecords(writeCtx(t), "never_created", recs); err != nil {
			t.Errorf("empty write: %v", err)
		}
	}
}

// testClose: Close may race writes and be called again; a write that
// returned nil is in the topic whatever Close did, and a write after Close
// fails as retriable (another instance may take the data).
func testClose(t *testing.T, addr string) {
	topic := testkit.FreshTopic(t, addr, 2)
	p := suiteProducer(t, addr, nil)
	ctx := writeCtx(t)
	if err := p.WriteRecords(ctx, topic, []kafkax.Record{{Key: []byte("k"), Value: []byte("before")}}); err != nil {
		t.Fatal(err)
	}
	const writers = 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := []string{"before"}
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			recs := make([]kafkax.Record, 25)
			for i := range recs {
				recs[i] = kafkax.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "%d/%d", w, i)}
			}
			err := p.WriteRecords(ctx, topic, recs)
			switch {
			case err == nil:
				mu.Lock()
				for _, r := range recs {
					acked = append(acked, string(r.Value))
				}
				mu.Unlock()
			case !kafkax.IsRetriable(err):
				t.Errorf("write racing Close: %v is not retriable", err)
			}
		}()
	}
	closeErr := p.Close()
	wg.Wait()
	if closeErr != nil {
		t.Fatalf("Close: %v", closeErr)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	err := p.WriteRecords(ctx, topic, []kafkax.Record{{Value: []byte("after")}})
	if err == nil || !kafkax.IsRetriable(err) {
		t.Errorf("write after close: %v (retriable %v), want a retriable error", err, kafkax.IsRetriable(err))
	}
	// Records of a write that failed may still have landed (at-least-once),
	// so the topic holds at least the acknowledged ones.
	n := endOffsets(t, addr, topic)
	if n < int64(len(acked)) || n > 1+writers*25 {
		t.Fatalf("topic holds %d records; %d were acknowledged, %d written at most", n, len(acked), 1+writers*25)
	}
	got := kafkaxtest.Consume(t, []string{addr}, topic, int(n), 60*time.Second)
	found := map[string]bool{}
	for _, r := range got {
		found[string(r.Value)] = true
	}
	for _, v := range acked {
		if !found[v] {
			t.Errorf("acknowledged record %s is missing", v)
		}
	}
}
