package ingest_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/tailcause/tailcause/ingest"
	"github.com/tailcause/tailcause/internal/kafkax/kafkaxtest"
	"github.com/tailcause/tailcause/internal/testkit"
	"github.com/tailcause/tailcause/internal/tlsfiles"
	"github.com/tailcause/tailcause/schemas"
)

// TestOTLPOverTLS sends OTLP/HTTP (HTTP/2 and HTTP/1.1) and OTLP/gRPC over
// TLS to both listeners (certificates from tlsfiles, as --tls-cert and
// --tls-key load them), and checks that the records reach Kafka, that
// plaintext and an untrusted server certificate are refused, and that with a
// client CA (--tls-client-ca) only clients with a certificate it signed get
// in.
func TestOTLPOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t)
	srvFiles := ca.IssueFiles(t, dir, "server", "ingest", "127.0.0.1", "localhost")
	clientCert, clientKey := ca.Issue(t, "otel-collector")
	clientPair, err := tls.X509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	const token = "tls-test-token-0123456789"
	auth := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}

	run := func(t *testing.T, clientCA string) {
		serverTLS, err := tlsfiles.ServerConfig(srvFiles.Cert, srvFiles.Key, clientCA)
		if err != nil {
			t.Fatal(err)
		}
		ts, _ := startKafka(t, func(c *ingest.Config) { c.TLS = serverTLS; c.Token = token }, nil)
		brokers := ts.brokers
		httpsURL := "https://" + ts.srv.HTTPAddr().String()

		clientTLS := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
		if clientCA != "" {
			clientTLS.Certificates = []tls.Certificate{clientPair}
		}
		post := func(t *testing.T, tr *http.Transport, body []byte) (*http.Response, error) {
			t.Helper()
			req, err := http.NewRequest(http.MethodPost, httpsURL+ingest.PathTraces, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/x-protobuf")
			req.Header.Set("Authorization", "Bearer "+token)
			cl := &http.Client{Transport: tr, Timeout: 20 * time.Second}
			defer tr.CloseIdleConnections()
			resp, err := cl.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			return resp, err
		}

		// OTLP/HTTP over TLS, HTTP/2 (ALPN) and HTTP/1.1.
		td := vllmTraces()
		for _, h2 := range []bool{true, false} {
			tr := &http.Transport{TLSClientConfig: clientTLS.Clone(), ForceAttemptHTTP2: h2}
			if !h2 {
				tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
			}
			resp, err := post(t, tr, marshalTraces(t, td))
			if err != nil {
				t.Fatalf("https export (h2 %v): %v", h2, err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("https export (h2 %v): status %d", h2, resp.StatusCode)
			}
			if want := map[bool]int{true: 2, false: 1}[h2]; resp.ProtoMajor != want {
				t.Errorf("https export: protocol %s, want HTTP/%d", resp.Proto, want)
			}
		}
		// Each of the two exports wrote one record per trace.
		recs := kafkaxtest.Consume(t, brokers, schemas.TopicSpans, 6, 10*time.Second)
		perKey := map[string]int{}
		for _, r := range recs {
			perKey[string(r.Key)]++
		}
		for k := range wantSpanIDs(td) {
			if perKey[k] != 2 {
				t.Errorf("trace %s: %d records, want 2", k, perKey[k])
			}
		}

		// OTLP/gRPC over TLS.
		conn, err := grpc.NewClient(ts.srv.GRPCAddr().String(), grpc.WithTransportCredentials(credentials.NewTLS(clientTLS.Clone())))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pmetricotlp.NewGRPCClient(conn).Export(auth(ctx), pmetricotlp.NewExportRequestFromMetrics(dcgmMetrics())); err != nil {
			t.Fatalf("grpc export over TLS: %v", err)
		}
		kafkaxtest.Consume(t, brokers, schemas.TopicMetrics, 2, 10*time.Second)

		// Plaintext is refused on both listeners.
		plain := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
		defer plain.CloseIdleConnections()
		if resp, err := plain.Post("http://"+ts.srv.HTTPAddr().String()+ingest.PathTraces, "application/x-protobuf", bytes.NewReader(marshalTraces(t, td))); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("plain HTTP to the TLS listener: status %d, want 400", resp.StatusCode)
			}
		}
		pconn, err := grpc.NewClient(ts.srv.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer pconn.Close()
		if _, err := ptraceotlp.NewGRPCClient(pconn).Export(auth(ctx), ptraceotlp.NewExportRequestFromTraces(td)); err == nil {
			t.Error("plaintext gRPC to the TLS listener succeeded")
		}

		// A client that does not trust the server's CA fails the handshake.
		untrusting := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: testkit.NewCA(t).Pool(), Certificates: clientTLS.Certificates}}
		if _, err := post(t, untrusting, marshalTraces(t, td)); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
			t.Errorf("untrusted server certificate: %v, want unknown authority", err)
		}

		if clientCA == "" {
			return
		}
		// Mutual TLS: without a client certificate, or with one from another
		// CA, neither listener lets the client in.
		for name, certs := range map[string][]tls.Certificate{"no client certificate": nil, "foreign client certificate": {foreignPair(t)}} {
			noCert := &tls.Config{RootCAs: ca.Pool(), Certificates: certs}
			if resp, err := post(t, &http.Transport{TLSClientConfig: noCert, ForceAttemptHTTP2: true}, marshalTraces(t, td)); err == nil {
				t.Errorf("%s: https export got status %d, want a refused handshake", name, resp.StatusCode)
			}
			gconn, err := grpc.NewClient(ts.srv.GRPCAddr().String(), grpc.WithTransportCredentials(credentials.NewTLS(noCert)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ptraceotlp.NewGRPCClient(gconn).Export(auth(ctx), ptraceotlp.NewExportRequestFromTraces(td)); err == nil {
				t.Errorf("%s: grpc export succeeded", name)
			}
			gconn.Close()
		}
	}
	t.Run("server certificate", func(t *testing.T) { run(t, "") })
	t.Run("mutual TLS", func(t *testing.T) { run(t, srvFiles.CA) })
}

func foreignPair(t *testing.T) tls.Certificate {
	cert, key := testkit.NewCA(t).Issue(t, "intruder")
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}
