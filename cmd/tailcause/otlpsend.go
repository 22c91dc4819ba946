package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// postOTLP sends one OTLP/HTTP protobuf request and checks the status, as
// an SDK exporter would.
func postOTLP(ctx context.Context, c *http.Client, url, token string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("post %s: %w", url, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("post %s: %s: %q", url, resp.Status, msg)
	}
	return nil
}

func sendTracesHTTP(ctx context.Context, c *http.Client, endpoint, token string, td ptrace.Traces) error {
	b, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		return fmt.Errorf("marshal traces: %w", err)
	}
	return postOTLP(ctx, c, endpoint+"/v1/traces", token, b)
}

func sendMetricsHTTP(ctx context.Context, c *http.Client, endpoint, token string, md pmetric.Metrics) error {
	b, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	if err != nil {
		return fmt.Errorf("marshal metrics: %w", err)
	}
	return postOTLP(ctx, c, endpoint+"/v1/metrics", token, b)
}
