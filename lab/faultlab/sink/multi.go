package sink

import (
	"context"
	"errors"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Target is what Multi fans out to: the faultlab.Sink method set.
type Target interface {
	Traces(ctx context.Context, td ptrace.Traces) error
	Metrics(ctx context.Context, md pmetric.Metrics) error
}

// Multi sends every batch to each of its sinks in order. All but the last
// get a copy, since a sink owns what it is given.
type Multi []Target

// Traces fans out td.
func (m Multi) Traces(ctx context.Context, td ptrace.Traces) error {
	var errs []error
	for i, s := range m {
		b := td
		if i < len(m)-1 {
			b = ptrace.NewTraces()
			td.CopyTo(b)
		}
		if err := s.Traces(ctx, b); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Metrics fans out md.
func (m Multi) Metrics(ctx context.Context, md pmetric.Metrics) error {
	var errs []error
	for i, s := range m {
		b := md
		if i < len(m)-1 {
			b = pmetric.NewMetrics()
			md.CopyTo(b)
		}
		if err := s.Metrics(ctx, b); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Discard drops everything (benchmarks, dry runs).
type Discard struct{}

// Traces drops td.
func (Discard) Traces(context.Context, ptrace.Traces) error { return nil }

// Metrics drops md.
func (Discard) Metrics(context.Context, pmetric.Metrics) error { return nil }
