package faultlab

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/tailcause/tailcause/lab/faultlab/sink"
)

// runFile runs cfg into an OTLP-JSON-lines buffer and returns it with the
// truth JSON.
func runFile(t *testing.T, cfg Config) ([]byte, []byte) {
	t.Helper()
	var out, truth bytes.Buffer
	f := sink.NewFile(&out)
	tr, err := Run(context.Background(), cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.WriteJSON(&truth); err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), truth.Bytes()
}

// The same seed gives byte-identical output; another seed does not. The
// scenario exercises XID restarts, decoys and SGLang step spans.
func TestSameSeedSameBytes(t *testing.T) {
	cfg := scenarioConfig(t, "xid_error", 5*time.Minute, 42)
	cfg.StepSpanShare = 0.3
	cfg.Scenario.Decoys = []DecoySpec{{Kind: "gpu.temperature", Target: Target{Host: "node-3"}, Onset: "10%", Duration: "50%", Magnitude: 5}}
	a, ta := runFile(t, cfg)
	b, tb := runFile(t, cfg)
	if len(a) < 1<<20 {
		t.Fatalf("only %d bytes of output", len(a))
	}
	if !bytes.Equal(a, b) {
		t.Fatalf("same seed, different output (%d vs %d bytes)", len(a), len(b))
	}
	if !bytes.Equal(ta, tb) {
		t.Fatal("same seed, different truth")
	}
	cfg.Seed = 43
	c, tc := runFile(t, cfg)
	if bytes.Equal(a, c) || bytes.Equal(ta, tc) {
		t.Fatal("different seeds, same output")
	}
}
