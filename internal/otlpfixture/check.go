package otlpfixture

import (
	"context"
	"math"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

type reqRow struct {
	running, waiting, runningAge, kvMax, pre, prefix, smMin, smAge, temp float64
	reasons                                                              uint32
	engineMatch, gpuMatch, gpu, engine, source                           string
	prompt                                                               int64
	ttft, tpot                                                           float64
}

func readRequest(t testing.TB, conn driver.Conn, uid string) reqRow {
	t.Helper()
	var r reqRow
	err := conn.QueryRow(context.Background(), `SELECT running_at_arrival, waiting_at_arrival, running_age_ms, kv_usage_max,
		preemptions_during, prefix_hit_ratio, sm_clock_min_mhz, sm_clock_age_ms, gpu_temp_max_c, throttle_reasons,
		engine_match, gpu_match, gpu, engine, source, prompt_tokens, ttft_ms, tpot_ms
		FROM requests FINAL WHERE uid = ?`, uid).Scan(&r.running, &r.waiting, &r.runningAge, &r.kvMax, &r.pre, &r.prefix,
		&r.smMin, &r.smAge, &r.temp, &r.reasons, &r.engineMatch, &r.gpuMatch, &r.gpu, &r.engine, &r.source, &r.prompt, &r.ttft, &r.tpot)
	if err != nil {
		t.Fatalf("read request %s: %v", uid, err)
	}
	return r
}

func eq(t testing.TB, name string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) || math.IsNaN(got) != math.IsNaN(want) {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}

// CheckRows asserts the enriched rows the fixture must produce.
func CheckRows(t testing.TB, conn driver.Conn) {
	t.Helper()
	// Request 7 (start T0+61 s, end T0+64 s), worked by hand: as-of engine
	// scrape at 60 s (running 4, waiting 6, 1000 ms old); KV max 0.60; the
	// counter interval (60,70] holds 3 preemptions and 400/1000 prefix
	// hits, of which the request's 3 s take 3/10 (0.9 preemptions, the same
	// 0.4 hit ratio); the DCGM scrape at 60 s shows 1410 MHz with
	// hw_thermal (0x40) and 87 °C, 1000 ms old.
	r := readRequest(t, conn, UID(7))
	eq(t, "running", r.running, 4)
	eq(t, "waiting", r.waiting, 6)
	eq(t, "running_age_ms", r.runningAge, 1000)
	eq(t, "kv_usage_max", r.kvMax, 0.60)
	eq(t, "preemptions_during", r.pre, 0.9)
	eq(t, "prefix_hit_ratio", r.prefix, 0.4)
	eq(t, "sm_clock_min", r.smMin, 1410)
	eq(t, "sm_clock_age_ms", r.smAge, 1000)
	eq(t, "gpu_temp_max", r.temp, 87)
	if r.reasons != 0x40 || r.engineMatch != "pod" || r.gpuMatch != "pod" || r.gpu != GPU || r.engine != "0" || r.source != "vllm" || r.prompt != 1700 {
		t.Errorf("request 7: %+v", r)
	}
	eq(t, "ttft_ms", r.ttft, 250)
	eq(t, "tpot_ms", r.tpot, 2750.0/99)
	// Every request against the rules written out in Expected.
	for k := 0; k < Requests; k++ {
		e := Expected(k)
		r := readRequest(t, conn, e.UID)
		eq(t, "running", r.running, e.RunningAtArrival)
		eq(t, "kv_usage_max", r.kvMax, e.KVUsageMax)
		eq(t, "preemptions", r.pre, e.PreemptionsDuring)
		eq(t, "prefix", r.prefix, e.PrefixHitRatio)
		eq(t, "sm_clock_min", r.smMin, e.SMClockMin)
		eq(t, "sm_clock_age", r.smAge, e.SMClockAgeMs)
		if r.reasons != e.ThrottleReasons {
			t.Errorf("request %d reasons %#x want %#x", k, r.reasons, e.ThrottleReasons)
		}
	}
	// The SGLang request: a step timeline with one 600 ms stall carrying the retract.
	var src string
	var stalls uint32
	var itlMax float64
	if err := conn.QueryRow(context.Background(), "SELECT timeline_source, stall_count, itl_max_ms FROM requests FINAL WHERE uid = ?", SGLangUID()).Scan(&src, &stalls, &itlMax); err != nil {
		t.Fatal(err)
	}
	if src != "steps" || stalls != 1 {
		t.Errorf("sglang timeline %q stalls %d", src, stalls)
	}
	eq(t, "itl_max_ms", itlMax, 600)
	var events []string
	var idx uint32
	if err := conn.QueryRow(context.Background(), "SELECT token_index, events FROM token_stalls FINAL WHERE request_uid = ?", SGLangUID()).Scan(&idx, &events); err != nil {
		t.Fatal(err)
	}
	if idx != 21 || len(events) == 0 || events[0] != "retract" {
		t.Errorf("stall token %d events %v", idx, events)
	}
}
