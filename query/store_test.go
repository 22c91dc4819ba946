package query

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// TestIncidentStoreConformance runs one suite on every incidentStore: the
// in-memory one and the ClickHouse one the server uses. A rule stated on
// the interface that either breaks fails here.
func TestIncidentStoreConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		m := &memIncidents{}
		testIncidentStore(t, m, m.insert)
	})
	t.Run("clickhouse", func(t *testing.T) {
		st := chstoretest.Fresh(t)
		testIncidentStore(t, sqlIncidents{ClickHouse(st)}, func(rows [][]any) {
			t.Helper()
			if err := st.Insert(context.Background(), incidentCols, rows); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// testIncidentStore checks s, whose table insert writes (rows in
// incidentCols order).
func testIncidentStore(t *testing.T, s incidentStore, insert func([][]any)) {
	ctx := context.Background()
	T := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	zero := time.Unix(0, 0).UTC()
	type inc struct {
		id               string
		version          uint64
		status, top      string
		scope            map[string]string
		opened           time.Time
		winStart, winEnd time.Time
		resolved         time.Time
	}
	row := func(i inc) []any {
		var keys, vals []string
		for _, k := range []string{"model", "service"} {
			if v, ok := i.scope[k]; ok {
				keys, vals = append(keys, k), append(vals, v)
			}
		}
		return []any{i.id, i.version, i.status, "scope of " + i.id, keys, vals, "e2e_latency", 0.99, 2500.0,
			i.winStart, i.winEnd, i.winStart.Add(-time.Hour), i.winStart, i.opened, i.opened.Add(time.Duration(i.version) * time.Minute), i.resolved,
			4000.0 + float64(i.version), 1000.0, uint64(300) + i.version, uint64(3), i.top, "host=node-" + i.id,
			"backdoor-ols-hc3", "default@1", "test", fmt.Sprintf(`{"incident_id":%q,"version":%d}`, i.id, i.version)}
	}
	a1 := inc{"inc-a", 1, "firing", "gpu.power_cap", map[string]string{"model": "m1"}, T, T, T.Add(10 * time.Minute), zero}
	a2 := a1
	a2.version, a2.top = 2, "queue.saturation"
	b := inc{"inc-b", 1, "resolved", "kv_cache.preemption", map[string]string{"model": "m2", "service": "s1"}, T.Add(5 * time.Minute), T.Add(5 * time.Minute), T.Add(15 * time.Minute), T.Add(15 * time.Minute)}
	c := inc{"inc-c", 1, "firing", "gpu.xid_error", map[string]string{"model": "m1"}, T.Add(5 * time.Minute), T.Add(20 * time.Minute), T.Add(30 * time.Minute), zero}
	d := inc{"inc-d", 1, "firing", "gpu.power_cap", map[string]string{"model": "m2"}, T.Add(-3 * time.Hour), T.Add(-3 * time.Hour), T.Add(-2 * time.Hour), zero}
	// One insert per version, as the causal stage writes them; the store
	// answers with the newest.
	for _, i := range []inc{a1, b, c, d, a2} {
		insert([][]any{row(i)})
	}

	ids := func(rs []incidentRecord) string {
		var out []string
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%s/%d", r.id, r.version))
		}
		return strings.Join(out, " ")
	}
	all := incidentFilter{from: T.Add(-4 * time.Hour), to: T.Add(time.Hour), limit: 10}
	for _, c := range []struct {
		name string
		edit func(*incidentFilter)
		want string
	}{
		{"all, newest first (opened_at, then id, descending)", func(*incidentFilter) {}, "inc-c/1 inc-b/1 inc-a/2 inc-d/1"},
		{"status", func(f *incidentFilter) { f.status = "resolved" }, "inc-b/1"},
		{"top cause of the newest version", func(f *incidentFilter) { f.cause = "queue.saturation" }, "inc-a/2"},
		{"top cause of an older version only", func(f *incidentFilter) { f.cause = "gpu.power_cap" }, "inc-d/1"},
		{"model", func(f *incidentFilter) { f.model = "m1" }, "inc-c/1 inc-a/2"},
		{"service", func(f *incidentFilter) { f.service = "s1" }, "inc-b/1"},
		{"service absent from the scope", func(f *incidentFilter) { f.service = "m1" }, ""},
		{"model and status", func(f *incidentFilter) { f.model, f.status = "m2", "firing" }, "inc-d/1"},
		{"windows overlapping [T+10m, T+20m)", func(f *incidentFilter) { f.from, f.to = T.Add(10*time.Minute), T.Add(20*time.Minute) }, "inc-b/1 inc-a/2"},
		{"limit", func(f *incidentFilter) { f.limit = 1 }, "inc-c/1"},
		{"after a cursor, across a tie on opened_at", func(f *incidentFilter) {
			f.after, f.limit = &cursor{OpenedAt: T.Add(5 * time.Minute).Unix(), ID: "inc-c"}, 2
		}, "inc-b/1 inc-a/2"},
		{"after the tie", func(f *incidentFilter) { f.after = &cursor{OpenedAt: T.Add(5 * time.Minute).Unix(), ID: "inc-b"} }, "inc-a/2 inc-d/1"},
	} {
		f := all
		c.edit(&f)
		got, err := s.listIncidents(ctx, f)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if ids(got) != c.want {
			t.Errorf("%s: got [%s], want [%s]", c.name, ids(got), c.want)
		}
	}

	// Every column of a row comes back.
	got, err := s.listIncidents(ctx, incidentFilter{from: all.from, to: all.to, status: "resolved", limit: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("list resolved: %v (%v)", got, err)
	}
	r := got[0]
	gotRow := fmt.Sprintf("%s %d %s %v=%v %s %v %v [%d %d] %d %d %d %v %v %d %d %s %s", r.id, r.version, r.status, r.scopeKeys, r.scopeValues, r.signal,
		r.quantile, r.thresholdMS, r.windowStart.Unix(), r.windowEnd.Unix(), r.opened.Unix(), r.updated.Unix(), r.resolved.Unix(),
		r.observedP99MS, r.baselineP99MS, r.requests, r.tailRequests, r.topCause, r.topEntity)
	wantRow := fmt.Sprintf("inc-b 1 resolved [model service]=[m2 s1] e2e_latency 0.99 2500 [%d %d] %d %d %d 4001 1000 301 3 kv_cache.preemption host=node-inc-b",
		b.winStart.Unix(), b.winEnd.Unix(), b.opened.Unix(), b.opened.Add(time.Minute).Unix(), b.resolved.Unix())
	if gotRow != wantRow {
		t.Errorf("row\n got %s\nwant %s", gotRow, wantRow)
	}

	for _, c := range []struct {
		id      string
		version uint64
		ok      bool
	}{{"inc-a", 2, true}, {"inc-d", 1, true}, {"inc-none", 0, false}} {
		v, payload, ok, err := s.incident(ctx, c.id)
		want := ""
		if c.ok {
			want = fmt.Sprintf(`{"incident_id":%q,"version":%d}`, c.id, c.version)
		}
		if err != nil || ok != c.ok || v != c.version || string(payload) != want {
			t.Errorf("incident(%s) = %d, %q, %v (%v); want %d, %q, %v", c.id, v, payload, ok, err, c.version, want, c.ok)
		}
	}
}

// TestRequestStoreConformance runs one suite on every requestStore: the
// in-memory one and the ClickHouse one the P99 routes use.
func TestRequestStoreConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		m := &memRequests{}
		testRequestStore(t, m, m.insert)
	})
	t.Run("clickhouse", func(t *testing.T) {
		st := chstoretest.Fresh(t)
		testRequestStore(t, sqlRequests{ClickHouse(st)}, func(rows [][]any) {
			t.Helper()
			if err := st.Insert(context.Background(), requestCols, rows); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func testRequestStore(t *testing.T, s requestStore, insert func([][]any)) {
	ctx := context.Background()
	T := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	var rows [][]any
	add := func(r reqFix) { rows = append(rows, requestRow(r)) }
	for i := range 10 {
		r := reqFix{uid: fmt.Sprintf("a%d", i), trace: "t-a", model: "m1", service: "s1", host: "h1", gpu: "g1", engine: "0",
			start: T.Add(time.Duration(i) * 6 * time.Second), e2e: 100 * float64(i+1), ttft: 10 * float64(i+1)}
		if i >= 5 {
			r.host, r.gpu, r.start = "h2", "g2", T.Add(time.Minute+time.Duration(i-5)*6*time.Second)
		}
		if i == 3 || i == 7 {
			r.errFlag = 1
		}
		add(r)
	}
	nan := math.NaN()
	add(reqFix{uid: "a-nan", trace: "t-a", model: "m1", service: "s1", host: "h1", gpu: "g1", engine: "0", start: T.Add(10 * time.Second), e2e: nan, ttft: 5})
	add(reqFix{uid: "b0", trace: "t-b", model: "m2", service: "s2", host: "h3", gpu: "g3", engine: "0", start: T.Add(2 * time.Minute), e2e: 50, ttft: 5})
	add(reqFix{uid: "b1", trace: "t-b", model: "m2", service: "s2", host: "h3", gpu: "g3", engine: "0", start: T.Add(2*time.Minute + 5*time.Second), e2e: 60, ttft: 6})
	add(reqFix{uid: "c0", trace: "t-c", model: "m3", service: "s2", host: "h4", gpu: "g4", engine: "1", start: T.Add(3 * time.Minute), e2e: 60, ttft: 6})
	add(reqFix{uid: "old", trace: "t-o", model: "m1", service: "s1", host: "h1", gpu: "g1", engine: "0", start: T.Add(-time.Hour), e2e: 9999, ttft: 999})
	insert(rows)
	insert(rows[:3]) // delivered twice: one request each

	show := func(gs []p99Group) string {
		var out []string
		for _, g := range gs {
			k := strings.Join(g.key, "/")
			if !g.minute.IsZero() {
				k = g.minute.UTC().Format("15:04")
			}
			out = append(out, fmt.Sprintf("%s n=%d e=%d %g/%g/%g", k, g.requests, g.errors, g.p50, g.p99, g.max))
		}
		return strings.Join(out, "; ")
	}
	all := p99Query{col: "e2e_ms", from: T, to: T.Add(5 * time.Minute), limit: 10}
	for _, c := range []struct {
		name     string
		byMinute bool
		edit     func(*p99Query)
		want     string
	}{
		{"by model: slowest P99 first, ties by key", false, func(q *p99Query) { q.keyCols = []string{"model"} },
			"m1 n=10 e=2 600/1000/1000; m2 n=2 e=0 60/60/60; m3 n=1 e=0 60/60/60"},
		{"by host, NaN excluded", false, func(q *p99Query) { q.keyCols = []string{"host"} },
			"h2 n=5 e=1 800/1000/1000; h1 n=5 e=1 300/500/500; h3 n=2 e=0 60/60/60; h4 n=1 e=0 60/60/60"},
		{"by host on ttft: finite there", false, func(q *p99Query) { q.keyCols, q.col = []string{"host"}, "ttft_ms" },
			"h2 n=5 e=1 80/100/100; h1 n=6 e=1 30/50/50; h3 n=2 e=0 6/6/6; h4 n=1 e=0 6/6/6"},
		{"by host and gpu, filtered by model", false, func(q *p99Query) {
			q.keyCols, q.f = []string{"host", "gpu"}, filter{cols: []string{"model"}, vals: []any{"m1"}}
		}, "h2/g2 n=5 e=1 800/1000/1000; h1/g1 n=5 e=1 300/500/500"},
		{"limit", false, func(q *p99Query) { q.keyCols, q.limit = []string{"host"}, 2 }, "h2 n=5 e=1 800/1000/1000; h1 n=5 e=1 300/500/500"},
		{"per minute, oldest first", true, func(*p99Query) {},
			"10:00 n=5 e=1 300/500/500; 10:01 n=5 e=1 800/1000/1000; 10:02 n=2 e=0 60/60/60; 10:03 n=1 e=0 60/60/60"},
		{"per minute, filtered by two columns", true, func(q *p99Query) {
			q.f = filter{cols: []string{"service", "host"}, vals: []any{"s2", "h4"}}
		}, "10:03 n=1 e=0 60/60/60"},
		{"per minute, [from, to) in whole seconds", true, func(q *p99Query) { q.from, q.to = T.Add(time.Minute), T.Add(2*time.Minute) },
			"10:01 n=5 e=1 800/1000/1000"},
		{"per minute, limit", true, func(q *p99Query) { q.limit = 1 }, "10:00 n=5 e=1 300/500/500"},
	} {
		q := all
		c.edit(&q)
		var got []p99Group
		var err error
		if c.byMinute {
			got, err = s.minuteSeries(ctx, q)
		} else {
			got, err = s.p99By(ctx, q)
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if show(got) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, show(got), c.want)
		}
	}
}

// TestLookupStoreConformance runs one suite on every lookupStore: the
// in-memory one and the ClickHouse one drill-down and the exemplars use.
func TestLookupStoreConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		m := &memRequests{}
		testLookupStore(t, m, m.insert, m.insertStalls)
	})
	t.Run("clickhouse", func(t *testing.T) {
		st := chstoretest.Fresh(t)
		put := func(tbl chstore.Table) func([][]any) {
			return func(rows [][]any) {
				t.Helper()
				if err := st.Insert(context.Background(), tbl, rows); err != nil {
					t.Fatal(err)
				}
			}
		}
		testLookupStore(t, sqlRequests{ClickHouse(st)}, put(requestCols), put(stallCols))
	})
}

func testLookupStore(t *testing.T, s lookupStore, insert, insertStalls func([][]any)) {
	ctx := context.Background()
	T := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	fix := func(uid, trace string, at time.Duration) reqFix {
		return reqFix{uid: uid, trace: trace, model: "m1", service: "s1", host: "h1", gpu: "g1", engine: "0",
			start: T.Add(at), e2e: 800, ttft: 100, kvMax: 0.5, waiting: 3}
	}
	u1 := fix("u1", "t1", 10*time.Second)
	u1.errFlag = 1
	var rows [][]any
	for _, r := range []reqFix{u1, fix("u2", "t1", 5*time.Second), fix("u3", "t2", 20*time.Second), fix("u-late", "t1", 2*time.Hour)} {
		rows = append(rows, requestRow(r))
	}
	insert(rows)
	insert(rows) // delivered twice
	stall := func(uid, model string, token uint32, at time.Duration) []any {
		st0 := uint64(T.Add(at).UnixNano())
		return []any{uid, "t1", "s1", model, "h1", "pod-h1", "0", "g1", token, st0, st0 + 250e6, T.Add(at).Truncate(time.Second),
			250.0, float64(token % 3), uint32(1), 0.97, uint32(4), 1400.0, uint32(0), 1500.0, []string{"preemption"}}
	}
	stalls := [][]any{stall("u1", "m1", 50, 14*time.Second), stall("u1", "m1", 10, 11*time.Second), stall("u1", "m1", 30, 12*time.Second),
		stall("u1", "m2", 20, 12*time.Second), stall("u2", "m1", 5, 6*time.Second), stall("u1", "m1", 70, 90*time.Second)}
	insertStalls(stalls)
	insertStalls(stalls[:2])

	f, ok, err := s.request(ctx, "u1", T, T.Add(time.Minute))
	if err != nil || !ok {
		t.Fatalf("request u1: %v, %v", ok, err)
	}
	got := fmt.Sprintf("%s %s %s %s %s %s %s %s %s %s %s %d %d %d %s %v %d/%d/%d/%d %s %v/%v/%v %d %v %d %s/%s %d %v %d %v %v=%v %v",
		f.uid, f.traceID, f.spanID, f.requestID, f.source, f.service, f.model, f.host, f.pod, f.engine, f.gpu,
		f.startNs, f.endNs, f.errFlag, f.finishReason, f.lat, f.prompt, f.completion, f.cached, f.maxTokens,
		f.timelineSource, f.itl50, f.itl99, f.itlMax, f.stallCount, f.stallMS, f.retracts, f.engineMatch, f.gpuMatch,
		f.throttle, f.throttleAge, f.xid, f.xidAge, f.attrKeys, f.attrValues, f.features)
	ns := uint64(u1.start.UnixNano())
	want := fmt.Sprintf("u1 t1 span-u1 rid-u1 vllm s1 m1 h1 pod-h1 0 g1 %d %d 1 stop %v 512/128/64/256 steps 18/40/55 1 30 0 pod/pod 0 900 0 900 [http.route]=[/v1/chat/completions] %v",
		ns, ns+800e6, [8]float64{800, 100, 5, 95, 700, 795, 20, 0},
		[]float64{4, 100, 3, 100, 0.5 - 0.05, 100, 0.5, 100, 0, 200, math.NaN(), math.NaN(), 1500, 300, 900, 300, 1400, 900, 1410, 900, 1400.0 / 1410.0, 900, 61, 900, 300, 900, 0.4, 900, 1e9, 900})
	if got != want {
		t.Errorf("request u1\n got %s\nwant %s", got, want)
	}
	for _, c := range []struct {
		uid      string
		from, to time.Time
	}{{"u1", T.Add(11 * time.Second), T.Add(time.Minute)}, {"u1", T, T.Add(10 * time.Second)}, {"nope", T, T.Add(time.Hour)}} {
		if _, ok, err := s.request(ctx, c.uid, c.from, c.to); err != nil || ok {
			t.Errorf("request %s in [%v, %v): found %v (%v), want none", c.uid, c.from, c.to, ok, err)
		}
	}

	showStalls := func(fs []stallFacts) string {
		var out []string
		for _, f := range fs {
			out = append(out, fmt.Sprintf("%d@%d+%d %v/%v/%d/%v/%d/%v/%d/%v%v", f.tokenIndex, (f.startNs-uint64(T.UnixNano()))/1e9, (f.endNs-f.startNs)/1e6,
				f.durationMS, f.preemptions, f.retracts, f.kvUsageMax, f.throttleReasons, f.smClockMinMHz, f.xidLast, f.enginePromptTPS, f.events))
		}
		return strings.Join(out, " ")
	}
	for _, c := range []struct {
		name     string
		from, to time.Time
		limit    int
		want     string
	}{
		{"by token index, of this request and model", T, T.Add(time.Minute), 10,
			"10@11+250 250/1/1/0.97/4/1400/0/1500[preemption] 30@12+250 250/0/1/0.97/4/1400/0/1500[preemption] 50@14+250 250/2/1/0.97/4/1400/0/1500[preemption]"},
		{"limit", T, T.Add(time.Minute), 1, "10@11+250 250/1/1/0.97/4/1400/0/1500[preemption]"},
		{"[from, to) in whole seconds", T.Add(12 * time.Second), T.Add(14 * time.Second), 10, "30@12+250 250/0/1/0.97/4/1400/0/1500[preemption]"},
	} {
		fs, err := s.stalls(ctx, "m1", "u1", c.from, c.to, c.limit)
		if err != nil {
			t.Fatalf("stalls, %s: %v", c.name, err)
		}
		if showStalls(fs) != c.want {
			t.Errorf("stalls, %s:\n got %s\nwant %s", c.name, showStalls(fs), c.want)
		}
	}

	showEx := func(fs []exemplarFacts) string {
		var out []string
		for _, f := range fs {
			out = append(out, fmt.Sprintf("%s/%s/%s/%s/%s/%s/%s/%s@%d %v/%v/%d", f.traceID, f.uid, f.spanID, f.model, f.service, f.host, f.engine, f.gpu,
				(f.startNs-uint64(T.UnixNano()))/1e9, f.e2e, f.ttft, f.errFlag))
		}
		return strings.Join(out, " ")
	}
	for _, c := range []struct {
		name   string
		traces []string
		limit  int
		want   string
	}{
		{"one trace, by start", []string{"t1"}, 10, "t1/u2/span-u2/m1/s1/h1/0/g1@5 800/100/0 t1/u1/span-u1/m1/s1/h1/0/g1@10 800/100/1"},
		{"two traces", []string{"t2", "t1"}, 10, "t1/u2/span-u2/m1/s1/h1/0/g1@5 800/100/0 t1/u1/span-u1/m1/s1/h1/0/g1@10 800/100/1 t2/u3/span-u3/m1/s1/h1/0/g1@20 800/100/0"},
		{"limit", []string{"t1", "t2"}, 1, "t1/u2/span-u2/m1/s1/h1/0/g1@5 800/100/0"},
		{"unknown trace", []string{"t9"}, 10, ""},
	} {
		fs, err := s.exemplarRequests(ctx, c.traces, T, T.Add(time.Hour), c.limit)
		if err != nil {
			t.Fatalf("exemplars, %s: %v", c.name, err)
		}
		if showEx(fs) != c.want {
			t.Errorf("exemplars, %s:\n got %s\nwant %s", c.name, showEx(fs), c.want)
		}
	}
}

// TestReportStoreConformance runs one suite on every reportStore: the
// in-memory one and the ClickHouse one the report page uses.
func TestReportStoreConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		m := &memRequests{}
		testReportStore(t, m, m.insert, m.insertGPUSamples)
	})
	t.Run("clickhouse", func(t *testing.T) {
		st := chstoretest.Fresh(t)
		put := func(tbl chstore.Table) func([][]any) {
			return func(rows [][]any) {
				t.Helper()
				if err := st.Insert(context.Background(), tbl, rows); err != nil {
					t.Fatal(err)
				}
			}
		}
		testReportStore(t, sqlRequests{ClickHouse(st)}, put(requestCols), put(gpuSampleCols))
	})
}

func testReportStore(t *testing.T, s reportStore, insert, insertGPUSamples func([][]any)) {
	ctx := context.Background()
	T := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	req := func(uid, model, host, gpu string, at time.Duration, e2e, kv float64) reqFix {
		return reqFix{uid: uid, trace: "t-" + uid, model: model, service: "s1", host: host, gpu: gpu, engine: "0",
			start: T.Add(at), e2e: e2e, ttft: 10, kvMax: kv, waiting: 2}
	}
	var fs []reqFix
	for i := range 4 { // the baseline: one request a minute on h1
		fs = append(fs, req(fmt.Sprintf("b%d", i), "m1", "h1", "g1", time.Duration(i+1)*time.Minute, 100*float64(i+1), 0.5))
	}
	kvs := []float64{0.25, 0.125, 0.5, 0.375, 0.75, 0.25, 0.5, 0.25, 1.0, 0.25}
	for i := range 10 { // the window: even on a one-GPU pod of h1, odd on h2's tensor-parallel engine (gpu '')
		at := 10*time.Minute + time.Duration(i)*10*time.Second
		if i >= 5 {
			at = 11*time.Minute + time.Duration(i-5)*10*time.Second
		}
		host, gpu := "h1", "g1"
		if i%2 == 1 {
			host, gpu = "h2", ""
		}
		fs = append(fs, req(fmt.Sprintf("w%d", i), "m1", host, gpu, at, 1000+100*float64(i), kvs[i]))
	}
	fs = append(fs, req("nan", "m1", "h1", "g1", 12*time.Minute, math.NaN(), 0.5), req("other", "m2", "h3", "g3", 10*time.Minute, 5000, 0.9))
	var rows [][]any
	for _, f := range fs {
		rows = append(rows, requestRow(f))
	}
	insert(rows)
	insert(rows[:6]) // delivered twice
	sample := func(host, gpu, pod string) []any {
		return []any{host, gpu, pod, "DCGM_FI_DEV_GPU_UTIL", uint64(T.UnixNano()), T, 1.0}
	}
	insertGPUSamples([][]any{sample("h2", "GPU-7", "pod-h2"), sample("h2", "GPU-8", "pod-elsewhere"), sample("h1", "g1", "pod-h1")})

	m1 := map[string]string{"model": "m1"}
	base, win := interval{T, T.Add(10 * time.Minute)}, interval{T.Add(10 * time.Minute), T.Add(20 * time.Minute)}
	showCDF := func(c cdf) string { return fmt.Sprintf("n=%d %v", c.n, c.values) }
	for _, c := range []struct {
		name      string
		scope     map[string]string
		base, win interval
		want      string
	}{
		{"scope, finite values, FINAL", m1, base, win, "n=4 [300 400 400] | n=10 [1500 1900 1900]"},
		{"no baseline", m1, interval{time.Unix(0, 0), time.Unix(0, 0)}, win, "n=0 [] | n=10 [1500 1900 1900]"},
		{"every model", nil, base, win, "n=4 [300 400 400] | n=11 [1500 5000 5000]"},
		{"[start, end) in whole seconds", m1, interval{T.Add(2 * time.Minute), T.Add(4 * time.Minute)}, interval{T.Add(11 * time.Minute), T.Add(11*time.Minute + 30*time.Second)},
			"n=2 [300 300 300] | n=3 [1600 1700 1700]"},
	} {
		b, w, err := s.distributions(ctx, "e2e_ms", c.scope, c.base, c.win, []float64{0.5, 0.99, 1})
		if err != nil {
			t.Fatalf("distributions, %s: %v", c.name, err)
		}
		if got := showCDF(b) + " | " + showCDF(w); got != c.want {
			t.Errorf("distributions, %s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}

	showSeries := func(ps []seriesPoint) string {
		var out []string
		for _, p := range ps {
			out = append(out, fmt.Sprintf("%s %v %v", p.minute.UTC().Format("15:04"), p.p99, p.signal))
		}
		return strings.Join(out, "; ")
	}
	kv := causeSignal{"kv_usage_max", "KV cache usage (max per request)"}
	for _, c := range []struct {
		name     string
		scope    map[string]string
		from, to time.Time
		sig      causeSignal
		entity   map[string]string
		limit    int
		want     string
	}{
		{"signal on a one-GPU pod's GPU", m1, T, T.Add(20 * time.Minute), kv, map[string]string{"host": "h1", "gpu": "g1"}, 10,
			"10:01 100 0.5; 10:02 200 0.5; 10:03 300 0.5; 10:04 400 0.5; 10:10 1400 0.5; 10:11 1900 0.75"},
		{"signal on a GPU of a tensor-parallel engine (by its pod in gpu_samples)", m1, T, T.Add(20 * time.Minute), kv, map[string]string{"host": "h2", "gpu": "GPU-7"}, 10,
			"10:01 100 NaN; 10:02 200 NaN; 10:03 300 NaN; 10:04 400 NaN; 10:10 1400 0.25; 10:11 1900 0.25"},
		{"a GPU named with its engine: no tensor-parallel rule", m1, T.Add(10 * time.Minute), T.Add(20 * time.Minute), kv, map[string]string{"host": "h2", "gpu": "GPU-7", "engine": "0"}, 10,
			"10:10 1400 NaN; 10:11 1900 NaN"},
		{"compound signal on a host", m1, T.Add(10 * time.Minute), T.Add(20 * time.Minute), causeSignal{"running_at_arrival + waiting_at_arrival", "x"}, map[string]string{"host": "h2"}, 10,
			"10:10 1400 6; 10:11 1900 6"},
		{"requests signal without a culprit", nil, T.Add(10 * time.Minute), T.Add(20 * time.Minute), causeSignal{"toFloat64(1)", "requests"}, nil, 10,
			"10:10 5000 6; 10:11 1900 5"},
		{"requests signal on an entity", m1, T.Add(10 * time.Minute), T.Add(20 * time.Minute), causeSignal{"toFloat64(1)", "requests"}, map[string]string{"host": "h1"}, 10,
			"10:10 1400 3; 10:11 1900 2"},
		{"limit", m1, T, T.Add(20 * time.Minute), kv, nil, 2, "10:01 100 0.5; 10:02 200 0.5"},
	} {
		got, err := s.series(ctx, "e2e_ms", c.scope, c.from, c.to, c.sig, c.entity, c.limit)
		if err != nil {
			t.Fatalf("series, %s: %v", c.name, err)
		}
		if showSeries(got) != c.want {
			t.Errorf("series, %s:\n got %s\nwant %s", c.name, showSeries(got), c.want)
		}
	}
}
