package ingest

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/durationpb"

	// Registers the gzip compressor with gRPC: the Collector's otlp exporter
	// compresses with gzip by default.
	_ "google.golang.org/grpc/encoding/gzip"

	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/otlpkafka"
)

func (s *Server) newGRPCServer() *grpc.Server {
	var creds []grpc.ServerOption
	if s.cfg.TLS != nil {
		creds = append(creds, grpc.Creds(credentials.NewTLS(s.cfg.TLS.Clone())))
	}
	srv := grpc.NewServer(append(creds,
		// MaxRecvMsgSize bounds the message after decompression too:
		// grpc-go stops inflating at the limit (the gzip-bomb guard).
		grpc.MaxRecvMsgSize(int(s.cfg.MaxBodyBytes)),
		// The tap runs when a stream's headers arrive, before one byte of
		// its message is read: the token, the in-flight slot and the decode
		// budget are checked there (grpc-go reads, inflates and unmarshals
		// a unary message before any interceptor or handler runs).
		grpc.InTapHandle(s.grpcTap),
		grpc.MaxConcurrentStreams(uint32(s.cfg.MaxInFlight)),
	)...)
	srv.RegisterService(&rawTraceService, s) // traceswire.go: no pdata tree
	pmetricotlp.RegisterGRPCServer(srv, &metricService{s: s})
	plogotlp.RegisterGRPCServer(srv, &logService{s: s})
	return srv
}

type metricService struct {
	pmetricotlp.UnimplementedGRPCServer
	s *Server
}

func (ms *metricService) Export(ctx context.Context, req pmetricotlp.ExportRequest) (pmetricotlp.ExportResponse, error) {
	md := req.Metrics()
	var m pmetric.ProtoMarshaler
	err := ms.s.grpcExport(ctx, signalMetrics, md.DataPointCount(), m.MetricsSize(md),
		func(e *otlpkafka.Encoder, dst []kafkax.Record, buf []byte) ([]kafkax.Record, []byte, error) {
			return e.AppendMetrics(dst, buf, md)
		})
	return pmetricotlp.NewExportResponse(), err
}

type logService struct {
	plogotlp.UnimplementedGRPCServer
	s *Server
}

func (l *logService) Export(ctx context.Context, req plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	ld := req.Logs()
	var m plog.ProtoMarshaler
	err := l.s.grpcExport(ctx, signalLogs, ld.LogRecordCount(), m.LogsSize(ld),
		func(e *otlpkafka.Encoder, dst []kafkax.Record, buf []byte) ([]kafkax.Record, []byte, error) {
			return e.AppendLogs(dst, buf, ld)
		})
	return plogotlp.NewExportResponse(), err
}

// grpcMethods are the OTLP export methods and their signals.
var grpcMethods = map[string]signal{
	"/opentelemetry.proto.collector.trace.v1.TraceService/Export":     signalTraces,
	"/opentelemetry.proto.collector.metrics.v1.MetricsService/Export": signalMetrics,
	"/opentelemetry.proto.collector.logs.v1.LogsService/Export":       signalLogs,
}

// grpcTap admits a gRPC stream before its message is read: the bearer token
// of its metadata, then an in-flight slot and MaxBodyBytes of the decode
// budget (the message's size is not known yet), held until its handler
// returns or the stream ends.
// A stream of another method takes nothing: grpc-go answers Unimplemented
// without reading it. It runs on the transport's reader, so it never
// blocks.
func (s *Server) grpcTap(ctx context.Context, info *tap.Info) (context.Context, error) {
	sig, ok := grpcMethods[info.FullMethodName]
	if !ok {
		return ctx, nil
	}
	s.m.requests[transportGRPC][sig].Inc()
	rej := func() *rejection {
		if s.tokenHash != nil {
			vals := info.Header.Get("authorization")
			if len(vals) != 1 || !s.authorized(vals[0]) {
				return reject(reasonUnauthenticated, "missing or invalid bearer token in authorization metadata", nil)
			}
		}
		release, rej := s.admit(s.cfg.MaxBodyBytes)
		if rej != nil {
			return rej
		}
		// The handler releases it when it returns, before grpc-go writes
		// the response (a client's next request must find the budget
		// free); the stream's context ending releases it however else the
		// stream ends (release is idempotent).
		context.AfterFunc(ctx, release)
		ctx = context.WithValue(ctx, admittedKey{}, release)
		return nil
	}()
	if rej != nil {
		s.m.rejected.WithLabelValues(transportGRPC.String(), sig.String(), string(rej.reason)).Inc()
		s.log.Debug("otlp/grpc request rejected", "signal", sig.String(), "reason", string(rej.reason), "err", rej)
		return nil, s.grpcStatus(rej)
	}
	return ctx, nil
}

// admittedKey holds, in a gRPC stream's context, the release of what the
// tap admitted it with.
type admittedKey struct{}

// grpcExport is the gRPC side of every signal once the tap admitted it.
func (s *Server) grpcExport(ctx context.Context, sig signal, items, size int, encode encodeFunc) error {
	if release, ok := ctx.Value(admittedKey{}).(func()); ok {
		defer release()
	}
	start := time.Now()
	defer func() { s.m.duration[transportGRPC][sig].Observe(time.Since(start).Seconds()) }()
	rej := s.export(ctx, transportGRPC, sig, items, encode)
	if rej != nil {
		s.m.rejected.WithLabelValues(transportGRPC.String(), sig.String(), string(rej.reason)).Inc()
		s.log.Debug("otlp/grpc request rejected", "signal", sig.String(), "reason", string(rej.reason), "err", rej)
		return s.grpcStatus(rej)
	}
	s.m.bytes[transportGRPC][sig].Add(float64(size))
	return nil
}

// grpcStatus is the OTLP/gRPC error for a rejection; retryable ones carry a
// RetryInfo, without which OTLP clients do not retry ResourceExhausted.
func (s *Server) grpcStatus(rej *rejection) error {
	st := status.New(rej.reason.grpcCode(), rej.msg)
	if rej.reason.retryable() {
		if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(s.cfg.RetryAfter)}); err == nil {
			st = d
		}
	}
	return st.Err()
}
