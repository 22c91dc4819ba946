package ingest

import (
	"net/http"

	"google.golang.org/grpc/codes"
)

// reason says why a request was not acknowledged (the label of
// tailcause_ingest_rejected_requests_total).
type reason string

const (
	reasonUnauthenticated  reason = "unauthenticated"
	reasonMethod           reason = "method_not_allowed"
	reasonMediaType        reason = "unsupported_media_type"
	reasonTooLarge         reason = "too_large"
	reasonMalformed        reason = "malformed"
	reasonOverloaded       reason = "overloaded"
	reasonRecordTooLarge   reason = "record_too_large"
	reasonKafkaUnavailable reason = "kafka_unavailable"
	reasonKafkaFailed      reason = "kafka_failed"
	reasonCanceled         reason = "canceled"
	reasonShuttingDown     reason = "shutting_down"
	reasonInternal         reason = "internal"
)

var allReasons = []reason{
	reasonUnauthenticated, reasonMethod, reasonMediaType, reasonTooLarge, reasonMalformed,
	reasonOverloaded, reasonRecordTooLarge, reasonKafkaUnavailable, reasonKafkaFailed,
	reasonCanceled, reasonShuttingDown, reasonInternal,
}

// rejection is a request the server does not acknowledge.
type rejection struct {
	reason reason
	msg    string // for the client
	err    error  // cause, for logs
}

func (r *rejection) Error() string {
	if r.err != nil {
		return r.msg + ": " + r.err.Error()
	}
	return r.msg
}

func (r *rejection) Unwrap() error { return r.err }

func reject(rs reason, msg string, err error) *rejection {
	return &rejection{reason: rs, msg: msg, err: err}
}

// retryable reports whether OTLP clients should retry the request later.
func (rs reason) retryable() bool {
	switch rs {
	case reasonOverloaded, reasonKafkaUnavailable, reasonCanceled, reasonShuttingDown:
		return true
	}
	return false
}

// httpStatus maps a reason to the OTLP/HTTP status code: 429, 502, 503 and
// 504 are the ones clients retry.
func (rs reason) httpStatus() int {
	switch rs {
	case reasonUnauthenticated:
		return http.StatusUnauthorized
	case reasonMethod:
		return http.StatusMethodNotAllowed
	case reasonMediaType:
		return http.StatusUnsupportedMediaType
	case reasonTooLarge, reasonRecordTooLarge:
		return http.StatusRequestEntityTooLarge
	case reasonMalformed:
		return http.StatusBadRequest
	case reasonOverloaded:
		return http.StatusTooManyRequests
	case reasonKafkaUnavailable, reasonCanceled, reasonShuttingDown:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// grpcCode maps a reason to the OTLP/gRPC status code. ResourceExhausted is
// retried by OTLP clients only with a RetryInfo detail, which the server
// adds.
func (rs reason) grpcCode() codes.Code {
	switch rs {
	case reasonUnauthenticated:
		return codes.Unauthenticated
	case reasonMethod, reasonMediaType, reasonMalformed, reasonTooLarge, reasonRecordTooLarge:
		return codes.InvalidArgument
	case reasonOverloaded:
		return codes.ResourceExhausted
	case reasonKafkaUnavailable, reasonCanceled, reasonShuttingDown:
		return codes.Unavailable
	}
	return codes.Internal
}
