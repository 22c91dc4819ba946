package otlpkafka

import (
	"encoding/hex"
	"errors"
	"fmt"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tailcause/tailcause/internal/kafkax"
)

// Signal names an OTLP signal as the Collector names it (the value of the
// otelcol.signal header).
type Signal string

// The signals.
const (
	Traces  Signal = "traces"
	Metrics Signal = "metrics"
	Logs    Signal = "logs"
)

// ErrMessageTooLarge is matched (errors.Is) by the error returned when one
// span, metric or log record cannot fit in a record of MaxMessageBytes. It
// is permanent: retrying the same data cannot succeed.
var ErrMessageTooLarge = errors.New("message too large")

// TooLargeError reports an item that alone exceeds the record size limit.
type TooLargeError struct {
	Signal Signal
	Size   int // bytes of the smallest record that could hold the item
	Max    int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("encode %s: one item needs a %d-byte record, limit is %d: %v", e.Signal, e.Size, e.Max, ErrMessageTooLarge)
}

// Is makes errors.Is(err, ErrMessageTooLarge) true.
func (e *TooLargeError) Is(target error) bool { return target == ErrMessageTooLarge }

// Encoder turns OTLP data into Kafka records. It keeps scratch space between
// calls, so reuse one per goroutine; it is not safe for concurrent use.
type Encoder struct {
	cfg     Config
	headers map[Signal][]kafkax.Header

	idx    index
	hasher attrHasher
	groups map[[traceIDLen]byte]int32
	counts []int32 // items per group, then group start offsets
	order  []int32 // item indices, grouped
	next   []int32 // write cursor per group
	ssz    []int   // scope body sizes of the record being written
	rsz    []int   // resource body sizes of the record being written
}

// NewEncoder returns an Encoder for a validated configuration.
func NewEncoder(cfg Config) (*Encoder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("configure otlp encoder: %w", err)
	}
	e := &Encoder{cfg: cfg, groups: make(map[[traceIDLen]byte]int32)}
	if cfg.SignalHeader {
		e.headers = make(map[Signal][]kafkax.Header, 3)
		for _, s := range []Signal{Traces, Metrics, Logs} {
			e.headers[s] = []kafkax.Header{{Key: SignalHeader, Value: []byte(s)}}
		}
	}
	return e, nil
}

// The Append methods append the records for one batch of data to dst and
// return it, with buf. Record keys and values are carved out of buf (grown
// as needed, capacity-limited so that appending to one cannot overwrite
// another): they stay valid while the caller leaves buf alone, and reusing
// buf (buf[:0]) for the next batch invalidates them. Headers are shared,
// read-only slices. On error dst and buf are returned unchanged in length.

// AppendTraces appends one record per trace in td, keyed by the lowercase
// hex trace id (the empty string for spans without one). Spans of a trace
// keep their resource and scope. Records follow the order in which each
// trace first appears.
func (e *Encoder) AppendTraces(dst []kafkax.Record, buf []byte, td ptrace.Traces) ([]kafkax.Record, []byte, error) {
	req, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		return dst, buf, fmt.Errorf("marshal traces: %w", err)
	}
	return e.appendTracesProto(dst, buf, req)
}

// AppendTracesProto is AppendTraces for a marshalled
// ExportTraceServiceRequest, without a pdata tree: the records hold req's
// resources, scopes and spans as they were sent (copied into buf; req is not
// kept). req must be a request pdata's unmarshaller accepts (ingest checks
// it first): the splitter refuses some malformed input, not all of it.
func (e *Encoder) AppendTracesProto(dst []kafkax.Record, buf []byte, req []byte) ([]kafkax.Record, []byte, error) {
	return e.appendTracesProto(dst, buf, req)
}

// AppendMetrics appends one record per ResourceMetrics in md, keyed by the
// 16-byte resource-attribute hash.
func (e *Encoder) AppendMetrics(dst []kafkax.Record, buf []byte, md pmetric.Metrics) ([]kafkax.Record, []byte, error) {
	req, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	if err != nil {
		return dst, buf, fmt.Errorf("marshal metrics: %w", err)
	}
	rms := md.ResourceMetrics()
	keys := func(r int, b []byte) []byte {
		return e.hasher.appendHash(b, rms.At(r).Resource().Attributes())
	}
	return e.appendByResource(dst, buf, req, Metrics, rms.Len(), keys)
}

// AppendLogs appends the records for ld: one unkeyed record for the whole
// batch, or with Config.PartitionLogsByResource one per ResourceLogs keyed by
// the resource-attribute hash.
func (e *Encoder) AppendLogs(dst []kafkax.Record, buf []byte, ld plog.Logs) ([]kafkax.Record, []byte, error) {
	req, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	if err != nil {
		return dst, buf, fmt.Errorf("marshal logs: %w", err)
	}
	if e.cfg.PartitionLogsByResource {
		rls := ld.ResourceLogs()
		keys := func(r int, b []byte) []byte {
			return e.hasher.appendHash(b, rls.At(r).Resource().Attributes())
		}
		return e.appendByResource(dst, buf, req, Logs, rls.Len(), keys)
	}
	return e.appendWhole(dst, buf, req, Logs)
}

// appendTracesProto groups the spans of a marshalled ExportTraceServiceRequest
// by trace id.
func (e *Encoder) appendTracesProto(dst []kafkax.Record, buf []byte, req []byte) ([]kafkax.Record, []byte, error) {
	x := &e.idx
	if err := x.parse(req, true); err != nil {
		return dst, buf, fmt.Errorf("index traces: %w", err)
	}
	defer x.reset(nil)

	// Number the traces in order of first appearance, then order the items
	// by trace (a counting sort keeps request order within a trace).
	clear(e.groups)
	e.counts = e.counts[:0]
	for i := range x.items {
		it := &x.items[i]
		g, ok := e.groups[it.traceID]
		if !ok {
			g = int32(len(e.counts))
			e.groups[it.traceID] = g
			e.counts = append(e.counts, 0)
		}
		it.group = g
		e.counts[g]++
	}
	var off int32
	for g, c := range e.counts {
		e.counts[g] = off
		off += c
	}
	e.order = grow(e.order, len(x.items))
	e.next = append(e.next[:0], e.counts...)
	for i := range x.items {
		g := x.items[i].group
		e.order[e.next[g]] = int32(i)
		e.next[g]++
	}

	n0, b0 := len(dst), len(buf)
	buf = growBuf(buf, len(req)+len(e.counts)*(2*traceIDLen+16))
	for g := range e.counts {
		start := int(e.counts[g])
		end := len(x.items)
		if g+1 < len(e.counts) {
			end = int(e.counts[g+1])
		}
		items := e.order[start:end]
		tid := x.items[items[0]].traceID
		var err error
		dst, buf, err = e.appendChunked(dst, buf, Traces, items, func(b []byte) []byte {
			if tid == ([traceIDLen]byte{}) {
				return b // the Collector keys a span without trace id by ""
			}
			return hex.AppendEncode(b, tid[:])
		})
		if err != nil {
			return dst[:n0], buf[:b0], err
		}
	}
	return dst, buf, nil
}

// appendByResource writes one record per resource (split if needed), keyed by
// key(r).
func (e *Encoder) appendByResource(dst []kafkax.Record, buf []byte, req []byte, sig Signal, nres int, key func(r int, b []byte) []byte) ([]kafkax.Record, []byte, error) {
	x := &e.idx
	if err := x.parse(req, false); err != nil {
		return dst, buf, fmt.Errorf("index %s: %w", sig, err)
	}
	defer x.reset(nil)
	if len(x.res) != nres {
		return dst, buf, fmt.Errorf("index %s: found %d resources, data has %d", sig, len(x.res), nres)
	}
	n0, b0 := len(dst), len(buf)
	buf = growBuf(buf, len(req)+nres*(resourceHashLen+8))
	it := 0
	for r := range x.res {
		whole := fieldLen(x.res[r].val.end - x.res[r].val.start)
		first := it
		for it < len(x.items) && x.scopes[x.items[it].scope].res == r {
			it++
		}
		if whole <= e.cfg.MaxMessageBytes {
			// The common case: the resource as it is, empty scopes included.
			k0 := len(buf)
			buf = key(r, buf)
			k := buf[k0:len(buf):len(buf)]
			v0 := len(buf)
			buf = protowire.AppendTag(buf, fieldResources, protowire.BytesType)
			buf = protowire.AppendBytes(buf, req[x.res[r].val.start:x.res[r].val.end])
			dst = append(dst, kafkax.Record{Key: k, Value: buf[v0:len(buf):len(buf)], Headers: e.headers[sig]})
			continue
		}
		e.order = e.order[:0]
		for i := first; i < it; i++ {
			e.order = append(e.order, int32(i))
		}
		if len(e.order) == 0 {
			return dst[:n0], buf[:b0], &TooLargeError{Signal: sig, Size: whole, Max: e.cfg.MaxMessageBytes}
		}
		var err error
		dst, buf, err = e.appendChunked(dst, buf, sig, e.order, func(b []byte) []byte { return key(r, b) })
		if err != nil {
			return dst[:n0], buf[:b0], err
		}
	}
	return dst, buf, nil
}

// appendWhole writes the request as one unkeyed record, split if needed.
func (e *Encoder) appendWhole(dst []kafkax.Record, buf []byte, req []byte, sig Signal) ([]kafkax.Record, []byte, error) {
	x := &e.idx
	if err := x.parse(req, false); err != nil {
		return dst, buf, fmt.Errorf("index %s: %w", sig, err)
	}
	defer x.reset(nil)
	if len(x.res) == 0 {
		return dst, buf, nil
	}
	total := 0
	for r := range x.res {
		total += fieldLen(x.res[r].val.end - x.res[r].val.start)
	}
	buf = growBuf(buf, len(req)+16)
	if total <= e.cfg.MaxMessageBytes {
		v0 := len(buf)
		for r := range x.res {
			buf = protowire.AppendTag(buf, fieldResources, protowire.BytesType)
			buf = protowire.AppendBytes(buf, req[x.res[r].val.start:x.res[r].val.end])
		}
		return append(dst, kafkax.Record{Value: buf[v0:len(buf):len(buf)], Headers: e.headers[sig]}), buf, nil
	}
	e.order = e.order[:0]
	for i := range x.items {
		e.order = append(e.order, int32(i))
	}
	if len(e.order) == 0 {
		return dst, buf, &TooLargeError{Signal: sig, Size: total, Max: e.cfg.MaxMessageBytes}
	}
	n0, b0 := len(dst), len(buf)
	dst, buf, err := e.appendChunked(dst, buf, sig, e.order, nil)
	if err != nil {
		return dst[:n0], buf[:b0], err
	}
	return dst, buf, nil
}

// appendChunked writes items (indices in request order) as few records as
// the size limit allows, each keyed by key (nil: unkeyed).
func (e *Encoder) appendChunked(dst []kafkax.Record, buf []byte, sig Signal, items []int32, key func([]byte) []byte) ([]kafkax.Record, []byte, error) {
	x := &e.idx
	limit := e.cfg.MaxMessageBytes
	var s sizer
	start := 0
	for i, it := range items {
		s.add(x, int(it))
		if s.total() <= limit {
			continue
		}
		if s.n == 1 {
			return dst, buf, &TooLargeError{Signal: sig, Size: s.total(), Max: limit}
		}
		dst, buf = e.appendRecord(dst, buf, sig, items[start:i], key)
		start = i
		s = sizer{}
		s.add(x, int(it))
		if s.total() > limit {
			return dst, buf, &TooLargeError{Signal: sig, Size: s.total(), Max: limit}
		}
	}
	dst, buf = e.appendRecord(dst, buf, sig, items[start:], key)
	return dst, buf, nil
}

// appendRecord writes one record holding items under their resources and
// scopes.
func (e *Encoder) appendRecord(dst []kafkax.Record, buf []byte, sig Signal, items []int32, key func([]byte) []byte) ([]kafkax.Record, []byte) {
	x := &e.idx
	var k []byte
	if key != nil {
		k0 := len(buf)
		buf = key(buf)
		k = buf[k0:len(buf):len(buf)]
	}

	// Pass 1: body sizes of every resource and scope run, in order.
	e.ssz, e.rsz = e.ssz[:0], e.rsz[:0]
	curRes, curScope := -1, -1
	rBody, sBody := 0, 0
	for _, i := range items {
		it := &x.items[i]
		r := x.scopes[it.scope].res
		if it.scope != curScope {
			if curScope >= 0 {
				e.ssz = append(e.ssz, sBody)
				rBody += fieldLen(sBody)
			}
			if r != curRes {
				if curRes >= 0 {
					e.rsz = append(e.rsz, rBody)
				}
				curRes, rBody = r, x.res[r].hdrLen
			}
			curScope, sBody = it.scope, x.scopes[it.scope].hdrLen
		}
		sBody += fieldLen(it.val.end - it.val.start)
	}
	e.ssz = append(e.ssz, sBody)
	e.rsz = append(e.rsz, rBody+fieldLen(sBody))

	// Pass 2: write.
	v0 := len(buf)
	curRes, curScope = -1, -1
	si, ri := 0, 0
	for _, i := range items {
		it := &x.items[i]
		sc := &x.scopes[it.scope]
		if it.scope != curScope {
			if sc.res != curRes {
				curRes = sc.res
				re := &x.res[curRes]
				buf = protowire.AppendTag(buf, fieldResources, protowire.BytesType)
				buf = protowire.AppendVarint(buf, uint64(e.rsz[ri]))
				ri++
				for _, h := range x.resHdrs[re.hdr0:re.hdr1] {
					buf = append(buf, x.req[h.start:h.end]...)
				}
			}
			curScope = it.scope
			buf = protowire.AppendTag(buf, fieldScopes, protowire.BytesType)
			buf = protowire.AppendVarint(buf, uint64(e.ssz[si]))
			si++
			for _, h := range x.scopeHdrs[sc.hdr0:sc.hdr1] {
				buf = append(buf, x.req[h.start:h.end]...)
			}
		}
		buf = protowire.AppendTag(buf, fieldItems, protowire.BytesType)
		buf = protowire.AppendBytes(buf, x.req[it.val.start:it.val.end])
	}
	return append(dst, kafkax.Record{Key: k, Value: buf[v0:len(buf):len(buf)], Headers: e.headers[sig]}), buf
}

func grow(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

// growBuf makes room for n more bytes up front, so that the records of one
// call usually share one backing array.
func growBuf(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), len(b)+n)
	copy(nb, b)
	return nb
}
