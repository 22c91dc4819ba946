package normalize

import (
	"fmt"
	"math"
	"slices"
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

func newResInfo(res attrs) *resInfo {
	ri := &resInfo{}
	var pb placementBuilder
	var reqModel, respModel, tritonModel string
	for _, a := range res {
		k, v := a.key, a.val
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
	span  *span
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
	// res is each resource's resInfo.
	res []*resInfo
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
	d := fromPdata(td)
	var n traceNormalizer
	return n.normalize(&d)
}

// normalize is Traces on d. The Batch aliases d's strings, nothing else of
// d or n; n's scratch space is reused by its next call.
func (n *traceNormalizer) normalize(d *traceData) Batch {
	n.indexSpans(d)
	n.scanNonRequests()
	n.buildRequests()
	out := n.out
	n.out = Batch{}
	return out
}

func (n *traceNormalizer) indexSpans(d *traceData) {
	total := len(d.spans)
	n.refs = slices.Grow(n.refs[:0], total)
	if n.index == nil {
		n.index = make(map[spanKey]int, total)
	} else {
		clear(n.index)
	}
	clear(n.aux)
	clear(n.tgiPrefillMs)
	clear(n.tgiInferOf)
	n.res = n.res[:0]
	for _, res := range d.resources {
		n.res = append(n.res, newResInfo(res))
	}
	for i := range d.spans {
		sp := &d.spans[i]
		sc := d.scopes[sp.scope]
		ri := n.res[sc.res]
		ref := spanRef{span: sp, res: ri, scope: sc.name}
		ref.class, ref.role = classify(sp, ri, sc.name)
		key := spanKey{sp.traceID, sp.spanID}
		if _, dup := n.index[key]; !dup && !sp.spanID.IsEmpty() {
			n.index[key] = len(n.refs)
		}
		n.refs = append(n.refs, ref)
	}
}

// classify decides what a span is from its own name, scope and attributes.
func classify(sp *span, ri *resInfo, scope string) (spanClass, string) {
	name := sp.name
	attrs := sp.attrs
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
	for _, a := range attrs {
		if strings.HasPrefix(a.key, attrLatencyPrefix) {
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
func isSGLangThread(name string, attrs attrs) bool {
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
func hasTGITiming(attrs attrs) bool {
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
func (n *traceNormalizer) validate(sp *span) bool {
	start, end := sp.start, sp.end
	switch {
	case sp.traceID.IsEmpty() || sp.spanID.IsEmpty():
		n.reject("no_span_id", fmt.Sprintf("span %q: empty trace or span id (trace %s span %s)",
			truncUTF8(sp.name, maxSpanNameInDetail), sp.traceID, sp.spanID))
		return false
	case start == 0 || end == 0:
		n.reject("no_timestamp", fmt.Sprintf("span %q (trace %s span %s): start %d end %d: zero timestamp",
			truncUTF8(sp.name, maxSpanNameInDetail), sp.traceID, sp.spanID, start, end))
		return false
	case end < start:
		n.reject("bad_timestamp", fmt.Sprintf("span %q (trace %s span %s): end %d before start %d",
			truncUTF8(sp.name, maxSpanNameInDetail), sp.traceID, sp.spanID, end, start))
		return false
	}
	return true
}

// parent returns the index of a span's parent within the message.
func (n *traceNormalizer) parent(i int) (int, bool) {
	sp := n.refs[i].span
	if sp.parentID.IsEmpty() {
		return -1, false
	}
	j, ok := n.index[spanKey{sp.traceID, sp.parentID}]
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
				end := ref.span.end
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
		if _, ok := sp.attrs.Get(attrTritonModelName); ok || hasTritonEvents(sp) {
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
func hasTritonEvents(sp *span) bool {
	for _, ev := range sp.events {
		switch ev.name {
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
	_, traceHex, spanHex := spanUID(sp.traceID, sp.spanID)
	st := Step{
		TraceID: traceHex,
		SpanID:  spanHex,
		Source:  src,
		Kind:    kind,
		StartNs: sp.start,
		EndNs:   sp.end,
		Tokens:  tokens,
	}
	req, ok := n.requestOf(i)
	if ok {
		st.RequestSpanID = n.refs[req].span.spanID.String()
	}
	n.out.Steps = append(n.out.Steps, st)
	return req, ok
}

// retracts emits a retract Step for each SGLang "retract" event on span i
// and returns how many it emitted.
func (n *traceNormalizer) retracts(i int) int {
	sp := n.refs[i].span
	emitted := 0
	var reqSpanID string
	resolved := false
	for _, ev := range sp.events {
		if ev.name != "retract" {
			continue
		}
		ts := ev.ts
		if ts == 0 || sp.traceID.IsEmpty() || sp.spanID.IsEmpty() {
			n.reject("no_timestamp", fmt.Sprintf("retract event on span %q (trace %s span %s): zero timestamp or id",
				truncUTF8(sp.name, maxSpanNameInDetail), sp.traceID, sp.spanID))
			continue
		}
		if !resolved {
			resolved = true
			if n.refs[i].class == classSGLangRoot {
				reqSpanID = sp.spanID.String()
			} else if req, ok := n.requestOf(i); ok {
				reqSpanID = n.refs[req].span.spanID.String()
			}
		}
		n.out.Steps = append(n.out.Steps, Step{
			TraceID:       sp.traceID.String(),
			SpanID:        sp.spanID.String(),
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
	switch sp.name {
	case "queued":
		if req, ok := n.requestOf(i); ok && n.refs[req].class == classTGIRequest {
			n.auxOf(req).tgiQueuedMs = nsToMs(sp.start, sp.end)
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
		if b, ok := n.parent(i); ok && n.refs[b].span.name == "batch" {
			if n.tgiPrefillMs == nil {
				n.tgiPrefillMs = make(map[int]float64)
			}
			n.tgiPrefillMs[b] = nsToMs(sp.start, sp.end)
		}
	}
}

func (n *traceNormalizer) setInferBatch(infer, batch int) {
	if n.refs[infer].span.name != "infer" || n.refs[batch].span.name != "batch" {
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
	var out []int
	for _, lk := range n.refs[i].span.links {
		if j, ok := n.index[spanKey{lk.traceID, lk.spanID}]; ok {
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
