package enrich

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/tailcause/tailcause/enrich/join"
	"github.com/tailcause/tailcause/enrich/normalize"
	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/internal/otlpfixture"
	"github.com/tailcause/tailcause/internal/otlpkafka"
)

// TestSpanDecodeRows: the request and token_stalls rows the join and the
// row encoders make of a stream of span records are the same, value for
// value, whether the records are decoded from the wire (TracesDecoder, as
// the span fetcher does) or through pdata (DecodeTraces, Traces: the path
// before it). The stream is the benchmark's load with the fixture's
// SGLang, TGI, Triton and vLLM traces, so that stalls and steps are
// written too.
func TestSpanDecodeRows(t *testing.T) {
	l := otlpfixture.Load{Hosts: 4, Duration: 2 * time.Minute, Requests: 2000, Seed: 7}
	enc, err := otlpkafka.NewEncoder(otlpkafka.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var recs []kafkax.Record
	for _, td := range append(l.Traces(100), otlpfixture.Traces()) {
		if recs, _, err = enc.AppendTraces(recs, nil, td); err != nil {
			t.Fatal(err)
		}
	}
	var samples []normalize.Sample
	for _, md := range append(l.Metrics(), otlpfixture.Metrics()...) {
		samples = append(samples, normalize.Metrics(md).Samples...)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rows := func(decode func([]byte) (normalize.Batch, error)) (reqs, stalls [][]any) {
		t.Helper()
		j, err := join.New(join.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		j.AddSamples(append([]normalize.Sample(nil), samples...))
		re, se := newBlockEncoder(requestCols), newBlockEncoder(stallCols)
		for k, rec := range recs {
			b, err := decode(rec.Value)
			if err != nil {
				t.Fatalf("record %d: %v", k, err)
			}
			j.AddSpans(&b, join.Ref{Offset: int64(k)})
		}
		outs := j.Emit(true)
		for i := range outs {
			re.add(&requestIn{Row: &outs[i].Row, enrichedAt: now})
			for k := range outs[i].Stalls {
				se.add(&outs[i].Stalls[k])
			}
		}
		return re.block().Rows(), se.block().Rows()
	}
	wantReqs, wantStalls := rows(func(b []byte) (normalize.Batch, error) {
		td, err := normalize.DecodeTraces(b, normalize.EncodingProto)
		if err != nil {
			return normalize.Batch{}, err
		}
		return normalize.Traces(td), nil
	})
	var dec normalize.TracesDecoder
	gotReqs, gotStalls := rows(func(b []byte) (normalize.Batch, error) {
		if _, ok := normalize.TracesProto(b); !ok {
			t.Fatalf("the wire path declined a record of the load")
		}
		return dec.Record(b, normalize.EncodingProto)
	})
	if len(wantReqs) < l.Requests || len(wantStalls) == 0 {
		t.Fatalf("%d request rows (want ≥ %d), %d stall rows (want some)", len(wantReqs), l.Requests, len(wantStalls))
	}
	if diff := cmp.Diff(wantReqs, gotReqs, cmpopts.EquateNaNs()); diff != "" {
		t.Errorf("request rows (-pdata +wire):\n%s", diff)
	}
	if diff := cmp.Diff(wantStalls, gotStalls, cmpopts.EquateNaNs()); diff != "" {
		t.Errorf("stall rows (-pdata +wire):\n%s", diff)
	}
}
