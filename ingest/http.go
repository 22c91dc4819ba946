package ingest

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/otlpkafka"
)

// OTLP/HTTP paths and media types.
const (
	PathTraces  = "/v1/traces"
	PathMetrics = "/v1/metrics"
	PathLogs    = "/v1/logs"

	contentTypeProtobuf = "application/x-protobuf"
	contentTypeJSON     = "application/json"
)

type bodyEncoding int

const (
	encProtobuf bodyEncoding = iota
	encJSON
)

func (e bodyEncoding) contentType() string {
	if e == encJSON {
		return contentTypeJSON
	}
	return contentTypeProtobuf
}

func (s *Server) newHTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(PathTraces, s.httpSignal(signalTraces))
	mux.Handle(PathMetrics, s.httpSignal(signalMetrics))
	mux.Handle(PathLogs, s.httpSignal(signalLogs))
	return mux
}

func (s *Server) httpSignal(sig signal) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		s.m.requests[transportHTTP][sig].Inc()
		enc := encProtobuf
		if rej := s.serveHTTP(w, r, sig, &enc); rej != nil {
			s.m.rejected.WithLabelValues(transportHTTP.String(), sig.String(), string(rej.reason)).Inc()
			s.log.Debug("otlp/http request rejected", "signal", sig.String(), "reason", string(rej.reason), "err", rej)
			s.writeHTTPError(w, enc, rej)
		}
		s.m.duration[transportHTTP][sig].Observe(time.Since(start).Seconds())
	})
}

// serveHTTP handles one request; it writes the response itself on success
// and returns the rejection otherwise. enc is set as soon as the request's
// encoding is known, so that errors are answered in it.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request, sig signal, enc *bodyEncoding) *rejection {
	// Known first so that every answer, 401 included, is in the client's
	// encoding; rejected only after authentication.
	e, ctRej := parseContentType(r.Header.Get("Content-Type"))
	*enc = e
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return reject(reasonMethod, fmt.Sprintf("method %s not allowed, use POST", r.Method), nil)
	}
	if !s.authorized(r.Header.Get("Authorization")) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tailcause"`)
		return reject(reasonUnauthenticated, "missing or invalid bearer token", nil)
	}
	if ctRej != nil {
		return ctRej
	}
	gz, rej := parseContentEncoding(r.Header.Get("Content-Encoding"))
	if rej != nil {
		return rej
	}
	release, rej := s.admit(0)
	if rej != nil {
		return rej
	}
	defer release()

	bb, rej := s.readBody(w, r, gz)
	if bb != nil {
		// Decoding copies what it keeps, so the body can go back to the
		// pool once the request is done.
		defer s.putBody(bb)
	}
	if rej != nil {
		return rej
	}
	body := bb.Bytes()
	// The body's size is known now: reserve it of the decode budget (a
	// gRPC message reserves MaxBodyBytes, its size unknown when admitted).
	unbudget, rej := s.budget(int64(len(body)))
	if rej != nil {
		return rej
	}
	defer unbudget()
	var items int
	var encode encodeFunc
	switch {
	case sig == signalTraces && e == encProtobuf:
		// As bytes, like OTLP/gRPC (traceswire.go). The records are copied
		// out of body before it goes back to the pool.
		n, err := validateTraces(body)
		if err != nil {
			return malformed(sig, e, err)
		}
		items = n
		encode = func(en *otlpkafka.Encoder, dst []kafkax.Record, buf []byte) ([]kafkax.Record, []byte, error) {
			return en.AppendTracesProto(dst, buf, body)
		}
	case sig == signalTraces:
		req := ptraceotlp.NewExportRequest()
		if err := decode(req, body, e); err != nil {
			return malformed(sig, e, err)
		}
		td := req.Traces()
		items = td.SpanCount()
		encode = func(en *otlpkafka.Encoder, dst []kafkax.Record, buf []byte) ([]kafkax.Record, []byte, error) {
			return en.AppendTraces(dst, buf, td)
		}
	case sig == signalMetrics:
		req := pmetricotlp.NewExportRequest()
		if err := decode(req, body, e); err != nil {
			return malformed(sig, e, err)
		}
		md := req.Metrics()
		items = md.DataPointCount()
		encode = func(en *otlpkafka.Encoder, dst []kafkax.Record, buf []byte) ([]kafkax.Record, []byte, error) {
			return en.AppendMetrics(dst, buf, md)
		}
	case sig == signalLogs:
		req := plogotlp.NewExportRequest()
		if err := decode(req, body, e); err != nil {
			return malformed(sig, e, err)
		}
		ld := req.Logs()
		items = ld.LogRecordCount()
		encode = func(en *otlpkafka.Encoder, dst []kafkax.Record, buf []byte) ([]kafkax.Record, []byte, error) {
			return en.AppendLogs(dst, buf, ld)
		}
	}
	if rej := s.export(r.Context(), transportHTTP, sig, items, encode); rej != nil {
		return rej
	}
	s.m.bytes[transportHTTP][sig].Add(float64(len(body)))
	w.Header().Set("Content-Type", e.contentType())
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(s.okBodies[sig][e])
	return nil
}

// newOKBodies marshals the empty Export*ServiceResponse of each signal in
// each encoding, once.
func newOKBodies() (b [numSignals][2][]byte, err error) {
	type marshaler interface {
		MarshalProto() ([]byte, error)
		MarshalJSON() ([]byte, error)
	}
	for sig, m := range [numSignals]marshaler{
		ptraceotlp.NewExportResponse(), pmetricotlp.NewExportResponse(), plogotlp.NewExportResponse(),
	} {
		if b[sig][encProtobuf], err = m.MarshalProto(); err != nil {
			return b, fmt.Errorf("marshal export response: %w", err)
		}
		if b[sig][encJSON], err = m.MarshalJSON(); err != nil {
			return b, fmt.Errorf("marshal export response: %w", err)
		}
	}
	return b, nil
}

type protoJSONUnmarshaler interface {
	UnmarshalProto([]byte) error
	UnmarshalJSON([]byte) error
}

func decode(req protoJSONUnmarshaler, body []byte, e bodyEncoding) error {
	if e == encJSON {
		return req.UnmarshalJSON(body)
	}
	return req.UnmarshalProto(body)
}

func malformed(sig signal, e bodyEncoding, err error) *rejection {
	kind := "protobuf"
	if e == encJSON {
		kind = "JSON"
	}
	return reject(reasonMalformed, fmt.Sprintf("decode OTLP %s request (%s): %v", sig, kind, err), err)
}

func parseContentType(v string) (bodyEncoding, *rejection) {
	mt, _, err := mime.ParseMediaType(v)
	if err == nil {
		switch strings.ToLower(mt) {
		case contentTypeProtobuf, "application/protobuf":
			return encProtobuf, nil
		case contentTypeJSON:
			return encJSON, nil
		}
	}
	return encProtobuf, reject(reasonMediaType, fmt.Sprintf("content type %q not supported, use %s or %s", v, contentTypeProtobuf, contentTypeJSON), nil)
}

func parseContentEncoding(v string) (gzipped bool, rej *rejection) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "identity":
		return false, nil
	case "gzip", "x-gzip":
		return true, nil
	}
	return false, reject(reasonMediaType, fmt.Sprintf("content encoding %q not supported, use gzip or none", v), nil)
}

// readBody reads the request body within both size limits: MaxWireBytes as
// sent, MaxBodyBytes after decompression (so a small gzip bomb is cut off
// after MaxBodyBytes of output, not inflated). The buffer comes from a pool
// and is returned, even with a rejection, for putBody.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, gz bool) (*bytes.Buffer, *rejection) {
	if r.ContentLength > s.cfg.MaxWireBytes {
		return nil, reject(reasonTooLarge, fmt.Sprintf("request body of %d bytes exceeds the limit of %d", r.ContentLength, s.cfg.MaxWireBytes), nil)
	}
	var src io.Reader = http.MaxBytesReader(w, r.Body, s.cfg.MaxWireBytes)
	if gz {
		zr, _ := s.gzips.Get().(*gzip.Reader)
		var err error
		if zr == nil {
			zr, err = gzip.NewReader(src)
		} else {
			err = zr.Reset(src)
		}
		if err != nil {
			return nil, bodyError(err, s.cfg, "read gzip header")
		}
		defer s.gzips.Put(zr)
		src = zr
	}
	b, _ := s.bodies.Get().(*bytes.Buffer)
	if b == nil {
		b = new(bytes.Buffer)
	}
	b.Reset()
	if !gz && r.ContentLength > 0 {
		b.Grow(int(r.ContentLength))
	}
	n, err := b.ReadFrom(io.LimitReader(src, s.cfg.MaxBodyBytes+1))
	if err != nil {
		return b, bodyError(err, s.cfg, "read request body")
	}
	if n > s.cfg.MaxBodyBytes {
		return b, reject(reasonTooLarge, fmt.Sprintf("request body exceeds the limit of %d bytes after decompression", s.cfg.MaxBodyBytes), nil)
	}
	return b, nil
}

func (s *Server) putBody(b *bytes.Buffer) {
	if b.Cap() > maxPooledBuf {
		return
	}
	s.bodies.Put(b)
}

func bodyError(err error, cfg Config, what string) *rejection {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return reject(reasonTooLarge, fmt.Sprintf("request body exceeds the limit of %d bytes", cfg.MaxWireBytes), err)
	}
	var corrupt flate.CorruptInputError
	if errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &corrupt) {
		return reject(reasonMalformed, fmt.Sprintf("%s: %v", what, err), err)
	}
	// The client went away or the connection broke mid-body.
	return reject(reasonCanceled, fmt.Sprintf("%s: %v", what, err), err)
}

// writeHTTPError answers with the OTLP error shape: a google.rpc.Status in
// the request's encoding, plus Retry-After when the client should retry.
func (s *Server) writeHTTPError(w http.ResponseWriter, e bodyEncoding, rej *rejection) {
	st := &spb.Status{Code: int32(rej.reason.grpcCode()), Message: rej.msg}
	var body []byte
	if e == encJSON {
		body, _ = protojson.Marshal(st)
	} else {
		body, _ = proto.Marshal(st)
	}
	h := w.Header()
	h.Set("Content-Type", e.contentType())
	if rej.reason.retryable() {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(s.cfg.RetryAfter.Seconds()))))
	}
	w.WriteHeader(rej.reason.httpStatus())
	_, _ = w.Write(body)
}
