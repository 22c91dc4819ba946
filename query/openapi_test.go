package query

import (
	"encoding/json"
	"fmt"
	"math"
	"mime"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tailcause/tailcause/schemas"
)

// openAPIDoc is the decoded document.
type openAPIDoc struct {
	raw map[string]any
}

func loadOpenAPI(t *testing.T) openAPIDoc {
	t.Helper()
	var raw map[string]any
	if err := json.Unmarshal(schemas.OpenAPI(), &raw); err != nil {
		t.Fatalf("decode schemas/openapi.json: %v", err)
	}
	if v, _ := raw["openapi"].(string); !strings.HasPrefix(v, "3.") {
		t.Fatalf("openapi version %q: want 3.x", v)
	}
	return openAPIDoc{raw}
}

func (d openAPIDoc) paths() map[string]any { return d.raw["paths"].(map[string]any) }

// resolve follows a local $ref.
func (d openAPIDoc) resolve(v any) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("not an object: %v", v)
	}
	for i := 0; i < 10; i++ {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m, nil
		}
		if !strings.HasPrefix(ref, "#/") {
			return nil, fmt.Errorf("non-local $ref %s", ref)
		}
		var cur any = d.raw
		for _, p := range strings.Split(ref[2:], "/") {
			cm, ok := cur.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("$ref %s: %s is not an object", ref, p)
			}
			if cur, ok = cm[p]; !ok {
				return nil, fmt.Errorf("$ref %s: no %s", ref, p)
			}
		}
		if m, ok = cur.(map[string]any); !ok {
			return nil, fmt.Errorf("$ref %s is not an object", ref)
		}
	}
	return nil, fmt.Errorf("$ref chain too long")
}

// validate checks v against the schema subset the document uses: $ref,
// type (one or a list), enum, required, properties, additionalProperties,
// items, minItems/maxItems, minimum/maximum, format date-time.
func (d openAPIDoc) validate(schema any, v any, at string) []string {
	s, err := d.resolve(schema)
	if err != nil {
		return []string{at + ": " + err.Error()}
	}
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, at+": "+fmt.Sprintf(format, args...)) }
	if ty, ok := s["type"]; ok {
		var types []string
		switch x := ty.(type) {
		case string:
			types = []string{x}
		case []any:
			for _, e := range x {
				types = append(types, e.(string))
			}
		}
		if !slices.ContainsFunc(types, func(t string) bool { return jsonTypeIs(v, t) }) {
			bad("%s is not of type %v", short(v), types)
			return errs
		}
	}
	if en, ok := s["enum"].([]any); ok && !slices.ContainsFunc(en, func(e any) bool { return reflect.DeepEqual(e, v) }) {
		bad("%s is not one of %v", short(v), en)
	}
	if f, ok := v.(float64); ok {
		if m, ok := s["minimum"].(float64); ok && f < m {
			bad("%v < minimum %v", f, m)
		}
		if m, ok := s["maximum"].(float64); ok && f > m {
			bad("%v > maximum %v", f, m)
		}
	}
	if str, ok := v.(string); ok && s["format"] == "date-time" {
		if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
			bad("%q is not a date-time", str)
		}
	}
	if obj, ok := v.(map[string]any); ok {
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if _, ok := obj[r.(string)]; !ok {
					bad("required property %q is missing", r)
				}
			}
		}
		props, _ := s["properties"].(map[string]any)
		for k, pv := range obj {
			if ps, ok := props[k]; ok {
				errs = append(errs, d.validate(ps, pv, at+"."+k)...)
			} else if ap, ok := s["additionalProperties"].(map[string]any); ok {
				errs = append(errs, d.validate(ap, pv, at+"."+k)...)
			}
		}
	}
	if arr, ok := v.([]any); ok {
		if m, ok := s["minItems"].(float64); ok && float64(len(arr)) < m {
			bad("%d items < minItems %v", len(arr), m)
		}
		if m, ok := s["maxItems"].(float64); ok && float64(len(arr)) > m {
			bad("%d items > maxItems %v", len(arr), m)
		}
		if it, ok := s["items"]; ok {
			for i, e := range arr {
				errs = append(errs, d.validate(it, e, at+"["+strconv.Itoa(i)+"]")...)
			}
		}
	}
	return errs
}

func jsonTypeIs(v any, t string) bool {
	switch t {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == math.Trunc(f)
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "null":
		return v == nil
	}
	return false
}

func short(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}

// pathTemplate finds the documented path that matches a concrete path.
func (d openAPIDoc) pathTemplate(p string) (string, bool) {
	segs := strings.Split(p, "/")
	for tmpl := range d.paths() {
		ts := strings.Split(tmpl, "/")
		if len(ts) != len(segs) {
			continue
		}
		ok := true
		for i := range ts {
			if strings.HasPrefix(ts[i], "{") && strings.HasSuffix(ts[i], "}") {
				ok = ok && segs[i] != ""
			} else {
				ok = ok && ts[i] == segs[i]
			}
		}
		if ok {
			return tmpl, true
		}
	}
	return "", false
}

// checkResponse validates a response against the document: the status must
// be documented for the operation, the media type too, and a JSON body must
// match its schema.
func (d openAPIDoc) checkResponse(method, path string, status int, contentType string, body []byte) error {
	tmpl, ok := d.pathTemplate(path)
	if !ok {
		return fmt.Errorf("%s is not in the document", path)
	}
	op, ok := d.paths()[tmpl].(map[string]any)[strings.ToLower(method)].(map[string]any)
	if !ok {
		return fmt.Errorf("%s %s is not in the document", method, tmpl)
	}
	resp, ok := op["responses"].(map[string]any)[strconv.Itoa(status)]
	if !ok {
		return fmt.Errorf("%s %s: status %d is not documented", method, tmpl, status)
	}
	r, err := d.resolve(resp)
	if err != nil {
		return err
	}
	content, _ := r["content"].(map[string]any)
	if len(content) == 0 {
		if len(body) > 0 {
			return fmt.Errorf("%s %s %d: body where none is documented", method, tmpl, status)
		}
		return nil
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	media, ok := content[mt].(map[string]any)
	if !ok {
		return fmt.Errorf("%s %s %d: content type %q is not documented", method, tmpl, status, mt)
	}
	if !strings.Contains(mt, "json") {
		return nil
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("%s %s %d: body is not JSON: %v", method, tmpl, status, err)
	}
	if errs := d.validate(media["schema"], v, "body"); len(errs) > 0 {
		return fmt.Errorf("%s %s %d: response does not match the documented schema:\n  %s", method, tmpl, status, strings.Join(errs, "\n  "))
	}
	return nil
}

// TestOpenAPIRoutes: every route the server registers is in the document
// and every documented operation is registered, with matching access rules.
func TestOpenAPIRoutes(t *testing.T) {
	d := loadOpenAPI(t)
	cfg := DefaultConfig()
	cfg.Token = testToken
	reg := prometheus.NewRegistry()
	srv, err := New(nopDB{}, cfg, Options{Registerer: reg, Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]Access{}
	for _, r := range srv.Routes() {
		registered[r.Method+" "+r.Pattern] = r.Access
	}
	documented := map[string]bool{}
	for p, item := range d.paths() {
		for m, op := range item.(map[string]any) {
			key := strings.ToUpper(m) + " " + p
			documented[key] = true
			access, ok := registered[key]
			if !ok {
				t.Errorf("%s is documented but not registered", key)
				continue
			}
			sec, hasSec := op.(map[string]any)["security"].([]any)
			switch access {
			case AccessOpen:
				if !hasSec || len(sec) != 0 {
					t.Errorf("%s is open but the document does not say security: []", key)
				}
			case AccessBearer:
				if hasSec {
					t.Errorf("%s needs the bearer token; the document overrides security with %v", key, sec)
				}
			case AccessBearerOrLink:
				if !hasSec || len(sec) != 2 {
					t.Errorf("%s takes a bearer token or a signed link; the document says %v", key, sec)
				}
			}
			// Every path parameter of the template is declared.
			for _, seg := range strings.Split(p, "/") {
				if strings.HasPrefix(seg, "{") {
					name := strings.Trim(seg, "{}")
					if !d.declaresParam(op.(map[string]any), name, "path") {
						t.Errorf("%s: path parameter %s is not declared", key, name)
					}
				}
			}
		}
	}
	var missing []string
	for k := range registered {
		if !documented[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	for _, k := range missing {
		t.Errorf("%s is registered but not documented in schemas/openapi.json", k)
	}
	if len(registered) < 12 {
		t.Errorf("only %d routes registered", len(registered))
	}
}

func (d openAPIDoc) declaresParam(op map[string]any, name, in string) bool {
	ps, _ := op["parameters"].([]any)
	for _, p := range ps {
		m, err := d.resolve(p)
		if err == nil && m["name"] == name && m["in"] == in {
			return true
		}
	}
	return false
}

// TestOpenAPIIncidentMatchesV1Schema: the document's IncidentV1 mirrors
// schemas/culprits.v1.schema.json (same properties, same required lists).
func TestOpenAPIIncidentMatchesV1Schema(t *testing.T) {
	d := loadOpenAPI(t)
	var v1s map[string]any
	if err := json.Unmarshal(schemas.CulpritsV1Schema(), &v1s); err != nil {
		t.Fatal(err)
	}
	comp := d.raw["components"].(map[string]any)["schemas"].(map[string]any)
	same := func(name string, a, b map[string]any) {
		t.Helper()
		keys := func(m map[string]any) []string {
			var ks []string
			for k := range m["properties"].(map[string]any) {
				ks = append(ks, k)
			}
			sort.Strings(ks)
			return ks
		}
		req := func(m map[string]any) []string {
			var rs []string
			for _, r := range m["required"].([]any) {
				rs = append(rs, r.(string))
			}
			sort.Strings(rs)
			return rs
		}
		if !reflect.DeepEqual(keys(a), keys(b)) {
			t.Errorf("%s properties %v, v1 schema has %v", name, keys(a), keys(b))
		}
		if !reflect.DeepEqual(req(a), req(b)) {
			t.Errorf("%s required %v, v1 schema has %v", name, req(a), req(b))
		}
	}
	same("IncidentV1", comp["IncidentV1"].(map[string]any), v1s)
	same("Culprit", comp["Culprit"].(map[string]any), v1s["$defs"].(map[string]any)["culprit"].(map[string]any))
	causes := comp["Culprit"].(map[string]any)["properties"].(map[string]any)["cause"].(map[string]any)["enum"]
	want := v1s["$defs"].(map[string]any)["culprit"].(map[string]any)["properties"].(map[string]any)["cause"].(map[string]any)["enum"]
	if !reflect.DeepEqual(causes, want) {
		t.Errorf("cause enum %v, v1 schema has %v", causes, want)
	}
}

// TestOpenAPIServed: /openapi.json is the embedded document.
func TestOpenAPIServed(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Token = testToken
	srv, err := New(nopDB{}, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	status, ct, body := call(t, hs, "GET", "/openapi.json", testToken)
	if status != http.StatusOK || ct != "application/json" || string(body) != string(schemas.OpenAPI()) {
		t.Fatalf("GET /openapi.json: %d %s, %d bytes; want 200 application/json with the embedded document", status, ct, len(body))
	}
	if status, _, _ := call(t, hs, "GET", "/openapi.json", ""); status != http.StatusUnauthorized {
		t.Errorf("GET /openapi.json without a token: %d, want 401", status)
	}
}

// TestOpenAPIValidator: the checker used by the contract tests does catch
// missing properties, wrong types, bad enums and undocumented statuses.
func TestOpenAPIValidator(t *testing.T) {
	d := loadOpenAPI(t)
	good := `{"by":"model","signal":"e2e_ms","from":"2025-03-01T10:00:00Z","to":"2025-03-01T11:00:00Z","filters":{},"groups":[{"key":{"model":"m"},"requests":3,"errors":0,"p50_ms":1,"p99_ms":null,"max_ms":2}],"truncated":false}`
	if err := d.checkResponse("GET", "/v1/p99/scopes", 200, "application/json", []byte(good)); err != nil {
		t.Fatalf("a valid breakdown is rejected: %v", err)
	}
	for name, c := range map[string]struct {
		path   string
		status int
		ct     string
		body   string
	}{
		"missing groups":      {"/v1/p99/scopes", 200, "application/json", strings.Replace(good, `"groups"`, `"grups"`, 1)},
		"string for a number": {"/v1/p99/scopes", 200, "application/json", strings.Replace(good, `"requests":3`, `"requests":"3"`, 1)},
		"fraction integer":    {"/v1/p99/scopes", 200, "application/json", strings.Replace(good, `"requests":3`, `"requests":3.5`, 1)},
		"bad date-time":       {"/v1/p99/scopes", 200, "application/json", strings.Replace(good, `2025-03-01T10:00:00Z`, `yesterday`, 1)},
		"undocumented status": {"/v1/p99/scopes", 418, "application/json", good},
		"undocumented type":   {"/v1/p99/scopes", 200, "text/plain", good},
		"unknown path":        {"/v1/nothing", 200, "application/json", good},
		"bad enum":            {"/healthz", 200, "application/json", `{"status":"meh"}`},
		"problem lacks title": {"/v1/incidents", 400, "application/problem+json", `{"type":"x","status":400,"detail":"d"}`},
	} {
		if err := d.checkResponse("GET", c.path, c.status, c.ct, []byte(c.body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
