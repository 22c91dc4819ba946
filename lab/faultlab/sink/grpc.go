package sink

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// GRPC exports over OTLP/gRPC (port 4317 by convention).
type GRPC struct {
	conn    *grpc.ClientConn
	traces  ptraceotlp.GRPCClient
	metrics pmetricotlp.GRPCClient
	// Retry bounds retries of retryable failures (default DefaultRetry()).
	Retry Retry
}

// Retry bounds the retries of a retryable export failure.
type Retry struct {
	Attempts int           // total attempts, at least 1
	Backoff  time.Duration // first wait, doubled each time
}

// DefaultRetry is 5 attempts from 200ms.
func DefaultRetry() Retry { return Retry{Attempts: 5, Backoff: 200 * time.Millisecond} }

// DialGRPC connects to target (host:port), plaintext unless opts say
// otherwise. The connection is lazy: errors show on the first export.
func DialGRPC(target string, opts ...grpc.DialOption) (*GRPC, error) {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial otlp grpc %s: %w", target, err)
	}
	return &GRPC{
		conn:    conn,
		traces:  ptraceotlp.NewGRPCClient(conn),
		metrics: pmetricotlp.NewGRPCClient(conn),
		Retry:   DefaultRetry(),
	}, nil
}

// Traces exports td.
func (g *GRPC) Traces(ctx context.Context, td ptrace.Traces) error {
	req := ptraceotlp.NewExportRequestFromTraces(td)
	return g.do(ctx, "traces", func(ctx context.Context) error {
		resp, err := g.traces.Export(ctx, req)
		if err == nil && resp.PartialSuccess().RejectedSpans() > 0 {
			return fmt.Errorf("%d spans rejected: %s", resp.PartialSuccess().RejectedSpans(), resp.PartialSuccess().ErrorMessage())
		}
		return err
	})
}

// Metrics exports md.
func (g *GRPC) Metrics(ctx context.Context, md pmetric.Metrics) error {
	req := pmetricotlp.NewExportRequestFromMetrics(md)
	return g.do(ctx, "metrics", func(ctx context.Context) error {
		resp, err := g.metrics.Export(ctx, req)
		if err == nil && resp.PartialSuccess().RejectedDataPoints() > 0 {
			return fmt.Errorf("%d points rejected: %s", resp.PartialSuccess().RejectedDataPoints(), resp.PartialSuccess().ErrorMessage())
		}
		return err
	})
}

func (g *GRPC) do(ctx context.Context, what string, call func(context.Context) error) error {
	wait := g.Retry.Backoff
	var err error
	for attempt := 1; ; attempt++ {
		err = call(ctx)
		if err == nil {
			return nil
		}
		switch status.Code(err) {
		case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.DeadlineExceeded:
		default:
			return fmt.Errorf("export %s over otlp grpc: %w", what, err)
		}
		if attempt >= max(1, g.Retry.Attempts) {
			return fmt.Errorf("export %s over otlp grpc after %d attempts: %w", what, attempt, err)
		}
		if err := sleep(ctx, wait); err != nil {
			return fmt.Errorf("export %s over otlp grpc: %w", what, err)
		}
		wait *= 2
	}
}

// Close closes the connection.
func (g *GRPC) Close() error { return g.conn.Close() }

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
