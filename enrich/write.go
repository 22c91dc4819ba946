package enrich

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/kafkax"
)

// The sink's writes. What holds for all of them (DESIGN.md, "Poison
// input"): a retriable failure (ClickHouse or Kafka down, a timeout, memory)
// is retried with capped backoff for as long as it takes — an outage is
// backpressure, never loss; a permanent one ends: rows ClickHouse refuses
// are isolated and go to rejected_input and the dead-letter topic, and a
// dead letter or a rejected_input row that cannot be written either is
// counted, logged and skipped after Config.GiveUpAfter tries.

// origin is the Kafka record a row came from.
type origin struct {
	topic     string
	partition int
	offset    int64
}

// refusal is a row ClickHouse refused for good.
type refusal struct {
	index int // into the block given to insertRows
	err   error
}

// retry runs fn until it succeeds, fails with an error that retriable does
// not accept, or ctx ends (then it returns ctx's error). Retriable failures
// wait with capped exponential backoff and are counted.
func (p *Pipeline) retry(ctx context.Context, what string, retriable func(error) bool, fn func(context.Context) error) error {
	backoff := 100 * time.Millisecond
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !retriable(err) {
			return err
		}
		p.C.InsertRetries.Add(1)
		p.log.Warn("retrying", "what", what, "in", backoff, "err", err)
		sleepCtx(ctx, backoff)
		backoff = min(backoff*2, p.cfg.RetryMax)
	}
}

// insertRows writes rows into t and returns the rows ClickHouse refused for
// good, having written all the others. Retriable failures are retried as
// long as it takes; the only error is ctx's end. The refused rows are found
// from the failure's stage (chstore.InsertError): every row when the
// statement itself is refused (an unknown column: all would fail alike),
// the row the client could not encode, else by halving the block until each
// part goes in or is a single row — which also splits a block that spans
// too many partitions into blocks that do not.
func (p *Pipeline) insertRows(ctx context.Context, t chstore.Table, rows chstore.Block) ([]refusal, error) {
	var out []refusal
	err := p.insertRange(ctx, t, rows, 0, &out)
	return out, err
}

func (p *Pipeline) insertRange(ctx context.Context, t chstore.Table, rows chstore.Block, base int, out *[]refusal) error {
	for rows.Len() > 0 {
		err := p.retry(ctx, "insert into "+t.Name, chstore.IsRetriable, func(c context.Context) error { return p.store.InsertBlock(c, t, rows) })
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ie *chstore.InsertError
		errors.As(err, &ie)
		switch {
		case ie != nil && ie.Stage == chstore.StageAppend && ie.Row < rows.Len():
			// The rows before it were encoded: only the server may still
			// refuse them.
			bad := ie.Row
			if werr := p.insertRange(ctx, t, rows.Slice(0, bad), base, out); werr != nil {
				return werr
			}
			*out = append(*out, refusal{index: base + bad, err: err})
			rows, base = rows.Slice(bad+1, rows.Len()), base+bad+1
		case rows.Len() == 1 || ie != nil && ie.Stage == chstore.StagePrepare:
			for i := range rows.Len() {
				*out = append(*out, refusal{index: base + i, err: err})
			}
			return nil
		default:
			half := rows.Len() / 2
			if werr := p.insertRange(ctx, t, rows.Slice(0, half), base, out); werr != nil {
				return werr
			}
			rows, base = rows.Slice(half, rows.Len()), base+half
		}
	}
	return nil
}

// refuse records rows ClickHouse refused: a rejected_input row (reason
// "insert") and a dead letter carrying the row as JSON, each naming the
// Kafka record the row came from.
func (p *Pipeline) refuse(rejects *[][]any, dlq *[]kafkax.Record, signal string, t chstore.Table, rows chstore.Block, from []origin, refused []refusal) {
	for _, r := range refused {
		o := from[r.index]
		m := kafka.Message{Topic: o.topic, Partition: o.partition, Offset: o.offset, Value: rowJSON(t, rows.Row(r.index))}
		detail := t.Name + ": " + r.err.Error()
		*rejects = append(*rejects, p.rejectRow(signal, "insert", detail, m))
		*dlq = append(*dlq, p.deadLetter(m, "insert", detail, kafka.Header{Key: "tailcause.table", Value: []byte(t.Name)}))
	}
	p.C.InsertFailures.Add(int64(len(refused)))
	if len(refused) > 0 {
		p.log.Warn("ClickHouse refused rows: sent to rejected_input and the dead-letter topic", "table", t.Name, "rows", len(refused), "of", rows.Len(), "err", refused[0].err)
	}
}

// rowJSON is a refused row as a JSON object of its columns (non-finite
// floats as strings, which JSON cannot carry).
func rowJSON(t chstore.Table, row []any) []byte {
	cols := make(map[string]any, len(row))
	for i, v := range row {
		name := "column_" + strconv.Itoa(i)
		if i < len(t.Columns) {
			name = t.Columns[i]
		}
		switch f := v.(type) {
		case float64:
			if math.IsNaN(f) || math.IsInf(f, 0) {
				v = strconv.FormatFloat(f, 'g', -1, 64)
			}
		case float32:
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				v = strconv.FormatFloat(float64(f), 'g', -1, 32)
			}
		}
		cols[name] = v
	}
	b, err := json.Marshal(struct {
		Table string         `json:"table"`
		Row   map[string]any `json:"row"`
	}{t.Name, cols})
	if err != nil {
		return fmt.Appendf(nil, `{"table":%q,"row":%q}`, t.Name, fmt.Sprint(row))
	}
	return b
}

// deadLetterProducer writes the dead-letter topic. Its batches are sized to
// the topic's max.message.bytes (Config.DeadLetterMaxBytes), not kafka-go's
// 1 MiB default: a record near 1 MiB from an 8 MiB input topic must fit.
func (p *Pipeline) deadLetterProducer() (*kafkax.Producer, error) {
	pc := kafkax.DefaultConfig()
	pc.Brokers = p.cfg.Brokers
	pc.Security = p.cfg.Kafka
	pc.ClientID = "tailcause-enrich-deadletter"
	pc.BatchBytes = int64(p.cfg.DeadLetterMaxBytes) - deadLetterBatchOverhead
	return kafkax.NewProducer(pc)
}

// deadLetterBatchOverhead is kept free of a batch for the record batch's
// header; deadLetterRecordOverhead of a record for its own framing.
const (
	deadLetterBatchOverhead  = 1 << 10
	deadLetterRecordOverhead = 3 << 10
)

// deadLetterRecordCap is the largest dead letter (key, value and headers).
func (p *Pipeline) deadLetterRecordCap() int {
	return p.cfg.DeadLetterMaxBytes - deadLetterBatchOverhead - deadLetterRecordOverhead
}

// deadLetter is the dead letter of m: its value and headers, keyed by its
// origin, with headers saying where it came from and why. A record too large
// for the dead-letter topic keeps the head of its value, and the header
// tailcause.truncated says how long it was.
func (p *Pipeline) deadLetter(m kafka.Message, reason, detail string, extra ...kafka.Header) kafkax.Record {
	if len(detail) > 1024 {
		detail = detail[:1024]
	}
	ours := append([]kafka.Header{
		{Key: "tailcause.source_topic", Value: []byte(m.Topic)},
		{Key: "tailcause.source_partition", Value: []byte(strconv.Itoa(m.Partition))},
		{Key: "tailcause.source_offset", Value: []byte(strconv.FormatInt(m.Offset, 10))},
		{Key: "tailcause.reason", Value: []byte(reason)},
		{Key: "tailcause.detail", Value: []byte(detail)},
	}, extra...)
	rec := kafkax.Record{
		Key:     []byte(m.Topic + "/" + strconv.Itoa(m.Partition) + "/" + strconv.FormatInt(m.Offset, 10)),
		Value:   m.Value,
		Headers: append(append([]kafka.Header(nil), m.Headers...), ours...),
	}
	limit := p.deadLetterRecordCap()
	if rec.Size() <= limit {
		return rec
	}
	trunc := kafka.Header{Key: "tailcause.truncated", Value: []byte(strconv.Itoa(len(m.Value)))}
	rec.Headers = append(rec.Headers, trunc)
	if rec.Size()-len(rec.Value) > limit/2 {
		rec.Headers = append(ours, trunc) // the source's own headers are what is too large
	}
	rec.Value = m.Value[:max(0, len(m.Value)-(rec.Size()-limit))]
	return rec
}

// writeDeadLetters writes recs to the dead-letter topic. Retriable failures
// are retried as long as it takes. After a permanent one (the topic refuses
// a record: too large for it, no authorization) each record is written on
// its own, and one that still fails for good after Config.GiveUpAfter tries
// is counted (DeadLetterDropped), logged and skipped — its rejected_input
// row still records it. The only error is ctx's end.
func (p *Pipeline) writeDeadLetters(ctx context.Context, dlq *kafkax.Producer, recs []kafkax.Record) error {
	if len(recs) == 0 {
		return nil
	}
	write := func(rs []kafkax.Record) func(context.Context) error {
		return func(c context.Context) error { return dlq.WriteRecords(c, p.cfg.DeadLetterTopic, rs) }
	}
	err := p.retry(ctx, "write dead letters", kafkax.IsRetriable, write(recs))
	if err == nil {
		p.C.DeadLettered.Add(int64(len(recs)))
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for i := range recs {
		tries := 0
		giveUp := func(err error) bool {
			if kafkax.IsRetriable(err) {
				return true
			}
			tries++
			return tries < p.cfg.GiveUpAfter
		}
		err := p.retry(ctx, "write a dead letter", giveUp, write(recs[i:i+1]))
		switch {
		case err == nil:
			p.C.DeadLettered.Add(1)
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			p.C.DeadLetterDropped.Add(1)
			p.log.Error("dead letter refused by the dead-letter topic: skipped (its rejected_input row remains)",
				"topic", p.cfg.DeadLetterTopic, "key", string(recs[i].Key), "bytes", recs[i].Size(), "tries", tries, "err", err)
		}
	}
	return nil
}

// writeRejects writes rejected_input rows. Rows the table refuses are
// counted (RejectedDropped), logged and skipped: there is nowhere else to
// put them (a record that was dead-lettered is still in the dead-letter
// topic). The only error is ctx's end.
func (p *Pipeline) writeRejects(ctx context.Context, rows [][]any) error {
	b, err := chstore.RowBlock(len(rejectedTable.Columns), rows)
	if err != nil {
		return fmt.Errorf("rejected_input rows: %w", err) // rejectRow's rows are of the table's width
	}
	refused, err := p.insertRows(ctx, rejectedTable, b)
	if err != nil {
		return err
	}
	if len(refused) > 0 {
		p.C.RejectedDropped.Add(int64(len(refused)))
		p.log.Error("rejected_input refused rows: skipped", "rows", len(refused), "of", len(rows), "err", refused[0].err)
	}
	return nil
}
