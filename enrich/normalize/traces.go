package normalize

import (
	"fmt"
	"math"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Bounds of the trace normalizer.
const (
	// maxParentHops bounds the walk from a step span up to its request span
	// (SGLang: stage → thread → root is 2 hops; TGI: send_generation → infer
	// → request is 2). It also stops parent cycles in hostile input.
	maxParentHops = 16
	// maxRejects bounds the Rejects of one Batch; further rejects are
	// counted in Ignored["rejects_dropped"].
	maxRejects = 256
	// maxSpanNameInDetail bounds span names quoted in Reject details.
	maxSpanNameInDetail = 64
)

// Ignored reasons for spans.
const (
	IgnoredNonRequestSpan    = "non_request_span"    // no adapter claims it
	IgnoredSGLangThreadSpan  = "sglang_thread_span"  // "<label> [TP n] (host:… | pid:…)"
	IgnoredSGLangStageSpan   = "sglang_stage_span"   // tokenize, *_waiting, decode_forward, Bootstrap Room, …
	IgnoredTGIInternalSpan   = "tgi_internal_span"   // queued, batch, infer, prefill, decode (timings only)
	IgnoredTritonChildSpan   = "triton_child_span"   // <model_name>, compute (their events feed InferRequest)
	IgnoredGenAINonInference = "genai_non_inference" // execute_tool, invoke_agent, create_agent
	IgnoredRejectsDropped    = "rejects_dropped"     // rejects past maxRejects
)

// spanClass is what the adapters make of one span.
type spanClass uint8

const (
	classOther spanClass = iota
	// Request spans.
	classEngine     // vLLM / TRT-LLM llm_request, or any span with gen_ai.latency.*
	classSGLangRoot // "{role} Req {rid[:8]}"
	classTGIRequest // generate, generate_stream, chat_completions, completions
	classTriton     // InferRequest
	classGenAI      // GenAI client / gateway inference span
	// Step spans.
	classSGLangDecode  // decode_loop
	classSGLangPrefill // prefill_forward, chunked_prefill
	classTGIStep       // send_generation
	// Understood but not used as requests or steps.
	classSGLangThread
	classSGLangStage
	classTGIInternal
	classGenAINonInference
)

func (c spanClass) isRequest() bool { return c >= classEngine && c <= classGenAI }

// resInfo is what a span's resource says, computed once per resource.
type resInfo struct {
	service   string
	placement Placement
	model     string
	tgi       bool // TGI router
	trt       bool // TensorRT-LLM (trtllm-serve)
}

func newResInfo(res pcommon.Resource) *resInfo {
	ri := &resInfo{}
	var pb placementBuilder
	var reqModel, respModel, tritonModel string
	for k, v := range res.Attributes().All() {
		switch k {
		case attrServiceName:
			ri.service = v.AsString()
		case attrRequestModel:
			reqModel = v.AsString()
		case attrResponseModel:
			respModel = v.AsString()
		case attrTritonModelName:
			tritonModel = v.AsString()
		default:
			pb.attr(k, v)
		}
	}
	ri.placement = pb.placement()
	ri.model = firstNonEmpty(reqModel, respModel, tritonModel)
	ri.tgi = strings.HasPrefix(ri.service, "text-generation-inference")
	svc := strings.ToLower(ri.service)
	ri.trt = strings.Contains(svc, "trtllm") || strings.Contains(svc, "tensorrt")
	return ri
}

// spanRef is one span of the message with its context.
type spanRef struct {
	span  ptrace.Span
	res   *resInfo
	scope string
	class spanClass
	role  string // SGLang root: the role prefix of the name
}

type spanKey struct {
	trace pcommon.TraceID
	span  pcommon.SpanID
}

// reqAux is what other spans of the message say about one request.
type reqAux struct {
	triton      []int // descendant spans of an InferRequest
	tgiQueuedMs float64
	tgiInfer    []int // TGI infer spans (children of the request)
	tgiSteps    int
	tgiFirstEnd uint64
	tgiLastEnd  uint64
}

// traceNormalizer holds the state of one Traces call.
type traceNormalizer struct {
	refs  []spanRef
	index map[spanKey]int
	aux   map[int]*reqAux
	// TGI: duration of the prefill span under each batch span, and the batch
	// span each infer span is linked with (follows_from, both directions).
	tgiPrefillMs map[int]float64
	tgiInferOf   map[int]int
	// extrasScratch is reused by every request's extras.
	extrasScratch []extraKV
	out           Batch
}

// Traces normalizes the request spans of one OTLP traces message into
// Requests and Steps. Every span ends up in exactly one of Requests (request
// spans), Steps (step spans), Rejects (unusable request or step spans) or
// Ignored (everything else, by reason). SGLang retract events additionally
// produce Steps. The Batch does not alias td.
func Traces(td ptrace.Traces) Batch {
	n := traceNormalizer{}
	n.indexSpans(td)
	n.scanNonRequests()
	n.buildRequests()
	return n.out
}

func (n *traceNormalizer) indexSpans(td ptrace.Traces) {
	total := td.SpanCount()
	n.refs = make([]spanRef, 0, total)
	n.index = make(map[spanKey]int, total)
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		ri := newResInfo(rs.Resource())
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			ss := sss.At(j)
			scope := ss.Scope().Name()
			spans := ss.Spans()
			for k := 0; k < spans.Len(); k++ {
				sp := spans.At(k)
				ref := spanRef{span: sp, res: ri, scope: scope}
				ref.class, ref.role = classify(sp, ri, scope)
				key := spanKey{sp.TraceID(), sp.SpanID()}
				if _, dup := n.index[key]; !dup && !sp.SpanID().IsEmpty() {
					n.index[key] = len(n.refs)
				}
				n.refs = append(n.refs, ref)
			}
		}
	}
}

// classify decides what a span is from its own name, scope and attributes.
func classify(sp ptrace.Span, ri *resInfo, scope string) (spanClass, string) {
	name := sp.Name()
	attrs := sp.Attributes()
	if name == "InferRequest" {
		return classTriton, ""
	}
	if role, ok := sglangRootName(name); ok {
		if _, has := attrs.Get(attrSGLangRID); has {
			return classSGLangRoot, role
		}
	}
	if m, ok := attrs.Get(attrSGLangModule); ok && m.AsString() == "sglang::request" {
		role, _ := sglangRootName(name)
		return classSGLangRoot, role
	}
	if name == "llm_request" || scope == "vllm.llm_engine" {
		return classEngine, ""
	}
	if tgiRequestName(name) && (ri.tgi || strings.HasPrefix(scope, "text_generation_router") || hasTGITiming(attrs)) {
		return classTGIRequest, ""
	}
	switch name {
	case "decode_loop":
		return classSGLangDecode, ""
	case "prefill_forward", "chunked_prefill":
		return classSGLangPrefill, ""
	case "send_generation":
		return classTGIStep, ""
	}
	if ri.tgi && tgiInternalName(name) {
		return classTGIInternal, ""
	}
	if isSGLangThread(name, attrs) {
		return classSGLangThread, ""
	}
	if sglangStageName(name) {
		return classSGLangStage, ""
	}
	if op, ok := attrs.Get(attrOperationName); ok {
		if genAINonInference(op.AsString()) {
			return classGenAINonInference, ""
		}
		return classGenAI, ""
	}
	for k := range attrs.All() {
		if strings.HasPrefix(k, attrLatencyPrefix) {
			// An engine span under another name (vLLM forks, TRT-LLM).
			return classEngine, ""
		}
	}
	_, prov := attrs.Get(attrProviderName)
	_, sys := attrs.Get(attrSystem)
	if prov || sys {
		return classGenAI, ""
	}
	return classOther, ""
}

// sglangRootName parses "{role} Req {rid[:8]}"; role is empty on a unified
// server, so the name starts with a space.
func sglangRootName(name string) (role string, ok bool) {
	i := strings.Index(name, " Req ")
	if i < 0 {
		return "", false
	}
	role, rid := name[:i], name[i+len(" Req "):]
	if strings.ContainsAny(role, " \t") || rid == "" || strings.ContainsAny(rid, " \t") {
		return "", false
	}
	return role, true
}

// isSGLangThread recognises "<label> [TP n] (host:<id> | pid:<pid>)" spans.
func isSGLangThread(name string, attrs pcommon.Map) bool {
	if strings.Contains(name, "(host:") && strings.Contains(name, "pid:") {
		return true
	}
	_, label := attrs.Get(attrSGLangThreadLabel)
	_, host := attrs.Get("host_id")
	return label && host
}

func sglangStageName(name string) bool {
	switch name {
	case "tokenize", "prefill_waiting", "decode_waiting", "decode_forward",
		"prefill_transfer_kv_cache", "decode_transfer_kv_cache", "prefill_bootstrap",
		"decode_bootstrap", "dispatch", "detokenize":
		return true
	}
	return strings.HasPrefix(name, "Bootstrap Room ")
}

func tgiRequestName(name string) bool {
	switch name {
	case "generate", "generate_stream", "chat_completions", "completions":
		return true
	}
	return false
}

// hasTGITiming recognises a TGI request span whose service.name was
// changed (OTEL_SERVICE_NAME) by the Debug-duration timing fields only TGI
// records.
func hasTGITiming(attrs pcommon.Map) bool {
	for _, k := range [...]string{"total_time", "inference_time", "time_per_token"} {
		if v, ok := attrs.Get(k); ok && v.Type() == pcommon.ValueTypeStr {
			return true
		}
	}
	return false
}

func tgiInternalName(name string) bool {
	switch name {
	case "queued", "batch", "infer", "prefill", "decode":
		return true
	}
	return false
}

// genAINonInference reports GenAI operations that are not a model call.
func genAINonInference(op string) bool {
	switch op {
	case "execute_tool", "invoke_agent", "create_agent":
		return true
	}
	return false
}

func (n *traceNormalizer) ignore(reason string) {
	if n.out.Ignored == nil {
		n.out.Ignored = make(map[string]int)
	}
	n.out.Ignored[reason]++
}

func (n *traceNormalizer) reject(reason, detail string) {
	if len(n.out.Rejects) >= maxRejects {
		n.ignore(IgnoredRejectsDropped)
		return
	}
	n.out.Rejects = append(n.out.Rejects, Reject{Signal: "traces", Reason: reason, Detail: detail})
}

// validate checks the ids and timestamps of a span that is to become a
// Request or Step, rejecting it when they are unusable.
func (n *traceNormalizer) validate(sp ptrace.Span) bool {
	start, end := uint64(sp.StartTimestamp()), uint64(sp.EndTimestamp())
	switch {
	case sp.TraceID().IsEmpty() || sp.SpanID().IsEmpty():
		n.reject("no_span_id", fmt.Sprintf("span %q: empty trace or span id (trace %s span %s)",
			truncUTF8(sp.Name(), maxSpanNameInDetail), sp.TraceID(), sp.SpanID()))
		return false
	case start == 0 || end == 0:
		n.reject("no_timestamp", fmt.Sprintf("span %q (trace %s span %s): start %d end %d: zero timestamp",
			truncUTF8(sp.Name(), maxSpanNameInDetail), sp.TraceID(), sp.SpanID(), start, end))
		return false
	case end < start:
		n.reject("bad_timestamp", fmt.Sprintf("span %q (trace %s span %s): end %d before start %d",
			truncUTF8(sp.Name(), maxSpanNameInDetail), sp.TraceID(), sp.SpanID(), end, start))
		return false
	}
	return true
}

// parent returns the index of a span's parent within the message.
func (n *traceNormalizer) parent(i int) (int, bool) {
	sp := n.refs[i].span
	if sp.ParentSpanID().IsEmpty() {
		return -1, false
	}
	j, ok := n.index[spanKey{sp.TraceID(), sp.ParentSpanID()}]
	return j, ok
}

// requestOf walks parent links within the message up to the nearest
// request span. Span links are not followed: TGI batch spans link to every
// request of the batch, so a link does not name one request.
func (n *traceNormalizer) requestOf(i int) (int, bool) {
	cur := i
	for hop := 0; hop < maxParentHops; hop++ {
		j, ok := n.parent(cur)
		if !ok || j == i {
			return -1, false
		}
		if n.refs[j].class.isRequest() {
			return j, true
		}
		cur = j
	}
	return -1, false
}

func (n *traceNormalizer) auxOf(req int) *reqAux {
	if n.aux == nil {
		n.aux = make(map[int]*reqAux)
	}
	a := n.aux[req]
	if a == nil {
		a = &reqAux{tgiQueuedMs: math.NaN()}
		n.aux[req] = a
	}
	return a
}

// scanNonRequests turns step spans into Steps, counts the other non-request
// spans, and gathers what they say about their requests.
func (n *traceNormalizer) scanNonRequests() {
	for i := range n.refs {
		ref := &n.refs[i]
		switch ref.class {
		case classEngine, classSGLangRoot, classTGIRequest, classTriton, classGenAI:
			continue // buildRequests
		case classSGLangDecode:
			n.step(i, SourceSGLang, StepDecode, 1)
			n.retracts(i)
		case classSGLangPrefill:
			// The first token's time is the request's TTFT; a prefill step
			// is not counted as emitting it (chunks emit none).
			n.step(i, SourceSGLang, StepPrefill, 0)
			n.retracts(i)
		case classTGIStep:
			if req, ok := n.step(i, SourceTGI, StepDecode, 1); ok {
				a := n.auxOf(req)
				end := uint64(ref.span.EndTimestamp())
				a.tgiSteps++
				if a.tgiFirstEnd == 0 || end < a.tgiFirstEnd {
					a.tgiFirstEnd = end
				}
				if end > a.tgiLastEnd {
					a.tgiLastEnd = end
				}
			}
		case classSGLangThread:
			n.ignore(IgnoredSGLangThreadSpan)
			n.retracts(i)
		case classSGLangStage:
			n.ignore(IgnoredSGLangStageSpan)
			n.retracts(i)
		case classTGIInternal:
			n.ignore(IgnoredTGIInternalSpan)
			n.tgiInternal(i)
		case classGenAINonInference:
			n.ignore(IgnoredGenAINonInference)
		default:
			n.other(i)
		}
	}
}

// other classifies a span no adapter claims by the request it belongs to.
func (n *traceNormalizer) other(i int) {
	req, ok := n.requestOf(i)
	if !ok {
		sp := n.refs[i].span
		if _, ok := sp.Attributes().Get(attrTritonModelName); ok || hasTritonEvents(sp) {
			n.ignore(IgnoredTritonChildSpan)
			return
		}
		n.ignore(IgnoredNonRequestSpan)
		return
	}
	switch n.refs[req].class {
	case classTriton:
		n.ignore(IgnoredTritonChildSpan)
		a := n.auxOf(req)
		a.triton = append(a.triton, i)
	case classSGLangRoot:
		n.ignore(IgnoredSGLangStageSpan)
		n.retracts(i)
	case classTGIRequest:
		n.ignore(IgnoredTGIInternalSpan)
	default:
		n.ignore(IgnoredNonRequestSpan)
	}
}

// hasTritonEvents reports Triton timeline events on a span whose
// InferRequest is not in the message.
func hasTritonEvents(sp ptrace.Span) bool {
	evs := sp.Events()
	for e := 0; e < evs.Len(); e++ {
		switch evs.At(e).Name() {
		case tritonQueueStart, tritonComputeStart, tritonComputeEnd, tritonRequestStart:
			return true
		}
	}
	return false
}

// step emits a Step for span i. It returns the request index when the
// request span is in the message.
func (n *traceNormalizer) step(i int, src Source, kind StepKind, tokens int) (int, bool) {
	sp := n.refs[i].span
	if !n.validate(sp) {
		return -1, false
	}
	_, traceHex, spanHex := spanUID(sp.TraceID(), sp.SpanID())
	st := Step{
		TraceID: traceHex,
		SpanID:  spanHex,
		Source:  src,
		Kind:    kind,
		StartNs: uint64(sp.StartTimestamp()),
		EndNs:   uint64(sp.EndTimestamp()),
		Tokens:  tokens,
	}
	req, ok := n.requestOf(i)
	if ok {
		st.RequestSpanID = n.refs[req].span.SpanID().String()
	}
	n.out.Steps = append(n.out.Steps, st)
	return req, ok
}

// retracts emits a retract Step for each SGLang "retract" event on span i
// and returns how many it emitted.
func (n *traceNormalizer) retracts(i int) int {
	sp := n.refs[i].span
	evs := sp.Events()
	emitted := 0
	var reqSpanID string
	resolved := false
	for e := 0; e < evs.Len(); e++ {
		ev := evs.At(e)
		if ev.Name() != "retract" {
			continue
		}
		ts := uint64(ev.Timestamp())
		if ts == 0 || sp.TraceID().IsEmpty() || sp.SpanID().IsEmpty() {
			n.reject("no_timestamp", fmt.Sprintf("retract event on span %q (trace %s span %s): zero timestamp or id",
				truncUTF8(sp.Name(), maxSpanNameInDetail), sp.TraceID(), sp.SpanID()))
			continue
		}
		if !resolved {
			resolved = true
			if n.refs[i].class == classSGLangRoot {
				reqSpanID = sp.SpanID().String()
			} else if req, ok := n.requestOf(i); ok {
				reqSpanID = n.refs[req].span.SpanID().String()
			}
		}
		n.out.Steps = append(n.out.Steps, Step{
			TraceID:       sp.TraceID().String(),
			SpanID:        sp.SpanID().String(),
			RequestSpanID: reqSpanID,
			Source:        SourceSGLang,
			Kind:          StepRetract,
			StartNs:       ts,
			EndNs:         ts,
			Tokens:        0,
		})
		emitted++
	}
	return emitted
}

// tgiInternal records what TGI's queued / batch / infer / prefill spans say
// about their requests.
func (n *traceNormalizer) tgiInternal(i int) {
	sp := n.refs[i].span
	switch sp.Name() {
	case "queued":
		if req, ok := n.requestOf(i); ok && n.refs[req].class == classTGIRequest {
			n.auxOf(req).tgiQueuedMs = nsToMs(uint64(sp.StartTimestamp()), uint64(sp.EndTimestamp()))
		}
	case "infer":
		if req, ok := n.requestOf(i); ok && n.refs[req].class == classTGIRequest {
			a := n.auxOf(req)
			a.tgiInfer = append(a.tgiInfer, i)
		}
		for _, b := range n.linked(i) {
			n.setInferBatch(i, b)
		}
	case "batch":
		for _, inf := range n.linked(i) {
			n.setInferBatch(inf, i)
		}
	case "prefill":
		if b, ok := n.parent(i); ok && n.refs[b].span.Name() == "batch" {
			if n.tgiPrefillMs == nil {
				n.tgiPrefillMs = make(map[int]float64)
			}
			n.tgiPrefillMs[b] = nsToMs(uint64(sp.StartTimestamp()), uint64(sp.EndTimestamp()))
		}
	}
}

func (n *traceNormalizer) setInferBatch(infer, batch int) {
	if n.refs[infer].span.Name() != "infer" || n.refs[batch].span.Name() != "batch" {
		return
	}
	if n.tgiInferOf == nil {
		n.tgiInferOf = make(map[int]int)
	}
	n.tgiInferOf[infer] = batch
}

// linked returns the indexes of the spans span i links to within the
// message.
func (n *traceNormalizer) linked(i int) []int {
	links := n.refs[i].span.Links()
	var out []int
	for l := 0; l < links.Len(); l++ {
		lk := links.At(l)
		if j, ok := n.index[spanKey{lk.TraceID(), lk.SpanID()}]; ok {
			out = append(out, j)
		}
	}
	return out
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
