package normalize

import (
	"math"
	"strconv"
	"strings"
)

// reqBuilder accumulates one Request from its span and the spans around it.
type reqBuilder struct {
	r  Request
	ex extras
	pb placementBuilder

	reqModel, respModel, tritonModel string
	reqID, rid, tritonReqID, respID  string

	// TGI timing fields, milliseconds (NaN when absent).
	tgiTotalMs, tgiTPOTMs float64
}

func (n *traceNormalizer) buildRequests() {
	reqs := 0
	for i := range n.refs {
		if n.refs[i].class.isRequest() {
			reqs++
		}
	}
	if reqs > 0 {
		n.out.Requests = make([]Request, 0, reqs)
	}
	for i := range n.refs {
		ref := &n.refs[i]
		if !ref.class.isRequest() {
			continue
		}
		if !n.validate(ref.span) {
			continue
		}
		n.out.Requests = append(n.out.Requests, n.request(i))
	}
	if len(n.out.Requests) == 0 {
		n.out.Requests = nil // as when none was allocated
	}
}

func (n *traceNormalizer) request(i int) Request {
	ref := &n.refs[i]
	sp := ref.span
	b := reqBuilder{tgiTotalMs: math.NaN(), tgiTPOTMs: math.NaN()}
	b.ex.kv = n.extrasScratch[:0]
	uid, traceHex, spanHex := spanUID(sp.traceID, sp.spanID)
	b.r = Request{
		UID:              uid,
		TraceID:          traceHex,
		SpanID:           spanHex,
		SpanName:         sp.name,
		Service:          ref.res.service,
		StartNs:          sp.start,
		EndNs:            sp.end,
		Error:            sp.statusError,
		E2EMs:            math.NaN(),
		TTFTMs:           math.NaN(),
		QueueMs:          math.NaN(),
		PrefillMs:        math.NaN(),
		DecodeMs:         math.NaN(),
		InferenceMs:      math.NaN(),
		KVTransferMs:     math.NaN(),
		PromptTokens:     -1,
		CompletionTokens: -1,
		CachedTokens:     -1,
		MaxTokens:        -1,
	}
	if !sp.parentID.IsEmpty() {
		b.r.ParentSpanID = sp.parentID.String()
	}

	switch ref.class {
	case classEngine:
		b.r.Source = SourceVLLM
		b.r.TimelineSource = TimelineAggregate
	case classSGLangRoot:
		b.r.Source = SourceSGLang
		b.r.TimelineSource = TimelineSteps
	case classTGIRequest:
		b.r.Source = SourceTGI
		b.r.TimelineSource = TimelineSteps
	case classTriton:
		b.r.Source = SourceTriton
		b.r.TimelineSource = TimelineEvents
	case classGenAI:
		b.r.Source = SourceGenAI
		b.r.TimelineSource = TimelineAggregate
	}

	for _, a := range sp.attrs {
		if b.sourceAttr(a.key, a.val) || b.commonAttr(a.key, a.val) {
			continue
		}
		b.ex.add(a.key, a.val)
	}

	switch ref.class {
	case classEngine:
		n.finishEngine(&b, ref)
		b.r.RequestID = b.reqID
	case classSGLangRoot:
		b.r.RequestID = firstNonEmpty(b.reqID, b.rid)
		if ref.role != "" {
			b.ex.addStr("sglang.role", ref.role)
		}
		b.r.Retracts = n.retracts(i)
	case classTGIRequest:
		n.finishTGI(&b, i)
		b.r.RequestID = b.reqID
	case classTriton:
		n.finishTriton(&b, i)
		b.r.RequestID = firstNonEmpty(b.tritonReqID, b.reqID)
	case classGenAI:
		b.r.RequestID = firstNonEmpty(b.reqID, b.respID)
	}

	b.r.Model = firstNonEmpty(b.reqModel, b.respModel, b.tritonModel, ref.res.model)
	if b.respModel != "" && b.respModel != b.r.Model {
		// The served snapshot ("gpt-4o-2024-08-06" for "gpt-4o").
		b.ex.addStr(attrResponseModel, b.respModel)
	}
	b.r.Placement = ref.res.placement
	mergePlacement(&b.r.Placement, b.pb.placement())
	if math.IsNaN(b.r.E2EMs) {
		// Every request span starts at arrival and ends at completion.
		b.r.E2EMs = nsToMs(b.r.StartNs, b.r.EndNs)
	}
	if b.r.FinishReason == "error" {
		b.r.Error = true
	}
	b.r.AttrKeys, b.r.AttrValues = b.ex.arrays()
	n.extrasScratch = b.ex.kv // arrays copied out of it; reuse for the next request
	return b.r
}

// sourceAttr takes the attributes only one source defines.
func (b *reqBuilder) sourceAttr(k string, v value) bool {
	switch b.r.Source {
	case SourceSGLang:
		switch k {
		case attrSGLangRID:
			b.rid = v.AsString()
			return true
		case attrSGLangModule:
			return true // always "sglang::request"
		}
	case SourceTGI:
		return b.tgiAttr(k, v)
	case SourceTriton:
		if k == attrTritonRequestID {
			b.tritonReqID = v.AsString()
			return true
		}
	case SourceGenAI:
		switch k {
		case attrTimeToFirstChunk:
			b.r.TTFTMs = secondsToMs(v)
			return true
		case attrResponseID:
			b.respID = v.AsString()
			return true
		}
	}
	return false
}

// commonAttr takes the attributes every source may carry.
func (b *reqBuilder) commonAttr(k string, v value) bool {
	if b.pb.attr(k, v) {
		return true
	}
	switch k {
	case attrRequestModel:
		b.reqModel = v.AsString()
	case attrResponseModel:
		b.respModel = v.AsString()
	case attrTritonModelName:
		b.tritonModel = v.AsString()
	case attrRequestID:
		b.reqID = v.AsString()
	case attrFinishReasons:
		b.r.FinishReason = firstFinishReason(v)
	case attrErrorType:
		b.r.Error = true
		return false // keep the type among the extras
	case "gen_ai.usage.prompt_tokens", "gen_ai.usage.input_tokens":
		return setCount(&b.r.PromptTokens, v)
	case "gen_ai.usage.completion_tokens", "gen_ai.usage.output_tokens":
		return setCount(&b.r.CompletionTokens, v)
	case "gen_ai.usage.cached_tokens", "gen_ai.usage.cache_read.input_tokens":
		return setCount(&b.r.CachedTokens, v)
	case attrMaxTokens:
		return setCount(&b.r.MaxTokens, v)
	default:
		if strings.HasPrefix(k, attrLatencyPrefix) {
			return b.latencyAttr(k, v)
		}
		return false
	}
	return true
}

func setCount(dst *int64, v value) bool {
	c, ok := count(v)
	if ok {
		*dst = c
	}
	return ok // unparsable counts stay visible among the extras
}

// latencyAttr maps the gen_ai.latency.* float-seconds attributes of vLLM,
// SGLang and TRT-LLM.
func (b *reqBuilder) latencyAttr(k string, v value) bool {
	var dst *float64
	switch k[len(attrLatencyPrefix):] {
	case "e2e":
		dst = &b.r.E2EMs
	case "time_to_first_token":
		dst = &b.r.TTFTMs
	case "time_in_queue":
		dst = &b.r.QueueMs
	case "time_in_model_prefill":
		// SGLang: this includes queueing (time_in_queue is not set).
		dst = &b.r.PrefillMs
	case "time_in_model_decode":
		dst = &b.r.DecodeMs
	case "time_in_model_inference":
		dst = &b.r.InferenceMs
	case "kv_cache_transfer_time":
		dst = &b.r.KVTransferMs
	default:
		return false
	}
	*dst = secondsToMs(v)
	return true
}

// finishEngine tells TRT-LLM from vLLM and reads the KV-transfer events.
func (n *traceNormalizer) finishEngine(b *reqBuilder, ref *spanRef) {
	var kvStart, kvEnd uint64
	for _, ev := range ref.span.events {
		ts := ev.ts
		switch ev.name {
		case "kv_cache_transfer_start":
			if kvStart == 0 || (ts != 0 && ts < kvStart) {
				kvStart = ts
			}
		case "kv_cache_transfer_end":
			if ts > kvEnd {
				kvEnd = ts
			}
		}
	}
	scope := strings.ToLower(ref.scope)
	trt := ref.res.trt || kvStart != 0 || kvEnd != 0 || !math.IsNaN(b.r.KVTransferMs) ||
		strings.Contains(scope, "tensorrt") || strings.Contains(scope, "trtllm")
	if !trt {
		return
	}
	b.r.Source = SourceTRTLLM
	if math.IsNaN(b.r.KVTransferMs) {
		b.r.KVTransferMs = nsToMs(kvStart, kvEnd)
	}
}

// tgiAttr parses TGI's Rust Debug duration fields. Unparsable values stay
// among the extras.
func (b *reqBuilder) tgiAttr(k string, v value) bool {
	var dst *float64
	keep := false
	switch k {
	case "total_time":
		dst = &b.tgiTotalMs
	case "queue_time":
		dst = &b.r.QueueMs
	case "inference_time":
		dst = &b.r.InferenceMs
	case "time_per_token":
		// No Request field holds TPOT: parse it to count tokens, keep it.
		dst, keep = &b.tgiTPOTMs, true
	case "generated_tokens":
		return setCount(&b.r.CompletionTokens, v)
	case "parameters":
		if mt, ok := tgiMaxNewTokens(v.AsString()); ok {
			b.r.MaxTokens = mt
		}
		return false
	default:
		return false
	}
	d, err := ParseRustDuration(v.AsString())
	if err != nil {
		return false
	}
	*dst = float64(d) / 1e6
	return !keep
}

// tgiMaxNewTokens reads max_new_tokens out of TGI's Debug-printed
// GenerateParameters ("... max_new_tokens: Some(20), ...").
func tgiMaxNewTokens(p string) (int64, bool) {
	const key = "max_new_tokens: Some("
	i := strings.Index(p, key)
	if i < 0 {
		return 0, false
	}
	rest := p[i+len(key):]
	j := strings.IndexByte(rest, ')')
	if j < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(rest[:j], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// finishTGI fills what TGI's request span leaves out from its children:
// the queued span, the prefill span of the batch it joined first, and the
// send_generation steps when all of them are in the message.
func (n *traceNormalizer) finishTGI(b *reqBuilder, i int) {
	if !math.IsNaN(b.tgiTotalMs) {
		b.r.E2EMs = b.tgiTotalMs
	}
	a := n.aux[i]
	if b.r.CompletionTokens < 0 && !math.IsNaN(b.r.InferenceMs) && b.tgiTPOTMs > 0 {
		// TGI computes time_per_token = inference_time / generated_tokens.
		if t := math.Round(b.r.InferenceMs / b.tgiTPOTMs); t >= 1 && t < 1<<31 {
			b.r.CompletionTokens = int64(t)
		}
	}
	if a == nil {
		return
	}
	if math.IsNaN(b.r.QueueMs) {
		b.r.QueueMs = a.tgiQueuedMs
	}
	for _, inf := range a.tgiInfer {
		if batch, ok := n.tgiInferOf[inf]; ok {
			if ms, ok := n.tgiPrefillMs[batch]; ok {
				b.r.PrefillMs = ms
				break
			}
		}
	}
	// Steps of one request may arrive in several messages; only when the
	// message holds all of them is the first one the first token.
	if a.tgiSteps > 0 && int64(a.tgiSteps) == b.r.CompletionTokens {
		b.r.TTFTMs = nsToMs(b.r.StartNs, a.tgiFirstEnd)
		b.r.DecodeMs = nsToMs(a.tgiFirstEnd, a.tgiLastEnd)
	}
}

// Triton timeline event names.
const (
	tritonRequestStart       = "REQUEST_START"
	tritonQueueStart         = "QUEUE_START"
	tritonComputeStart       = "COMPUTE_START"
	tritonComputeInputEnd    = "COMPUTE_INPUT_END"
	tritonComputeOutputStart = "COMPUTE_OUTPUT_START"
	tritonComputeEnd         = "COMPUTE_END"
	tritonRequestEnd         = "REQUEST_END"
)

// tritonTimes holds the first occurrence of each start-like event and the
// last of each end-like one, over the InferRequest span and its
// descendants (an ensemble has several model and compute spans).
type tritonTimes struct {
	requestStart, queueStart, computeStart, computeInputEnd uint64 // first
	computeOutputStart, computeEnd, requestEnd              uint64 // last
}

func (t *tritonTimes) add(name string, ts uint64) {
	first := func(dst *uint64) {
		if *dst == 0 || ts < *dst {
			*dst = ts
		}
	}
	last := func(dst *uint64) {
		if ts > *dst {
			*dst = ts
		}
	}
	if ts == 0 {
		return
	}
	switch name {
	case tritonRequestStart:
		first(&t.requestStart)
	case tritonQueueStart:
		first(&t.queueStart)
	case tritonComputeStart:
		first(&t.computeStart)
	case tritonComputeInputEnd:
		first(&t.computeInputEnd)
	case tritonComputeOutputStart:
		last(&t.computeOutputStart)
	case tritonComputeEnd:
		last(&t.computeEnd)
	case tritonRequestEnd:
		last(&t.requestEnd)
	}
}

// finishTriton reads the timeline events of an InferRequest and of its
// <model_name> and compute descendants, and the model attributes that live
// on the model span.
func (n *traceNormalizer) finishTriton(b *reqBuilder, i int) {
	var t tritonTimes
	addEvents := func(sp *span) {
		for _, ev := range sp.events {
			t.add(ev.name, ev.ts)
		}
	}
	addEvents(n.refs[i].span)

	var directModel, anyModel, directVer, anyVer, directName string
	if a := n.aux[i]; a != nil {
		for _, d := range a.triton {
			sp := n.refs[d].span
			addEvents(sp)
			p, _ := n.parent(d)
			direct := p == i
			attrs := sp.attrs
			if m, ok := strAttr(attrs, attrTritonModelName); ok {
				if direct && directModel == "" {
					directModel = m
				}
				if anyModel == "" {
					anyModel = m
				}
			}
			if ver, ok := strAttr(attrs, attrTritonModelVer); ok {
				if direct && directVer == "" {
					directVer = ver
				}
				if anyVer == "" {
					anyVer = ver
				}
			}
			if id, ok := strAttr(attrs, attrTritonRequestID); ok && b.tritonReqID == "" {
				b.tritonReqID = id
			}
			if direct && directName == "" && sp.name != "compute" {
				directName = sp.name
			}
		}
	}
	if b.tritonModel == "" {
		// The span below InferRequest is named after the model.
		b.tritonModel = firstNonEmpty(directModel, anyModel, directName)
	}
	if ver := firstNonEmpty(directVer, anyVer); ver != "" {
		b.ex.addStr(attrTritonModelVer, ver)
	}

	b.r.QueueMs = nsToMs(t.queueStart, t.computeStart)
	b.r.InferenceMs = nsToMs(t.computeStart, t.computeEnd)
	addMs := func(k string, ms float64) {
		if !math.IsNaN(ms) {
			b.ex.addStr(k, strconv.FormatFloat(ms, 'f', -1, 64))
		}
	}
	addMs("triton.compute_input_ms", nsToMs(t.computeStart, t.computeInputEnd))
	addMs("triton.compute_infer_ms", nsToMs(t.computeInputEnd, t.computeOutputStart))
	addMs("triton.compute_output_ms", nsToMs(t.computeOutputStart, t.computeEnd))
	addMs("triton.request_ms", nsToMs(t.requestStart, t.requestEnd))
}
