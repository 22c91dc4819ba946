package ingest_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tailcause/tailcause/ingest"
	"github.com/tailcause/tailcause/internal/kafkax/kafkaxtest"
)

// rawCodec sends and receives a message's bytes as they are, so that a test
// can send a payload no pdata value is built for.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// attributeBomb is an ExportTraceServiceRequest of about n bytes: one
// resource with n/2 empty attributes (2 bytes each on the wire, a KeyValue
// each once decoded). gzip makes it a few KB.
func attributeBomb(n int) []byte {
	attrs := bytes.Repeat([]byte{0x0a, 0x00}, (n-16)/2) // Resource.attributes, empty KeyValue
	res := appendVarint([]byte{0x0a}, uint64(len(attrs)))
	res = append(res, attrs...) // ResourceSpans.resource
	rs := appendVarint([]byte{0x0a}, uint64(len(res)))
	return append(rs, res...) // ExportTraceServiceRequest.resource_spans
}

const traceExport = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

func sendRaw(ctx context.Context, conn *grpc.ClientConn, msg []byte, token string) error {
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	var reply []byte
	return conn.Invoke(ctx, traceExport, &msg, &reply, grpc.ForceCodec(rawCodec{}), grpc.UseCompressor("gzip"))
}

const ingestChildEnv = "TAILCAUSE_INGEST_CHILD"

// TestIngestChild is not a test: it is the ingest server whose memory
// TestGRPCBombRefusedBeforeDecode measures. It prints its gRPC address and
// serves until its standard input closes.
func TestIngestChild(t *testing.T) {
	if os.Getenv(ingestChildEnv) == "" {
		t.Skip("helper process of TestGRPCBombRefusedBeforeDecode; runs only when started by it")
	}
	cfg := testConfig()
	cfg.Token = os.Getenv(ingestChildEnv)
	cfg.HTTPAddr = ""
	srv, err := ingest.New(cfg, &kafkaxtest.Producer{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	fmt.Println("grpc", srv.GRPCAddr().String())
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the parent closes it
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
}

// peakRSS is a process's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/pid/status")
	return 0
}

// bombBound is what three refused bombs may add to the server's peak RSS:
// half of one inflated message, so not even one was inflated (let alone
// decoded: decoding one took 1.4 GB).
const bombBound = 8 << 20

// TestGRPCBombRefusedBeforeDecode: three unauthenticated OTLP/gRPC requests
// at once, each ~16 KB on the wire (gzip of 16 MiB of empty attributes,
// just within MaxBodyBytes), are refused with Unauthenticated while the
// server's peak RSS grows by less than bombBound (8 MiB). Decoded before the
// token check, one such request took the server from 32 MB to 1.42 GB and
// three to 3.0 GB. As a control, one such bomb sent with the token is
// decoded and does move the peak past the bound.
func TestGRPCBombRefusedBeforeDecode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a subprocess")
	}
	const token = "bomb-test-token-0123456789"
	cmd := exec.Command(os.Args[0], "-test.run=^TestIngestChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), ingestChildEnv+"="+token)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	var addr string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "grpc "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatal("the child did not say its address")
	}
	go func() {
		for sc.Scan() {
		}
	}()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(32<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Warm the connection and the server's code paths with a small request.
	if err := sendRaw(ctx, conn, attributeBomb(1024), token); err != nil {
		t.Fatalf("small authorized request: %v", err)
	}

	bomb := attributeBomb(16 << 20)
	before := peakRSS(t, cmd.Process.Pid)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() { errs[i] = sendRaw(ctx, conn, bomb, "") })
	}
	wg.Wait()
	after := peakRSS(t, cmd.Process.Pid)
	for i, err := range errs {
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("bomb %d: %v, want Unauthenticated", i, err)
		}
	}
	t.Logf("server peak RSS %d MiB before, %d MiB after three refused %d-byte bombs", before>>20, after>>20, len(bomb))
	if after-before > bombBound {
		t.Errorf("peak RSS grew by %d MiB, bound %d MiB: the bombs were read before the token check", (after-before)>>20, bombBound>>20)
	}

	// The control: the measurement sees a decode. Trace exports are kept
	// as bytes (traceswire.go), not grown into a pdata tree, so the control
	// is one bomb of the same size, authorized: read, inflated and copied,
	// it holds twice its size at least.
	if err := sendRaw(ctx, conn, bomb, token); err != nil {
		t.Fatalf("authorized bomb: %v", err)
	}
	if ctrl := peakRSS(t, cmd.Process.Pid); ctrl-after <= bombBound {
		t.Errorf("an authorized %d-byte bomb moved the peak RSS by only %d MiB: the measurement cannot see a decode", len(bomb), (ctrl-after)>>20)
	}
}

// TestDecodeBudget: the request bytes being decoded at once are bounded
// across both transports. A gRPC request reserves MaxBodyBytes when it is
// admitted, so while one is held no second gRPC request fits, nor an HTTP
// body larger than what is left; both get retryable overload answers; a
// small body fits; and gRPC is admitted again once the first is done.
func TestDecodeBudget(t *testing.T) {
	p := &kafkaxtest.Producer{Block: make(chan struct{}), Started: make(chan struct{}, 1)}
	ts := start(t, p, func(c *ingest.Config) { c.MaxBodyBytes, c.MaxDecodeBytes = 1<<20, 1<<20+512<<10 })
	client := ptraceotlp.NewGRPCClient(ts.conn)
	first := make(chan error, 1)
	go func() {
		_, err := client.Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(vllmTraces()))
		first <- err
	}()
	<-p.Started
	_, err := client.Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(vllmTraces()))
	if status.Code(err) != codes.ResourceExhausted || retryDelay(err) == 0 || !strings.Contains(err.Error(), "decoded") {
		t.Errorf("second gRPC request: %v, want ResourceExhausted with RetryInfo naming the decode budget", err)
	}
	big := marshalTraces(t, vllmTraces())
	for len(big) < 600<<10 { // over the 512 KiB left
		big = append(big, marshalTraces(t, vllmTraces())...)
	}
	resp, body := ts.post(t, ingest.PathTraces, "application/x-protobuf", big)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("HTTP body over the budget left: %d %s, want 429 with Retry-After", resp.StatusCode, body)
	}
	// A small body fits what is left: admitted, it reaches the producer.
	small := make(chan int, 1)
	go func() {
		resp, _ := ts.post(t, ingest.PathTraces, "application/x-protobuf", marshalTraces(t, vllmTraces()))
		small <- resp.StatusCode
	}()
	select {
	case <-p.Started:
	case code := <-small:
		t.Errorf("small HTTP body within the budget left: %d before reaching Kafka", code)
	case <-time.After(2 * time.Second):
		t.Error("small HTTP body within the budget left: not written to Kafka")
	}
	close(p.Block)
	if code := <-small; code != http.StatusOK {
		t.Errorf("small HTTP body: %d", code)
	}
	if err := <-first; err != nil {
		t.Errorf("first gRPC request: %v", err)
	}
	if _, err := client.Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(vllmTraces())); err != nil {
		t.Errorf("gRPC after the first is done: %v", err)
	}
}
