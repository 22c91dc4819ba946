package normalize

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Encoding is how an OTLP payload is serialized, named as the Collector's
// kafka exporter names it. Payloads are raw Export{Traces,Metrics,Logs}
// ServiceRequest messages with no framing.
type Encoding string

// Encodings the decoders accept.
const (
	EncodingProto Encoding = "otlp_proto" // protobuf (the kafka exporter's default)
	EncodingJSON  Encoding = "otlp_json"  // OTLP/JSON (proto3 JSON mapping, hex ids)
)

// ErrUnknownEncoding is returned for an Encoding the decoders do not know.
var ErrUnknownEncoding = errors.New("unknown encoding")

// ErrMalformed marks payloads that could not be unmarshaled. Such input is
// permanent: retrying it cannot succeed, so it belongs in the dead-letter
// topic.
var ErrMalformed = errors.New("malformed otlp payload")

// ParseEncoding validates s as an Encoding. The empty string is the kafka
// exporter's default, otlp_proto.
func ParseEncoding(s string) (Encoding, error) {
	switch Encoding(s) {
	case "", EncodingProto:
		return EncodingProto, nil
	case EncodingJSON:
		return EncodingJSON, nil
	}
	return "", fmt.Errorf("parse encoding %q: %w", s, ErrUnknownEncoding)
}

// DecodeTraces unmarshals one Kafka record value holding an
// ExportTraceServiceRequest. The empty Encoding means otlp_proto. Errors
// wrap ErrMalformed or ErrUnknownEncoding.
func DecodeTraces(b []byte, enc Encoding) (ptrace.Traces, error) {
	var (
		td  ptrace.Traces
		err error
	)
	switch enc {
	case "", EncodingProto:
		var u ptrace.ProtoUnmarshaler
		td, err = u.UnmarshalTraces(b)
	case EncodingJSON:
		var u ptrace.JSONUnmarshaler
		td, err = u.UnmarshalTraces(b)
	default:
		return ptrace.Traces{}, fmt.Errorf("decode traces: %w %q", ErrUnknownEncoding, enc)
	}
	if err != nil {
		return ptrace.Traces{}, fmt.Errorf("decode %s traces (%d bytes): %w: %w", encName(enc), len(b), ErrMalformed, err)
	}
	return td, nil
}

// DecodeMetrics unmarshals one Kafka record value holding an
// ExportMetricsServiceRequest. See DecodeTraces.
func DecodeMetrics(b []byte, enc Encoding) (pmetric.Metrics, error) {
	var (
		md  pmetric.Metrics
		err error
	)
	switch enc {
	case "", EncodingProto:
		var u pmetric.ProtoUnmarshaler
		md, err = u.UnmarshalMetrics(b)
	case EncodingJSON:
		var u pmetric.JSONUnmarshaler
		md, err = u.UnmarshalMetrics(b)
	default:
		return pmetric.Metrics{}, fmt.Errorf("decode metrics: %w %q", ErrUnknownEncoding, enc)
	}
	if err != nil {
		return pmetric.Metrics{}, fmt.Errorf("decode %s metrics (%d bytes): %w: %w", encName(enc), len(b), ErrMalformed, err)
	}
	return md, nil
}

// DecodeLogs unmarshals one Kafka record value holding an
// ExportLogsServiceRequest. See DecodeTraces.
func DecodeLogs(b []byte, enc Encoding) (plog.Logs, error) {
	var (
		ld  plog.Logs
		err error
	)
	switch enc {
	case "", EncodingProto:
		var u plog.ProtoUnmarshaler
		ld, err = u.UnmarshalLogs(b)
	case EncodingJSON:
		var u plog.JSONUnmarshaler
		ld, err = u.UnmarshalLogs(b)
	default:
		return plog.Logs{}, fmt.Errorf("decode logs: %w %q", ErrUnknownEncoding, enc)
	}
	if err != nil {
		return plog.Logs{}, fmt.Errorf("decode %s logs (%d bytes): %w: %w", encName(enc), len(b), ErrMalformed, err)
	}
	return ld, nil
}

func encName(enc Encoding) Encoding {
	if enc == "" {
		return EncodingProto
	}
	return enc
}
