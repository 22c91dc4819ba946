package normalize

import (
	"cmp"
	"encoding/hex"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// Bounds on the extra attributes carried by a Request.
const (
	maxExtraAttrs   = 32  // entries kept, the first ones in key order
	maxAttrKeyLen   = 128 // bytes
	maxAttrValueLen = 256 // bytes
)

// Attribute keys shared by several sources.
const (
	attrServiceName       = "service.name"
	attrHostName          = "host.name"
	attrK8sNode           = "k8s.node.name"
	attrK8sPod            = "k8s.pod.name"
	attrK8sNamespace      = "k8s.namespace.name"
	attrServiceInstance   = "service.instance.id"
	attrServerAddress     = "server.address"
	attrRequestModel      = "gen_ai.request.model"
	attrResponseModel     = "gen_ai.response.model"
	attrTritonModelName   = "triton.model_name"
	attrTritonModelVer    = "triton.model_version"
	attrTritonRequestID   = "triton.request_id"
	attrRequestID         = "gen_ai.request.id"
	attrResponseID        = "gen_ai.response.id"
	attrFinishReasons     = "gen_ai.response.finish_reasons"
	attrMaxTokens         = "gen_ai.request.max_tokens"
	attrOperationName     = "gen_ai.operation.name"
	attrProviderName      = "gen_ai.provider.name"
	attrSystem            = "gen_ai.system"
	attrTimeToFirstChunk  = "gen_ai.response.time_to_first_chunk"
	attrLatencyPrefix     = "gen_ai.latency."
	attrSGLangRID         = "rid"
	attrSGLangModule      = "module"
	attrSGLangThreadLabel = "thread_label"
	attrErrorType         = "error.type"
)

// num reads a number from an attribute value: int, double, or a string
// holding a number (OTLP-JSON producers and some SDKs send those).
func num(v value) (float64, bool) {
	var f float64
	switch v.Type() {
	case pcommon.ValueTypeDouble:
		f = v.Double()
	case pcommon.ValueTypeInt:
		f = float64(v.Int())
	case pcommon.ValueTypeStr:
		p, err := strconv.ParseFloat(strings.TrimSpace(v.Str()), 64)
		if err != nil {
			return 0, false
		}
		f = p
	default:
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// count reads a non-negative integer count (tokens) from an attribute value.
func count(v value) (int64, bool) {
	switch v.Type() {
	case pcommon.ValueTypeInt:
		if n := v.Int(); n >= 0 {
			return n, true
		}
		return 0, false
	case pcommon.ValueTypeStr:
		if n, err := strconv.ParseInt(strings.TrimSpace(v.Str()), 10, 64); err == nil {
			if n >= 0 {
				return n, true
			}
			return 0, false
		}
	}
	f, ok := num(v)
	if !ok || f < 0 || f != math.Trunc(f) || f > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// secondsToMs converts a float-seconds latency attribute to milliseconds.
// Negative or unparsable values are unknown (NaN).
func secondsToMs(v value) float64 {
	f, ok := num(v)
	if !ok || f < 0 {
		return math.NaN()
	}
	return f * 1e3
}

// nsToMs converts a nanosecond difference to milliseconds; end before start
// is unknown (NaN).
func nsToMs(start, end uint64) float64 {
	if start == 0 || end == 0 || end < start {
		return math.NaN()
	}
	return float64(end-start) / 1e6
}

// firstFinishReason reads gen_ai.response.finish_reasons: a string[] (GenAI
// conventions), JSON text such as `["stop"]` (vLLM, SGLang), or a bare
// string. It returns the first reason, or "".
func firstFinishReason(v value) string {
	switch v.Type() {
	case pcommon.ValueTypeSlice:
		s := v.Slice()
		for i := 0; i < s.Len(); i++ {
			if r := strings.TrimSpace(s.At(i).AsString()); r != "" {
				return r
			}
		}
		return ""
	case pcommon.ValueTypeStr:
		t := strings.TrimSpace(v.Str())
		if r, ok := firstJSONString(t); ok {
			return r
		}
		if strings.HasPrefix(t, "[") {
			var list []any
			if err := json.Unmarshal([]byte(t), &list); err == nil {
				for _, e := range list {
					if r, ok := e.(string); ok && strings.TrimSpace(r) != "" {
						return strings.TrimSpace(r)
					}
				}
				return ""
			}
			// Not JSON after all, e.g. "[stop, length]" from a str() call.
			t = strings.Trim(t, "[]")
		}
		if i := strings.IndexByte(t, ','); i >= 0 {
			t = t[:i]
		}
		return strings.Trim(strings.TrimSpace(t), `"'`)
	}
	return ""
}

// firstJSONString is the allocation-free path of firstFinishReason for the
// common `["stop"]` / `["length", "stop"]` text: a JSON array whose first
// element is a plain string without escapes.
func firstJSONString(t string) (string, bool) {
	if !strings.HasPrefix(t, "[") {
		return "", false
	}
	rest := strings.TrimLeft(t[1:], " \t\r\n")
	if !strings.HasPrefix(rest, `"`) {
		return "", false
	}
	rest = rest[1:]
	end := strings.IndexAny(rest, `"\`)
	if end < 0 || rest[end] != '"' {
		return "", false
	}
	r := strings.TrimSpace(rest[:end])
	if r == "" || !strings.HasSuffix(t, "]") {
		return "", false
	}
	return r, true
}

// spanUID renders trace and span ids as "<trace hex>-<span hex>" in one
// allocation; the hex ids are substrings of it.
func spanUID(tr [16]byte, sp [8]byte) (uid, traceHex, spanHex string) {
	var buf [16*2 + 1 + 8*2]byte
	hex.Encode(buf[:32], tr[:])
	buf[32] = '-'
	hex.Encode(buf[33:], sp[:])
	uid = string(buf[:])
	return uid, uid[:32], uid[33:]
}

// truncUTF8 cuts s to at most n bytes without splitting a rune.
func truncUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// extras collects attributes that no Request field holds.
type extras struct {
	kv []extraKV
}

type extraKV struct{ k, v string }

func (e *extras) add(k string, v value) {
	e.addStr(k, v.AsString())
}

func (e *extras) addStr(k, v string) {
	// Bound the work, not only the result: keep at most a few times the cap
	// before sorting; spans with thousands of attributes are cut here.
	if len(e.kv) >= 4*maxExtraAttrs {
		return
	}
	e.kv = append(e.kv, extraKV{truncUTF8(k, maxAttrKeyLen), truncUTF8(v, maxAttrValueLen)})
}

// arrays returns the extras as sorted parallel arrays, the first
// maxExtraAttrs keys, one value per key (the first seen).
func (e *extras) arrays() (keys, values []string) {
	if len(e.kv) == 0 {
		return nil, nil
	}
	slices.SortStableFunc(e.kv, func(x, y extraKV) int { return cmp.Compare(x.k, y.k) })
	n := 0
	for i, kv := range e.kv {
		if i > 0 && kv.k == e.kv[n-1].k {
			continue
		}
		e.kv[n] = kv
		n++
	}
	if n > maxExtraAttrs {
		n = maxExtraAttrs
	}
	both := make([]string, 2*n) // one allocation for the two arrays
	keys, values = both[:n:n], both[n:]
	for i := 0; i < n; i++ {
		keys[i], values[i] = e.kv[i].k, e.kv[i].v
	}
	return keys, values
}

// placementBuilder collects placement attributes; host.name wins over
// k8s.node.name.
type placementBuilder struct {
	p    Placement
	node string
}

// attr takes k if it is a placement attribute and reports whether it did.
// The first value seen for a field wins.
func (b *placementBuilder) attr(k string, v value) bool {
	dst := b.field(k)
	if dst == nil {
		return false
	}
	if *dst == "" {
		*dst = v.AsString()
	}
	return true
}

// field is where the value of placement attribute k goes (nil: k is not
// one).
func (b *placementBuilder) field(k string) *string {
	switch k {
	case attrHostName:
		return &b.p.Host
	case attrK8sNode:
		return &b.node
	case attrK8sPod:
		return &b.p.Pod
	case attrK8sNamespace:
		return &b.p.Namespace
	case attrServiceInstance:
		return &b.p.ServiceInstance
	}
	return nil
}

func (b *placementBuilder) placement() Placement {
	p := b.p
	if p.Host == "" {
		p.Host = b.node
	}
	return p
}

// mergePlacement fills the empty fields of p from q.
func mergePlacement(p *Placement, q Placement) {
	fill := func(dst *string, src string) {
		if *dst == "" {
			*dst = src
		}
	}
	fill(&p.Host, q.Host)
	fill(&p.Pod, q.Pod)
	fill(&p.Namespace, q.Namespace)
	fill(&p.ServiceInstance, q.ServiceInstance)
	fill(&p.Engine, q.Engine)
	fill(&p.GPU, q.GPU)
	fill(&p.GPUIndex, q.GPUIndex)
}

// strAttr returns a string attribute (any scalar rendered as a string).
func strAttr(m attrs, k string) (string, bool) {
	v, ok := m.Get(k)
	if !ok {
		return "", false
	}
	return v.AsString(), true
}
