package ingest

import (
	"context"

	"google.golang.org/grpc"

	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/otlpkafka"
)

// rawTraceService is OTLP's TraceService with the request taken as bytes
// (see traceswire.go): the same service, method and messages on the wire
// as ptraceotlp's, without the pdata tree.
var rawTraceService = grpc.ServiceDesc{
	ServiceName: "opentelemetry.proto.collector.trace.v1.TraceService",
	HandlerType: (*rawTraceExporter)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Export", Handler: rawTraceExport}},
	Streams:     []grpc.StreamDesc{},
	Metadata:    "opentelemetry/proto/collector/trace/v1/trace_service.proto",
}

type rawTraceExporter interface {
	exportRawTraces(ctx context.Context, req *rawTraceRequest) (emptyResponse, error)
}

func rawTraceExport(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(rawTraceRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	handle := func(ctx context.Context, req any) (any, error) {
		return srv.(rawTraceExporter).exportRawTraces(ctx, req.(*rawTraceRequest))
	}
	if interceptor == nil {
		return handle(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/opentelemetry.proto.collector.trace.v1.TraceService/Export"}
	return interceptor(ctx, in, info, handle)
}

// rawTraceRequest is an ExportTraceServiceRequest as received, checked by
// validateTraces. Its methods are those pdata's gRPC codec (registered by
// the pdata packages as "proto", and already what decodes the metric and
// log services' requests) calls on its own message types; the codec frees
// the bytes it hands UnmarshalProto when that returns, so they are copied.
type rawTraceRequest struct {
	b     []byte
	spans int
}

func (r *rawTraceRequest) SizeProto() int              { return len(r.b) }
func (r *rawTraceRequest) MarshalProto(buf []byte) int { return copy(buf, r.b) }

func (r *rawTraceRequest) UnmarshalProto(b []byte) error {
	n, err := validateTraces(b)
	if err != nil {
		return err
	}
	r.b, r.spans = append(r.b[:0], b...), n
	return nil
}

// emptyResponse is the (empty) Export*ServiceResponse.
type emptyResponse struct{}

func (emptyResponse) SizeProto() int              { return 0 }
func (emptyResponse) MarshalProto([]byte) int     { return 0 }
func (emptyResponse) UnmarshalProto([]byte) error { return nil }

func (s *Server) exportRawTraces(ctx context.Context, req *rawTraceRequest) (emptyResponse, error) {
	err := s.grpcExport(ctx, signalTraces, req.spans, len(req.b),
		func(e *otlpkafka.Encoder, dst []kafkax.Record, buf []byte) ([]kafkax.Record, []byte, error) {
			// The records are copied into buf: req.b is not kept.
			return e.AppendTracesProto(dst, buf, req.b)
		})
	return emptyResponse{}, err
}
