package kafkax

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/segmentio/kafka-go"
)

// Error is a failed Kafka operation. Retriable says whether the same
// operation may succeed later without any change to the data: the broker
// was unreachable, a leader was moving, replicas were missing, the request
// timed out. Permanent errors (a record too large, authorization, an invalid
// request) stay permanent.
type Error struct {
	Op        string // what failed: "write", "create topics", …
	Topic     string
	Retriable bool
	Err       error
}

func (e *Error) Error() string {
	kind := "permanent"
	if e.Retriable {
		kind = "retriable"
	}
	if e.Topic != "" {
		return fmt.Sprintf("%s %s (%s): %v", e.Op, e.Topic, kind, e.Err)
	}
	return fmt.Sprintf("%s (%s): %v", e.Op, kind, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// IsRetriable reports whether err, or the Kafka failure it wraps, may succeed
// if the same operation is tried again later. An *Error answers for itself;
// otherwise kafka-go's errors are classified: Kafka error codes the protocol
// marks retriable, network failures and timeouts are retriable, anything else
// is not.
func IsRetriable(err error) bool {
	if err == nil {
		return false
	}
	var ke *Error
	if errors.As(err, &ke) {
		return ke.Retriable
	}
	return classify(err)
}

func classify(err error) bool {
	var wes kafka.WriteErrors
	if errors.As(err, &wes) {
		// Retriable only if every failed record failed for a retriable reason.
		failed := false
		for _, e := range wes {
			if e == nil {
				continue
			}
			failed = true
			if !classify(e) {
				return false
			}
		}
		return failed
	}
	var tooLarge kafka.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return false
	}
	var code kafka.Error
	if errors.As(err, &code) {
		return code.Temporary()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrClosedPipe), // writer closing: another instance can take the data
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed):
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true // dial, DNS and I/O failures on the way to a broker
	}
	return false
}
