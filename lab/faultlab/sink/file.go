package sink

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// File writes OTLP-JSON lines: each batch is one line holding an
// ExportTraceServiceRequest ({"resourceSpans":…}) or an
// ExportMetricsServiceRequest ({"resourceMetrics":…}).
type File struct {
	mu     sync.Mutex
	w      *bufio.Writer
	closer io.Closer
	tm     ptrace.JSONMarshaler
	mm     pmetric.JSONMarshaler
	err    error
}

// NewFile writes to w; Close flushes (and closes w if it is an io.Closer
// other than os.Stdout).
func NewFile(w io.Writer) *File {
	f := &File{w: bufio.NewWriterSize(w, 1<<20)}
	if c, ok := w.(io.Closer); ok && w != os.Stdout {
		f.closer = c
	}
	return f
}

// CreateFile creates (truncates) path; "-" is standard output.
func CreateFile(path string) (*File, error) {
	if path == "-" {
		return NewFile(os.Stdout), nil
	}
	fh, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create output file: %w", err)
	}
	return NewFile(fh), nil
}

// Traces writes one line.
func (f *File) Traces(_ context.Context, td ptrace.Traces) error {
	b, err := f.tm.MarshalTraces(td)
	if err != nil {
		return fmt.Errorf("marshal traces: %w", err)
	}
	return f.line(b)
}

// Metrics writes one line.
func (f *File) Metrics(_ context.Context, md pmetric.Metrics) error {
	b, err := f.mm.MarshalMetrics(md)
	if err != nil {
		return fmt.Errorf("marshal metrics: %w", err)
	}
	return f.line(b)
}

func (f *File) line(b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if _, err := f.w.Write(b); err != nil {
		f.err = fmt.Errorf("write output file: %w", err)
		return f.err
	}
	if err := f.w.WriteByte('\n'); err != nil {
		f.err = fmt.Errorf("write output file: %w", err)
	}
	return f.err
}

// Close flushes buffered lines and closes the file. It is idempotent.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.w.Flush()
	if f.closer != nil {
		if cerr := f.closer.Close(); err == nil {
			err = cerr
		}
		f.closer = nil
	}
	if err != nil {
		return fmt.Errorf("close output file: %w", err)
	}
	return f.err
}
