package ingest

import (
	"context"
	"errors"
	"time"

	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/otlpkafka"
)

// encodeFunc appends the records of one request's data.
type encodeFunc func(e *otlpkafka.Encoder, dst []kafkax.Record, buf []byte) ([]kafkax.Record, []byte, error)

// batchBuf holds one request's records and the bytes they alias.
type batchBuf struct {
	recs []kafkax.Record
	buf  []byte
}

// maxPooledBuf keeps the buffer pool from pinning memory of rare huge
// requests.
const maxPooledBuf = 4 << 20

// export turns a decoded request into records and writes them; it returns
// nil only once Kafka acknowledged every record.
func (s *Server) export(ctx context.Context, t transport, sig signal, items int, encode encodeFunc) *rejection {
	enc := s.encoders.Get().(*otlpkafka.Encoder)
	bb, _ := s.buffers.Get().(*batchBuf)
	if bb == nil {
		bb = new(batchBuf)
	}
	recs, buf, err := encode(enc, bb.recs[:0], bb.buf[:0])
	s.encoders.Put(enc)
	bb.recs, bb.buf = recs, buf
	if err != nil {
		s.putBuf(bb)
		if errors.Is(err, otlpkafka.ErrMessageTooLarge) {
			return reject(reasonRecordTooLarge, err.Error(), err)
		}
		return reject(reasonInternal, "encode records", err)
	}
	if len(recs) > 0 {
		topic := s.topics[sig]
		wctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
		start := time.Now()
		err = s.producer.WriteRecords(wctx, topic, recs)
		cancel()
		res := resultOK
		if err != nil {
			res = resultPermanent
			if retriable(err) {
				res = resultRetriable
			}
		}
		s.m.kafkaTime[sig][res].Observe(time.Since(start).Seconds())
		if err != nil {
			// The writer may still hold the records' bytes: leave bb to
			// the garbage collector instead of the pool.
			switch {
			case ctx.Err() != nil:
				return reject(reasonCanceled, "request canceled before kafka acknowledged it", err)
			case res == resultRetriable:
				return reject(reasonKafkaUnavailable, "kafka did not acknowledge the data; retry later", err)
			default:
				return reject(reasonKafkaFailed, "kafka rejected the data", err)
			}
		}
		n := 0
		for i := range recs {
			n += len(recs[i].Value)
		}
		s.m.records[sig].Add(float64(len(recs)))
		s.m.recBytes[sig].Add(float64(n))
	}
	s.m.items[t][sig].Add(float64(items))
	s.putBuf(bb)
	return nil
}

func (s *Server) putBuf(bb *batchBuf) {
	if cap(bb.buf) > maxPooledBuf || cap(bb.recs) > maxPooledBuf/64 {
		return
	}
	clear(bb.recs)
	bb.recs, bb.buf = bb.recs[:0], bb.buf[:0]
	s.buffers.Put(bb)
}

// retriable reports whether a producer failure is worth retrying. Only a
// *kafkax.Error that says otherwise is permanent: an unknown failure makes
// clients retry rather than drop data.
func retriable(err error) bool {
	var ke *kafkax.Error
	if errors.As(err, &ke) {
		return ke.Retriable
	}
	return true
}
