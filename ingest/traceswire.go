package ingest

import (
	"errors"
	"fmt"
	"io"
)

// OTLP/gRPC trace exports are taken as bytes: checked here, then split into
// records from their wire form (otlpkafka.Encoder.AppendTracesProto), with
// no pdata tree in between. Decoding every request into pdata and encoding
// it again for the splitter was most of ingest's CPU time (profile of
// BenchmarkIngestVsCollector: the pdata unmarshal alone 58% of a request,
// the garbage it left most of the rest).
//
// validateTraces accepts exactly what pdata's ExportTraceServiceRequest
// unmarshaller (go.opentelemetry.io/collector/pdata v1.71) accepts: the
// same wire types for the same fields, trace and span ids of 0 or 16 / 8
// bytes, unknown fields skipped (groups included), the recursion limit of
// nested attribute values, and its varint and tag rules. FuzzValidateTraces
// holds it to that; a pdata upgrade that changes the rules shows there.
// Its span count is pdata's after MigrateTraces (a resource's deprecated
// scope field 1000 counts only when it has no field 2).

// wireType is a protobuf wire type.
type wireType uint8

const (
	wtVarint     wireType = 0
	wtI64        wireType = 1
	wtLen        wireType = 2
	wtStartGroup wireType = 3
	wtEndGroup   wireType = 4
	wtI32        wireType = 5
)

// recursionLimit is pdata's limit on nested KeyValue / AnyValue /
// ArrayValue / KeyValueList messages.
const recursionLimit = 100

var (
	errWireOverflow   = errors.New("proto: integer overflow")
	errWireLength     = errors.New("proto: negative length found during unmarshaling")
	errWireRecursion  = errors.New("proto: exceeded max recursion depth")
	errWireEndOfGroup = errors.New("proto: unexpected end of group")
	errWireTraceID    = errors.New("invalid length for TraceID")
	errWireSpanID     = errors.New("invalid length for SpanID")
)

// wire reads one message's fields.
type wire struct {
	b   []byte
	pos int
}

func (w *wire) more() bool { return w.pos < len(w.b) }

func (w *wire) varint() (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		if shift >= 64 {
			return 0, errWireOverflow
		}
		if w.pos >= len(w.b) {
			return 0, io.ErrUnexpectedEOF
		}
		c := w.b[w.pos]
		w.pos++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, nil
		}
	}
}

// tag reads a field's number and wire type. As pdata does, the number is
// the tag's upper bits truncated to int32, and must be positive.
func (w *wire) tag() (int32, wireType, error) {
	t, err := w.varint()
	if err != nil {
		return 0, 0, err
	}
	num := int32(t >> 3)
	if num <= 0 {
		return 0, 0, fmt.Errorf("proto: illegal field=%d (tag=%d, pos=%d)", num, t, w.pos)
	}
	return num, wireType(t & 7), nil
}

// bytes reads a length-delimited value.
func (w *wire) bytes() ([]byte, error) {
	n, err := w.varint()
	if err != nil {
		return nil, err
	}
	length := int(n)
	if length < 0 {
		return nil, errWireLength
	}
	end := w.pos + length
	if end < 0 || end > len(w.b) {
		return nil, io.ErrUnexpectedEOF
	}
	v := w.b[w.pos:end]
	w.pos = end
	return v, nil
}

func (w *wire) fixed(n int) error {
	end := w.pos + n
	if end < 0 || end > len(w.b) {
		return io.ErrUnexpectedEOF
	}
	w.pos = end
	return nil
}

// scalar reads a value of the wire type a field must have: the one pdata
// checks before reading it.
func (w *wire) scalar(field string, want, got wireType) error {
	if got != want {
		return fmt.Errorf("proto: wrong wireType = %d for field %s", got, field)
	}
	switch want {
	case wtVarint:
		_, err := w.varint()
		return err
	case wtI64:
		return w.fixed(8)
	case wtI32:
		return w.fixed(4)
	}
	_, err := w.bytes()
	return err
}

// sub reads a length-delimited field of a required wire type.
func (w *wire) sub(field string, got wireType) ([]byte, error) {
	if got != wtLen {
		return nil, fmt.Errorf("proto: wrong wireType = %d for field %s", got, field)
	}
	return w.bytes()
}

// skip reads an unknown field's value (groups nest).
func (w *wire) skip(t wireType) error {
	depth := 0
	for w.more() {
		switch t {
		case wtVarint:
			_, err := w.varint()
			return err
		case wtI64:
			return w.fixed(8)
		case wtLen:
			_, err := w.bytes()
			return err
		case wtStartGroup:
			depth++
		case wtEndGroup:
			if depth == 0 {
				return errWireEndOfGroup
			}
			depth--
		case wtI32:
			return w.fixed(4)
		default:
			return fmt.Errorf("proto: illegal wireType %d", t)
		}
		if depth == 0 {
			return nil
		}
		var err error
		if _, t, err = w.tag(); err != nil {
			return err
		}
	}
	return io.ErrUnexpectedEOF
}

func checkID(b []byte, size int, bad error) error {
	if len(b) != 0 && len(b) != size {
		return bad
	}
	return nil
}

// validateTraces checks an ExportTraceServiceRequest and counts its spans.
func validateTraces(b []byte) (spans int, err error) {
	w := wire{b: b}
	for w.more() {
		num, t, err := w.tag()
		if err != nil {
			return 0, err
		}
		if num != 1 {
			if err := w.skip(t); err != nil {
				return 0, err
			}
			continue
		}
		v, err := w.sub("ResourceSpans", t)
		if err != nil {
			return 0, err
		}
		n, err := validateResourceSpans(v)
		if err != nil {
			return 0, err
		}
		spans += n
	}
	return spans, nil
}

func validateResourceSpans(b []byte) (int, error) {
	w := wire{b: b}
	var scopes, spans, deprecated int
	for w.more() {
		num, t, err := w.tag()
		if err != nil {
			return 0, err
		}
		switch num {
		case 1:
			v, err := w.sub("Resource", t)
			if err == nil {
				err = validateResource(v)
			}
			if err != nil {
				return 0, err
			}
		case 2, 1000:
			field := "ScopeSpans"
			if num == 1000 {
				field = "DeprecatedScopeSpans"
			}
			v, err := w.sub(field, t)
			if err != nil {
				return 0, err
			}
			n, err := validateScopeSpans(v)
			if err != nil {
				return 0, err
			}
			if num == 2 {
				scopes++
				spans += n
			} else {
				deprecated += n
			}
		case 3:
			if err := w.scalar("SchemaUrl", wtLen, t); err != nil {
				return 0, err
			}
		default:
			if err := w.skip(t); err != nil {
				return 0, err
			}
		}
	}
	if scopes == 0 {
		return deprecated, nil // MigrateTraces takes the deprecated field
	}
	return spans, nil
}

func validateResource(b []byte) error {
	w := wire{b: b}
	for w.more() {
		num, t, err := w.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			err = w.keyValue("Attributes", t, 0)
		case 2:
			err = w.scalar("DroppedAttributesCount", wtVarint, t)
		case 3:
			var v []byte
			if v, err = w.sub("EntityRefs", t); err == nil {
				err = validateEntityRef(v)
			}
		default:
			err = w.skip(t)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func validateEntityRef(b []byte) error {
	w := wire{b: b}
	for w.more() {
		num, t, err := w.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			err = w.scalar("SchemaUrl", wtLen, t)
		case 2:
			err = w.scalar("Type", wtLen, t)
		case 3:
			err = w.scalar("IdKeys", wtLen, t)
		case 4:
			err = w.scalar("DescriptionKeys", wtLen, t)
		default:
			err = w.skip(t)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func validateScopeSpans(b []byte) (int, error) {
	w := wire{b: b}
	spans := 0
	for w.more() {
		num, t, err := w.tag()
		if err != nil {
			return 0, err
		}
		switch num {
		case 1:
			var v []byte
			if v, err = w.sub("Scope", t); err == nil {
				err = validateScope(v)
			}
		case 2:
			var v []byte
			if v, err = w.sub("Spans", t); err == nil {
				err = validateSpan(v)
			}
			spans++
		case 3:
			err = w.scalar("SchemaUrl", wtLen, t)
		default:
			err = w.skip(t)
		}
		if err != nil {
			return 0, err
		}
	}
	return spans, nil
}

func validateScope(b []byte) error {
	w := wire{b: b}
	for w.more() {
		num, t, err := w.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			err = w.scalar("Name", wtLen, t)
		case 2:
			err = w.scalar("Version", wtLen, t)
		case 3:
			err = w.keyValue("Attributes", t, 0)
		case 4:
			err = w.scalar("DroppedAttributesCount", wtVarint, t)
		default:
			err = w.skip(t)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// id reads a trace or span id field.
func (w *wire) id(field string, t wireType, size int, bad error) error {
	v, err := w.sub(field, t)
	if err != nil {
		return err
	}
	return checkID(v, size, bad)
}

func validateSpan(b []byte) error {
	w := wire{b: b}
	for w.more() {
		num, t, err := w.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			err = w.id("TraceId", t, 16, errWireTraceID)
		case 2:
			err = w.id("SpanId", t, 8, errWireSpanID)
		case 3:
			err = w.scalar("TraceState", wtLen, t)
		case 4:
			err = w.id("ParentSpanId", t, 8, errWireSpanID)
		case 16:
			err = w.scalar("Flags", wtI32, t)
		case 5:
			err = w.scalar("Name", wtLen, t)
		case 6:
			err = w.scalar("Kind", wtVarint, t)
		case 7:
			err = w.scalar("StartTimeUnixNano", wtI64, t)
		case 8:
			err = w.scalar("EndTimeUnixNano", wtI64, t)
		case 9:
			err = w.keyValue("Attributes", t, 0)
		case 10:
			err = w.scalar("DroppedAttributesCount", wtVarint, t)
		case 11:
			var v []byte
			if v, err = w.sub("Events", t); err == nil {
				err = validateEvent(v)
			}
		case 12:
			err = w.scalar("DroppedEventsCount", wtVarint, t)
		case 13:
			var v []byte
			if v, err = w.sub("Links", t); err == nil {
				err = validateLink(v)
			}
		case 14:
			err = w.scalar("DroppedLinksCount", wtVarint, t)
		case 15:
			var v []byte
			if v, err = w.sub("Status", t); err == nil {
				err = validateStatus(v)
			}
		default:
			err = w.skip(t)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func validateEvent(b []byte) error {
	w := wire{b: b}
	for w.more() {
		num, t, err := w.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			err = w.scalar("TimeUnixNano", wtI64, t)
		case 2:
			err = w.scalar("Name", wtLen, t)
		case 3:
			err = w.keyValue("Attributes", t, 0)
		case 4:
			err = w.scalar("DroppedAttributesCount", wtVarint, t)
		default:
			err = w.skip(t)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func validateLink(b []byte) error {
	w := wire{b: b}
	for w.more() {
		num, t, err := w.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			err = w.id("TraceId", t, 16, errWireTraceID)
		case 2:
			err = w.id("SpanId", t, 8, errWireSpanID)
		case 3:
			err = w.scalar("TraceState", wtLen, t)
		case 4:
			err = w.keyValue("Attributes", t, 0)
		case 5:
			err = w.scalar("DroppedAttributesCount", wtVarint, t)
		case 6:
			err = w.scalar("Flags", wtI32, t)
		default:
			err = w.skip(t)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func validateStatus(b []byte) error {
	w := wire{b: b}
	for w.more() {
		num, t, err := w.tag()
		if err != nil {
			return err
		}
		switch num {
		case 2:
			err = w.scalar("Message", wtLen, t)
		case 3:
			err = w.scalar("Code", wtVarint, t)
		default:
			err = w.skip(t)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// keyValue reads a KeyValue field (attributes) at nesting depth.
func (w *wire) keyValue(field string, t wireType, depth int) error {
	v, err := w.sub(field, t)
	if err != nil {
		return err
	}
	return validateKeyValue(v, depth)
}

func validateKeyValue(b []byte, depth int) error {
	if depth >= recursionLimit {
		return errWireRecursion
	}
	depth++
	w := wire{b: b}
	for w.more() {
		num, t, err := w.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			err = w.scalar("Key", wtLen, t)
		case 2:
			var v []byte
			if v, err = w.sub("Value", t); err == nil {
				err = validateAnyValue(v, depth)
			}
		case 3:
			err = w.scalar("KeyStrindex", wtVarint, t)
		default:
			err = w.skip(t)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func validateAnyValue(b []byte, depth int) error {
	if depth >= recursionLimit {
		return errWireRecursion
	}
	depth++
	w := wire{b: b}
	for w.more() {
		num, t, err := w.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			err = w.scalar("StringValue", wtLen, t)
		case 2:
			err = w.scalar("BoolValue", wtVarint, t)
		case 3:
			err = w.scalar("IntValue", wtVarint, t)
		case 4:
			err = w.scalar("DoubleValue", wtI64, t)
		case 5, 6:
			field := "ArrayValue"
			if num == 6 {
				field = "KvlistValue"
			}
			var v []byte
			if v, err = w.sub(field, t); err == nil {
				err = validateValues(v, depth, num == 6)
			}
		case 7:
			err = w.scalar("BytesValue", wtLen, t)
		case 8:
			err = w.scalar("StringValueStrindex", wtVarint, t)
		default:
			err = w.skip(t)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// validateValues reads an ArrayValue (AnyValues) or a KeyValueList
// (KeyValues): field 1, repeated.
func validateValues(b []byte, depth int, kvs bool) error {
	if depth >= recursionLimit {
		return errWireRecursion
	}
	depth++
	w := wire{b: b}
	for w.more() {
		num, t, err := w.tag()
		if err != nil {
			return err
		}
		if num != 1 {
			if err := w.skip(t); err != nil {
				return err
			}
			continue
		}
		v, err := w.sub("Values", t)
		if err != nil {
			return err
		}
		if kvs {
			err = validateKeyValue(v, depth)
		} else {
			err = validateAnyValue(v, depth)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
