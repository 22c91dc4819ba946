package sink

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// HTTP exports over OTLP/HTTP with protobuf bodies: POST <base>/v1/traces
// and <base>/v1/metrics.
type HTTP struct {
	tracesURL  string
	metricsURL string
	client     *http.Client
	// Retry bounds retries of retryable failures (default DefaultRetry()).
	Retry Retry
}

// NewHTTP takes the base endpoint (http://host:4318); a URL already ending
// in /v1/traces or /v1/metrics is accepted and its base used. A nil client
// gets one with a 30s timeout.
func NewHTTP(endpoint string, client *http.Client) (*HTTP, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("otlp http endpoint %q: want http(s)://host:port[/path]", endpoint)
	}
	base := strings.TrimSuffix(endpoint, "/")
	for _, suf := range []string{"/v1/traces", "/v1/metrics"} {
		base = strings.TrimSuffix(base, suf)
	}
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	return &HTTP{tracesURL: base + "/v1/traces", metricsURL: base + "/v1/metrics", client: client, Retry: DefaultRetry()}, nil
}

// Traces posts td.
func (h *HTTP) Traces(ctx context.Context, td ptrace.Traces) error {
	body, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		return fmt.Errorf("marshal traces: %w", err)
	}
	return h.post(ctx, h.tracesURL, body)
}

// Metrics posts md.
func (h *HTTP) Metrics(ctx context.Context, md pmetric.Metrics) error {
	body, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	if err != nil {
		return fmt.Errorf("marshal metrics: %w", err)
	}
	return h.post(ctx, h.metricsURL, body)
}

func (h *HTTP) post(ctx context.Context, target string, body []byte) error {
	wait := h.Retry.Backoff
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("post %s: %w", target, err)
		}
		req.Header.Set("Content-Type", "application/x-protobuf")
		resp, err := h.client.Do(req)
		retryable := true
		if err == nil {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			switch {
			case resp.StatusCode/100 == 2:
				return nil
			case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusBadGateway,
				resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusGatewayTimeout:
				if s, e := strconv.Atoi(resp.Header.Get("Retry-After")); e == nil && s > 0 {
					wait = time.Duration(s) * time.Second
				}
			default:
				retryable = false
			}
			err = fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
		}
		if ctx.Err() != nil {
			return fmt.Errorf("post %s: %w", target, ctx.Err())
		}
		if !retryable || attempt >= max(1, h.Retry.Attempts) {
			return fmt.Errorf("post %s (attempt %d): %w", target, attempt, err)
		}
		if err := sleep(ctx, wait); err != nil {
			return fmt.Errorf("post %s: %w", target, err)
		}
		wait *= 2
	}
}
