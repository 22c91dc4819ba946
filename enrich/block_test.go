package enrich

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcause/tailcause/enrich/join"
	"github.com/tailcause/tailcause/enrich/normalize"
	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/internal/otlpfixture"
)

// TestColumnarInsertRows: the rows a fleet's spans and metrics become are
// stored the same, value for value, through the sink's columnar insert
// (Store.InsertBlock of the encoders' blocks, the buffers reused from
// block to block as the sink does) and through the row insert of the
// reference rows (Store.Insert, batch.Append of each row's values: the
// path before the blocks), read back from two databases of the real
// server. The requests include NaN, -0, nil and empty arrays.
func TestColumnarInsertRows(t *testing.T) {
	ctx := context.Background()
	l := otlpfixture.Load{Hosts: 4, Duration: 2 * time.Minute, Requests: 3000, Seed: 11}
	var samples []normalize.Sample
	for _, md := range append(l.Metrics(), otlpfixture.Metrics()...) {
		samples = append(samples, normalize.Metrics(md).Samples...)
	}
	j, err := join.New(join.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	j.AddSamples(append([]normalize.Sample(nil), samples...))
	for k, td := range append(l.Traces(100), otlpfixture.Traces()) {
		b := normalize.Traces(td)
		j.AddSpans(&b, join.Ref{Offset: int64(k)})
	}
	outs := j.Emit(true)
	if len(outs) < l.Requests {
		t.Fatalf("%d joined requests, want ≥ %d", len(outs), l.Requests)
	}
	odd := outs[0]
	odd.Row.UID, odd.Row.TTFTMs, odd.Row.QueueMs, odd.Row.AttrKeys, odd.Row.AttrValues = "odd-1", math.NaN(), math.Copysign(0, -1), nil, nil
	odd2 := outs[1]
	odd2.Row.UID, odd2.Row.E2EMs, odd2.Row.AttrKeys, odd2.Row.AttrValues = "odd-2", math.Inf(1), []string{}, []string{}
	odd2.Stalls = []join.Stall{{RequestUID: "odd-2", StartNs: odd2.Row.StartNs, DurationMs: math.Copysign(0, -1), Preemptions: math.NaN()}}
	outs = append(outs, odd, odd2)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

	colStore, rowStore := chstoretest.Fresh(t), chstoretest.Fresh(t)
	const blockRows = 700 // several blocks per table, the last one short
	write := func(tb chstore.Table, e interface {
		len() int
		block() chstore.Block
		reset()
	}, refRows *[][]any, last bool) {
		t.Helper()
		if e.len() < blockRows && !last || e.len() == 0 {
			return
		}
		if err := colStore.InsertBlock(ctx, tb, e.block()); err != nil {
			t.Fatalf("columnar insert into %s: %v", tb.Name, err)
		}
		if err := rowStore.Insert(ctx, tb, *refRows); err != nil {
			t.Fatalf("row insert into %s: %v", tb.Name, err)
		}
		e.reset()
		*refRows = (*refRows)[:0]
	}
	re, se := newBlockEncoder(requestCols), newBlockEncoder(stallCols)
	var reqRef, stallRef [][]any
	for i := range outs {
		o := &outs[i]
		re.add(&requestIn{Row: &o.Row, enrichedAt: now})
		reqRef = append(reqRef, requestValuesRef(&o.Row, now))
		for k := range o.Stalls {
			se.add(&o.Stalls[k])
			stallRef = append(stallRef, stallValuesRef(&o.Stalls[k]))
		}
		last := i == len(outs)-1
		write(stallsTable, se, &stallRef, last)
		write(requestsTable, re, &reqRef, last)
	}
	ge, ee := newBlockEncoder(gpuSampleCols), newBlockEncoder(engineSampleCols)
	var gpuRef, engRef [][]any
	counters := normalize.NewCounters(1 << 16)
	for i := range samples {
		s := &samples[i]
		if s.Family == normalize.FamilyGPU {
			ge.add(s)
			gpuRef = append(gpuRef, gpuSampleValuesRef(s))
		} else {
			delta, rate := math.NaN(), math.NaN()
			if d, r, ok := counters.Observe(*s); ok {
				delta, rate = d, r
			}
			ee.add(&engineIn{Sample: s, delta: delta, rate: rate})
			engRef = append(engRef, engineSampleValuesRef(s, delta, rate))
		}
		last := i == len(samples)-1
		write(gpuSamplesTable, ge, &gpuRef, last)
		write(engineSamplesTable, ee, &engRef, last)
	}

	read := func(st *chstore.Store, table string) []string {
		t.Helper()
		rows, err := st.Conn().Query(ctx, "SELECT toString(tuple(*)) FROM "+table+" FINAL")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return out
	}
	for _, tb := range []chstore.Table{requestsTable, stallsTable, gpuSamplesTable, engineSamplesTable} {
		got, want := read(colStore, tb.Name), read(rowStore, tb.Name)
		if len(want) == 0 {
			t.Errorf("%s: no rows", tb.Name)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-row insert +columnar insert):\n%s", tb.Name, diff)
		}
	}
}
