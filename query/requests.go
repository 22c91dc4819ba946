package query

import (
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
	fa, ok, err := s.lookups.request(r.Context(), uid, tr.From, tr.To)
	if err != nil {
		return err
	}
	if !ok {
		return probNotFound.new("no request %q started between %s and %s (pass from/to to look elsewhere)", uid, rfc3339(tr.From), rfc3339(tr.To))
	}
	d := requestDetail{UID: fa.uid, TraceID: fa.traceID, SpanID: fa.spanID, RequestID: fa.requestID, Source: fa.source,
		Service: fa.service, Model: fa.model, Host: fa.host, Pod: fa.pod, Engine: fa.engine, GPU: fa.gpu,
		FinishReason: fa.finishReason, EngineMatch: fa.engineMatch, GPUMatch: fa.gpuMatch,
		Tokens:   tokensJSON{Prompt: fa.prompt, Completion: fa.completion, Cached: fa.cached, Max: fa.maxTokens},
		Timeline: timelineJSON{Source: fa.timelineSource, StallCount: fa.stallCount, Retracts: fa.retracts}}
	d.Start, d.End, d.Error = rfc3339(nsTime(fa.startNs)), rfc3339(nsTime(fa.endNs)), fa.errFlag != 0
	lat := fa.lat
	d.Latency = latencyJSON{num(lat[0]), num(lat[1]), num(lat[2]), num(lat[3]), num(lat[4]), num(lat[5]), num(lat[6]), num(lat[7])}
	d.Timeline.ITLP50MS, d.Timeline.ITLP99MS, d.Timeline.ITLMaxMS, d.Timeline.StallMS = num(fa.itl50), num(fa.itl99), num(fa.itlMax), num(fa.stallMS)
	d.ThrottleReasons = featureJSON{num(fa.throttle), num(fa.throttleAge)}
	d.XIDLast = featureJSON{num(fa.xid), num(fa.xidAge)}
	d.Features = make(map[string]featureJSON, len(featureColumns))
	for i, f := range featureColumns {
		d.Features[f.name] = featureJSON{num(fa.features[2*i]), num(fa.features[2*i+1])}
	}
	keys, vals := fa.attrKeys, fa.attrValues
	d.Attributes = make(map[string]string, len(keys))
	for i := range keys {
		if i < len(vals) {
			d.Attributes[keys[i]] = vals[i]
		}
	}

	// The stalls share the request's partition (start_time is the
	// request's start, by the enrich stage's convention, or later).
	start := nsTime(fa.startNs).Truncate(time.Second)
	stalls, err := s.lookups.stalls(r.Context(), d.Model, uid, start, nsTime(fa.endNs).Add(time.Second), s.cfg.MaxStalls+1)
	if err != nil {
		return err
	}
	d.Stalls = []stallJSON{}
	for _, f := range stalls {
		st := stallJSON{TokenIndex: f.tokenIndex, Retracts: f.retracts, ThrottleReasons: f.throttleReasons, XIDLast: f.xidLast, Events: f.events}
		st.Start, st.End = rfc3339(nsTime(f.startNs)), rfc3339(nsTime(f.endNs))
		st.DurationMS, st.Preemptions, st.KVUsageMax, st.SMClockMinMHz, st.EnginePromptTPS = num(f.durationMS), num(f.preemptions), num(f.kvUsageMax), num(f.smClockMinMHz), num(f.enginePromptTPS)
		if st.Events == nil {
			st.Events = []string{}
		}
		d.Stalls = append(d.Stalls, st)
	}
	if len(d.Stalls) > s.cfg.MaxStalls {
		d.Stalls, d.StallsTruncated = d.Stalls[:s.cfg.MaxStalls], true
	}
	return writeJSON(w, http.StatusOK, d)
}
