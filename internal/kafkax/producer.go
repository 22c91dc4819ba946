package kafkax

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/segmentio/kafka-go"
)

// Producer writes records synchronously with acks=all. It is safe for
// concurrent use; concurrent writers share partition batches, which is how
// batches fill.
type Producer struct {
	w         *kafka.Writer
	transport *kafka.Transport
	maxRecord int64
	msgs      sync.Pool // *[]kafka.Message scratch

	// life keeps Close from racing writes: a write holds it shared, Close
	// exclusively. kafka-go's Writer.Close, called while a WriteMessages
	// was still spawning its partition writers, could wait for ever for
	// one that had just started (a CI run hung 17 minutes in testClose).
	life      sync.RWMutex
	closed    bool
	closeOnce sync.Once
	closeErr  error
}

// errClosed is the error of a write after Close.
var errClosed = errors.New("kafka producer is closed")

// NewProducer returns a Producer for a validated configuration. It does not
// contact the brokers; the first write does.
func NewProducer(cfg Config) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("configure kafka producer: %w", err)
	}
	codec, _ := compression(cfg.Compression)
	t := cfg.Security.Transport(cfg.ClientID, cfg.MetadataTimeout)
	w := &kafka.Writer{
		Addr:            kafka.TCP(cfg.Brokers...),
		Balancer:        kafka.Murmur2Balancer{},
		MaxAttempts:     cfg.MaxAttempts,
		WriteBackoffMin: cfg.BackoffMin,
		WriteBackoffMax: cfg.BackoffMax,
		BatchSize:       cfg.BatchRecords,
		BatchBytes:      cfg.BatchBytes,
		BatchTimeout:    max(cfg.Linger, 1), // 0 would mean kafka-go's 1 s default
		ReadTimeout:     cfg.MetadataTimeout,
		WriteTimeout:    cfg.WriteTimeout,
		RequiredAcks:    kafka.RequireAll,
		Compression:     codec,
		Transport:       t,
	}
	return &Producer{w: w, transport: t, maxRecord: cfg.BatchBytes}, nil
}

// WriteRecords writes recs to topic and returns when the brokers have
// acknowledged all of them (every in-sync replica), or with an *Error.
// Records with equal keys land on the same partition, in order.
//
// Ownership: WriteRecords does not keep recs, but if ctx ends first it
// returns ctx's error while the records may still be in flight: the caller
// must then not reuse the records' byte slices, and must treat the write as
// failed (some records may still arrive: at-least-once).
func (p *Producer) WriteRecords(ctx context.Context, topic string, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	for i := range recs {
		// kafka-go counts key, value and headers against BatchBytes; a record
		// over it can never be written.
		if n := int64(recs[i].Size()); n > p.maxRecord {
			return &Error{Op: "write", Topic: topic, Err: fmt.Errorf("record %d is %d bytes, limit %d: %w", i, n, p.maxRecord, kafka.MessageSizeTooLarge)}
		}
	}
	p.life.RLock()
	defer p.life.RUnlock()
	if p.closed {
		return &Error{Op: "write", Topic: topic, Retriable: true, Err: errClosed}
	}
	mp, _ := p.msgs.Get().(*[]kafka.Message)
	if mp == nil {
		mp = new([]kafka.Message)
	}
	msgs := (*mp)[:0]
	for _, r := range recs {
		msgs = append(msgs, kafka.Message{Topic: topic, Key: r.Key, Value: r.Value, Headers: r.Headers})
	}
	err := p.w.WriteMessages(ctx, msgs...)
	// kafka-go copies the Message values into its batches, so the slice
	// itself can be reused at once; drop references to the records' bytes.
	clear(msgs)
	*mp = msgs[:0]
	p.msgs.Put(mp)
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return &Error{Op: "write", Topic: topic, Retriable: true, Err: err}
	}
	return &Error{Op: "write", Topic: topic, Retriable: classify(err), Err: firstError(err)}
}

// firstError reduces kafka-go's per-message error list to its first error,
// keeping the count: every message of a batch fails for the same reason.
func firstError(err error) error {
	var wes kafka.WriteErrors
	if !errors.As(err, &wes) {
		return err
	}
	for _, e := range wes {
		if e != nil {
			return fmt.Errorf("%d of %d records failed: %w", wes.Count(), len(wes), e)
		}
	}
	return err
}

// Close flushes what is pending, waits for in-flight writes and releases the
// connections. It is idempotent; writes after Close fail (retriable, so that
// a caller shutting down tells its clients to retry elsewhere).
func (p *Producer) Close() error {
	p.closeOnce.Do(func() {
		p.life.Lock() // waits for the writes in flight; later ones fail
		p.closed = true
		p.life.Unlock()
		if err := p.w.Close(); err != nil {
			p.closeErr = fmt.Errorf("close kafka writer: %w", err)
		}
		p.transport.CloseIdleConnections()
	})
	return p.closeErr
}
