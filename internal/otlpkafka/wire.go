package otlpkafka

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// All three OTLP export requests share one shape on the wire:
//
//	Export*ServiceRequest { repeated Resource* resource_* = 1; }
//	Resource*             { Resource resource = 1; repeated Scope* scope_* = 2; string schema_url = 3; }
//	Scope*                { InstrumentationScope scope = 1; repeated item = 2; string schema_url = 3; }
//
// where the item is a Span, a Metric or a LogRecord. The index below records
// where each resource, scope and item sits in the marshalled request; every
// field of a resource or scope other than its children (resource, scope,
// schema_url and any unknown field) is its "header" and is copied verbatim
// into each record that carries one of its children.
const (
	fieldResources = 1 // in the request
	fieldScopes    = 2 // in a resource
	fieldItems     = 2 // in a scope
	// fieldDeprecatedScopes is the pre-1.0 instrumentation_library_* field.
	// pdata reads it only when the resource has no field-2 scopes; so do we.
	fieldDeprecatedScopes = 1000
	fieldTraceID          = 1 // in a Span
	traceIDLen            = 16
)

// errMalformed marks wire data the index cannot walk.
var errMalformed = errors.New("malformed protobuf")

// rng is a half-open byte range of the request.
type rng struct{ start, end int }

type resourceEntry struct {
	val        rng // the Resource* message, without tag and length
	hdr0, hdr1 int // its header fields: index.resHdrs[hdr0:hdr1]
	hdrLen     int // total bytes of those header fields
}

type scopeEntry struct {
	res        int
	hdr0, hdr1 int // its header fields: index.scopeHdrs[hdr0:hdr1]
	hdrLen     int
}

type itemEntry struct {
	scope   int
	val     rng
	group   int32
	traceID [traceIDLen]byte // traces only; zero when the span has none
}

// index is the parsed layout of one request. Its slices are reused between
// requests.
type index struct {
	req    []byte
	res    []resourceEntry
	scopes []scopeEntry
	items  []itemEntry
	// Header ranges; kept apart because a resource's scopes are indexed
	// while its own header fields are still being collected.
	resHdrs   []rng
	scopeHdrs []rng
}

func (x *index) reset(req []byte) {
	x.req = req
	x.res = x.res[:0]
	x.scopes = x.scopes[:0]
	x.items = x.items[:0]
	x.resHdrs = x.resHdrs[:0]
	x.scopeHdrs = x.scopeHdrs[:0]
}

// parse walks req. With traceIDs set it also reads each item's trace_id
// (items are Spans).
func (x *index) parse(req []byte, traceIDs bool) error {
	x.reset(req)
	pos := 0
	for pos < len(req) {
		num, typ, n := protowire.ConsumeTag(req[pos:])
		if n < 0 {
			return fmt.Errorf("read request field at byte %d: %w", pos, errMalformed)
		}
		pos += n
		if num == fieldResources {
			if typ != protowire.BytesType {
				return fmt.Errorf("read resource at byte %d: wrong wire type %d: %w", pos, typ, errMalformed)
			}
			v, m := protowire.ConsumeBytes(req[pos:])
			if m < 0 {
				return fmt.Errorf("read resource at byte %d: %w", pos, errMalformed)
			}
			start := pos + m - len(v)
			if err := x.parseResource(rng{start, pos + m}, traceIDs); err != nil {
				return err
			}
			pos += m
			continue
		}
		// Export requests have no other fields; an unknown one is dropped,
		// as pdata drops it.
		m := protowire.ConsumeFieldValue(num, typ, req[pos:])
		if m < 0 {
			return fmt.Errorf("skip request field %d at byte %d: %w", num, pos, errMalformed)
		}
		pos += m
	}
	return nil
}

func (x *index) parseResource(val rng, traceIDs bool) error {
	// pdata falls back to the deprecated scope field only when field 2 is
	// absent: look first, so both cases decode the way pdata decodes them.
	scopeField, err := x.pickScopeField(val)
	if err != nil {
		return err
	}
	r := len(x.res)
	x.res = append(x.res, resourceEntry{val: val, hdr0: len(x.resHdrs)})
	hdrLen := 0
	pos := val.start
	for pos < val.end {
		fieldStart := pos
		num, typ, n := protowire.ConsumeTag(x.req[pos:val.end])
		if n < 0 {
			return fmt.Errorf("read resource field at byte %d: %w", pos, errMalformed)
		}
		pos += n
		switch {
		case num == scopeField && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(x.req[pos:val.end])
			if m < 0 {
				return fmt.Errorf("read scope at byte %d: %w", pos, errMalformed)
			}
			start := pos + m - len(v)
			if err := x.parseScope(r, rng{start, pos + m}, traceIDs); err != nil {
				return err
			}
			pos += m
		case num == fieldScopes || num == fieldDeprecatedScopes:
			// The scope field not chosen (or one with a wrong wire type,
			// which pickScopeField already rejected): drop it.
			m := protowire.ConsumeFieldValue(num, typ, x.req[pos:val.end])
			if m < 0 {
				return fmt.Errorf("skip resource field %d at byte %d: %w", num, pos, errMalformed)
			}
			pos += m
		default:
			m := protowire.ConsumeFieldValue(num, typ, x.req[pos:val.end])
			if m < 0 {
				return fmt.Errorf("read resource field %d at byte %d: %w", num, pos, errMalformed)
			}
			pos += m
			x.resHdrs = append(x.resHdrs, rng{fieldStart, pos})
			hdrLen += pos - fieldStart
		}
	}
	x.res[r].hdr1 = len(x.resHdrs)
	x.res[r].hdrLen = hdrLen
	return nil
}

// pickScopeField reports which field holds the resource's scopes.
func (x *index) pickScopeField(val rng) (protowire.Number, error) {
	pos := val.start
	for pos < val.end {
		num, typ, n := protowire.ConsumeTag(x.req[pos:val.end])
		if n < 0 {
			return 0, fmt.Errorf("read resource field at byte %d: %w", pos, errMalformed)
		}
		pos += n
		if (num == fieldScopes || num == fieldDeprecatedScopes) && typ != protowire.BytesType {
			return 0, fmt.Errorf("read scope at byte %d: wrong wire type %d: %w", pos, typ, errMalformed)
		}
		if num == fieldScopes {
			return fieldScopes, nil
		}
		m := protowire.ConsumeFieldValue(num, typ, x.req[pos:val.end])
		if m < 0 {
			return 0, fmt.Errorf("skip resource field %d at byte %d: %w", num, pos, errMalformed)
		}
		pos += m
	}
	return fieldDeprecatedScopes, nil
}

func (x *index) parseScope(r int, val rng, traceIDs bool) error {
	s := len(x.scopes)
	x.scopes = append(x.scopes, scopeEntry{res: r, hdr0: len(x.scopeHdrs)})
	hdrLen := 0
	pos := val.start
	for pos < val.end {
		fieldStart := pos
		num, typ, n := protowire.ConsumeTag(x.req[pos:val.end])
		if n < 0 {
			return fmt.Errorf("read scope field at byte %d: %w", pos, errMalformed)
		}
		pos += n
		if num == fieldItems {
			if typ != protowire.BytesType {
				return fmt.Errorf("read item at byte %d: wrong wire type %d: %w", pos, typ, errMalformed)
			}
			v, m := protowire.ConsumeBytes(x.req[pos:val.end])
			if m < 0 {
				return fmt.Errorf("read item at byte %d: %w", pos, errMalformed)
			}
			it := itemEntry{scope: s, val: rng{pos + m - len(v), pos + m}}
			if traceIDs {
				tid, err := readTraceID(v)
				if err != nil {
					return fmt.Errorf("read span at byte %d: %w", pos, err)
				}
				it.traceID = tid
			}
			x.items = append(x.items, it)
			pos += m
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, x.req[pos:val.end])
		if m < 0 {
			return fmt.Errorf("read scope field %d at byte %d: %w", num, pos, errMalformed)
		}
		pos += m
		x.scopeHdrs = append(x.scopeHdrs, rng{fieldStart, pos})
		hdrLen += pos - fieldStart
	}
	x.scopes[s].hdr1 = len(x.scopeHdrs)
	x.scopes[s].hdrLen = hdrLen
	return nil
}

// readTraceID returns a Span's trace_id. As in protobuf, the last occurrence
// wins; a missing or empty one is the zero id.
func readTraceID(span []byte) ([traceIDLen]byte, error) {
	var tid [traceIDLen]byte
	pos := 0
	for pos < len(span) {
		num, typ, n := protowire.ConsumeTag(span[pos:])
		if n < 0 {
			return tid, fmt.Errorf("read span field: %w", errMalformed)
		}
		pos += n
		if num == fieldTraceID {
			if typ != protowire.BytesType {
				return tid, fmt.Errorf("read trace id: wrong wire type %d: %w", typ, errMalformed)
			}
			v, m := protowire.ConsumeBytes(span[pos:])
			if m < 0 {
				return tid, fmt.Errorf("read trace id: %w", errMalformed)
			}
			switch len(v) {
			case 0:
				tid = [traceIDLen]byte{}
			case traceIDLen:
				copy(tid[:], v)
			default:
				return tid, fmt.Errorf("read trace id: length %d, want %d: %w", len(v), traceIDLen, errMalformed)
			}
			pos += m
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, span[pos:])
		if m < 0 {
			return tid, fmt.Errorf("skip span field %d: %w", num, errMalformed)
		}
		pos += m
	}
	return tid, nil
}

// fieldLen is the size of a length-delimited field with a one-byte tag
// (fields 1 and 2) and a body of n bytes.
func fieldLen(n int) int {
	return 1 + protowire.SizeVarint(uint64(n)) + n
}

// sizer tracks, in O(1) per item, the size of the request that a run of
// items (in request order) would marshal to.
type sizer struct {
	n            int // items added
	res, scope   int // current resource and scope
	closed       int // bytes of finished resource fields
	rBody, sBody int // bodies of the open resource (without the open scope) and scope
}

func (s *sizer) add(x *index, item int) {
	it := &x.items[item]
	sc := it.scope
	r := x.scopes[sc].res
	switch {
	case s.n == 0:
		s.res, s.scope = r, sc
		s.rBody, s.sBody = x.res[r].hdrLen, x.scopes[sc].hdrLen
	case r != s.res:
		s.rBody += fieldLen(s.sBody)
		s.closed += fieldLen(s.rBody)
		s.res, s.scope = r, sc
		s.rBody, s.sBody = x.res[r].hdrLen, x.scopes[sc].hdrLen
	case sc != s.scope:
		s.rBody += fieldLen(s.sBody)
		s.scope = sc
		s.sBody = x.scopes[sc].hdrLen
	}
	s.sBody += fieldLen(it.val.end - it.val.start)
	s.n++
}

func (s *sizer) total() int {
	if s.n == 0 {
		return 0
	}
	return s.closed + fieldLen(s.rBody+fieldLen(s.sBody))
}
