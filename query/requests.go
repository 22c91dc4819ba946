package query

import (
	"fmt"
	"net/http"
	"time"
)

// feature columns of a request row: the engine/GPU state it ran under, each
// with the column holding its staleness (as joined by the enrich stage).
var featureColumns = []struct{ name, age string }{
	{"running_at_arrival", "running_age_ms"},
	{"waiting_at_arrival", "waiting_age_ms"},
	{"kv_usage_at_arrival", "kv_usage_age_ms"},
	{"kv_usage_max", "kv_usage_age_ms"},
	{"preemptions_during", "preemptions_age_ms"},
	{"prefix_hit_ratio", "prefix_age_ms"},
	{"engine_prompt_tps", "engine_tps_age_ms"},
	{"engine_gen_tps", "engine_tps_age_ms"},
	{"sm_clock_min_mhz", "sm_clock_age_ms"},
	{"sm_clock_norm_mhz", "sm_clock_age_ms"},
	{"sm_clock_ratio", "sm_clock_age_ms"},
	{"gpu_temp_max_c", "gpu_temp_age_ms"},
	{"power_max_w", "power_age_ms"},
	{"dram_active_max", "dram_active_age_ms"},
	{"pcie_bytes_per_s_max", "pcie_age_ms"},
}

type latencyJSON struct {
	E2E        num `json:"e2e_ms"`
	TTFT       num `json:"ttft_ms"`
	Queue      num `json:"queue_ms"`
	Prefill    num `json:"prefill_ms"`
	Decode     num `json:"decode_ms"`
	Inference  num `json:"inference_ms"`
	TPOT       num `json:"tpot_ms"`
	KVTransfer num `json:"kv_transfer_ms"`
}

type tokensJSON struct {
	Prompt     int64 `json:"prompt"`
	Completion int64 `json:"completion"`
	Cached     int64 `json:"cached"`
	Max        int64 `json:"max"`
}

type timelineJSON struct {
	Source     string `json:"source"`
	ITLP50MS   num    `json:"itl_p50_ms"`
	ITLP99MS   num    `json:"itl_p99_ms"`
	ITLMaxMS   num    `json:"itl_max_ms"`
	StallCount uint32 `json:"stall_count"`
	StallMS    num    `json:"stall_ms"`
	Retracts   uint32 `json:"retracts"`
}

type featureJSON struct {
	Value num `json:"value"`
	AgeMS num `json:"age_ms"`
}

type stallJSON struct {
	TokenIndex      uint32   `json:"token_index"`
	Start           string   `json:"start"`
	End             string   `json:"end"`
	DurationMS      num      `json:"duration_ms"`
	Preemptions     num      `json:"preemptions"`
	Retracts        uint32   `json:"retracts"`
	KVUsageMax      num      `json:"kv_usage_max"`
	ThrottleReasons uint32   `json:"throttle_reasons"`
	SMClockMinMHz   num      `json:"sm_clock_min_mhz"`
	XIDLast         uint32   `json:"xid_last"`
	EnginePromptTPS num      `json:"engine_prompt_tps"`
	Events          []string `json:"events"`
}

// requestDetail is one request: identity, placement, latency breakdown,
// token timeline, joined features with their staleness, attributes and the
// token stalls.
type requestDetail struct {
	UID             string                 `json:"uid"`
	TraceID         string                 `json:"trace_id"`
	SpanID          string                 `json:"span_id"`
	RequestID       string                 `json:"request_id"`
	Source          string                 `json:"source"`
	Service         string                 `json:"service"`
	Model           string                 `json:"model"`
	Host            string                 `json:"host"`
	Pod             string                 `json:"pod"`
	Engine          string                 `json:"engine"`
	GPU             string                 `json:"gpu"`
	Start           string                 `json:"start"`
	End             string                 `json:"end"`
	Error           bool                   `json:"error"`
	FinishReason    string                 `json:"finish_reason"`
	Latency         latencyJSON            `json:"latency"`
	Tokens          tokensJSON             `json:"tokens"`
	Timeline        timelineJSON           `json:"timeline"`
	EngineMatch     string                 `json:"engine_match"`
	GPUMatch        string                 `json:"gpu_match"`
	Features        map[string]featureJSON `json:"features"`
	ThrottleReasons featureJSON            `json:"throttle_reasons"`
	XIDLast         featureJSON            `json:"xid_last"`
	Attributes      map[string]string      `json:"attributes"`
	Stalls          []stallJSON            `json:"stalls"`
	StallsTruncated bool                   `json:"stalls_truncated"`
}

// drillDown: GET /v1/requests/{uid}. The requests table is ordered by
// (model, service, start_time, uid), so a lookup by uid is bounded by a
// time range: from/to when given (at most DrillDownRange), else the last
// DrillDownRange.
func (s *Server) drillDown(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if err := known(q, "from", "to"); err != nil {
		return err
	}
	uid := r.PathValue("uid")
	if err := checkID("uid", uid); err != nil {
		return err
	}
	tr, err := optionalRange(q, s.now(), s.cfg.DrillDownRange, s.cfg.DrillDownRange)
	if err != nil {
		return err
	}
	cols := `uid, trace_id, span_id, request_id, source, service, model, host, pod, engine, gpu,
       start_ns, end_ns, error, finish_reason,
       e2e_ms, ttft_ms, queue_ms, prefill_ms, decode_ms, inference_ms, tpot_ms, kv_transfer_ms,
       prompt_tokens, completion_tokens, cached_tokens, max_tokens,
       timeline_source, itl_p50_ms, itl_p99_ms, itl_max_ms, stall_count, stall_ms, retracts,
       engine_match, gpu_match, throttle_reasons, throttle_age_ms, xid_last, xid_age_ms,
       attr_keys, attr_values`
	for _, f := range featureColumns {
		cols += ", " + f.name + ", " + f.age
	}
	rows, err := s.db.Query(r.Context(), "SELECT "+cols+`
FROM requests FINAL
WHERE start_time >= toDateTime(?) AND start_time < toDateTime(?) AND uid = ?
LIMIT 1`, tr.From.Unix(), tr.To.Unix(), uid)
	if err != nil {
		return fmt.Errorf("query request %s: %w", uid, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read request %s: %w", uid, err)
		}
		return probNotFound.new("no request %q started between %s and %s (pass from/to to look elsewhere)", uid, rfc3339(tr.From), rfc3339(tr.To))
	}
	var (
		d                             requestDetail
		startNs, endNs                uint64
		errFlag                       uint8
		lat                           [8]float64
		itl50, itl99, itlMax, stallMS float64
		throttle, xid                 uint32
		throttleAge, xidAge           float64
		keys, vals                    []string
		feat                          = make([]float64, 2*len(featureColumns))
	)
	dest := []any{&d.UID, &d.TraceID, &d.SpanID, &d.RequestID, &d.Source, &d.Service, &d.Model, &d.Host, &d.Pod, &d.Engine, &d.GPU,
		&startNs, &endNs, &errFlag, &d.FinishReason,
		&lat[0], &lat[1], &lat[2], &lat[3], &lat[4], &lat[5], &lat[6], &lat[7],
		&d.Tokens.Prompt, &d.Tokens.Completion, &d.Tokens.Cached, &d.Tokens.Max,
		&d.Timeline.Source, &itl50, &itl99, &itlMax, &d.Timeline.StallCount, &stallMS, &d.Timeline.Retracts,
		&d.EngineMatch, &d.GPUMatch, &throttle, &throttleAge, &xid, &xidAge,
		&keys, &vals}
	for i := range feat {
		dest = append(dest, &feat[i])
	}
	if err := rows.Scan(dest...); err != nil {
		return fmt.Errorf("scan request %s: %w", uid, err)
	}
	rows.Close()
	d.Start, d.End, d.Error = rfc3339(nsTime(startNs)), rfc3339(nsTime(endNs)), errFlag != 0
	d.Latency = latencyJSON{num(lat[0]), num(lat[1]), num(lat[2]), num(lat[3]), num(lat[4]), num(lat[5]), num(lat[6]), num(lat[7])}
	d.Timeline.ITLP50MS, d.Timeline.ITLP99MS, d.Timeline.ITLMaxMS, d.Timeline.StallMS = num(itl50), num(itl99), num(itlMax), num(stallMS)
	d.ThrottleReasons = featureJSON{num(throttle), num(throttleAge)}
	d.XIDLast = featureJSON{num(xid), num(xidAge)}
	d.Features = make(map[string]featureJSON, len(featureColumns))
	for i, f := range featureColumns {
		d.Features[f.name] = featureJSON{num(feat[2*i]), num(feat[2*i+1])}
	}
	d.Attributes = make(map[string]string, len(keys))
	for i := range keys {
		if i < len(vals) {
			d.Attributes[keys[i]] = vals[i]
		}
	}

	// The stalls share the request's partition (start_time is the
	// request's start, by the enrich stage's convention, or later).
	start := nsTime(startNs).Truncate(time.Second)
	srows, err := s.db.Query(r.Context(), `SELECT token_index, start_ns, end_ns, duration_ms, preemptions, retracts, kv_usage_max,
       throttle_reasons, sm_clock_min_mhz, xid_last, engine_prompt_tps, events
FROM token_stalls FINAL
WHERE model = ? AND start_time >= toDateTime(?) AND start_time < toDateTime(?) AND request_uid = ?
ORDER BY token_index
LIMIT ?`, d.Model, start.Unix(), nsTime(endNs).Unix()+1, uid, s.cfg.MaxStalls+1)
	if err != nil {
		return fmt.Errorf("query token stalls of request %s: %w", uid, err)
	}
	defer srows.Close()
	d.Stalls = []stallJSON{}
	for srows.Next() {
		var (
			st                     stallJSON
			s0, s1                 uint64
			dur, pre, kv, smc, tps float64
		)
		if err := srows.Scan(&st.TokenIndex, &s0, &s1, &dur, &pre, &st.Retracts, &kv, &st.ThrottleReasons, &smc, &st.XIDLast, &tps, &st.Events); err != nil {
			return fmt.Errorf("scan token stall: %w", err)
		}
		st.Start, st.End = rfc3339(nsTime(s0)), rfc3339(nsTime(s1))
		st.DurationMS, st.Preemptions, st.KVUsageMax, st.SMClockMinMHz, st.EnginePromptTPS = num(dur), num(pre), num(kv), num(smc), num(tps)
		if st.Events == nil {
			st.Events = []string{}
		}
		d.Stalls = append(d.Stalls, st)
	}
	if err := srows.Err(); err != nil {
		return fmt.Errorf("read token stalls: %w", err)
	}
	if len(d.Stalls) > s.cfg.MaxStalls {
		d.Stalls, d.StallsTruncated = d.Stalls[:s.cfg.MaxStalls], true
	}
	return writeJSON(w, http.StatusOK, d)
}
