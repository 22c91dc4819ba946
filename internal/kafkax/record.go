package kafkax

import "github.com/segmentio/kafka-go"

// Header is one Kafka record header. It is kafka-go's type, so records pass
// to the writer without copying their headers.
type Header = kafka.Header

// Record is one Kafka record to produce: the project's one record shape,
// shared by every role that writes to Kafka.
//
// A Record does not own its slices: Key, Value and Headers may alias a
// caller's buffer (otlpkafka carves them out of one), and Producer only
// reads them. A nil Key means "no key"; an empty non-nil Key is a key.
type Record struct {
	Key     []byte
	Value   []byte
	Headers []Header
}

// Size is the record's payload size as counted against Kafka's message size
// limits: key, value and headers.
func (r Record) Size() int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}
