package normalize

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// TestGolden normalizes each OTLP-JSON fixture under testdata/ and compares
// the Batch with testdata/golden/<fixture>. The same fixture re-encoded as
// otlp_proto must normalize identically.
func TestGolden(t *testing.T) {
	fixtures, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(fixtures) == 0 {
		t.Fatalf("find fixtures: %v (found %d)", err, len(fixtures))
	}
	for _, path := range fixtures {
		name := filepath.Base(path)
		t.Run(strings.TrimSuffix(name, ".json"), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got, viaProto := normalizeFixture(t, name, raw)
			if diff := cmp.Diff(got, viaProto, cmpopts.EquateNaNs(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("otlp_json and otlp_proto disagree (-json +proto):\n%s", diff)
			}
			gotJSON := goldenJSON(got)
			goldenPath := filepath.Join("testdata", "golden", name)
			if *update {
				if err := os.WriteFile(goldenPath, gotJSON, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(goldenPath)
			if err != nil {
				t.Fatalf("read golden (run with -update to create it): %v", err)
			}
			if diff := cmp.Diff(string(want), string(gotJSON)); diff != "" {
				t.Errorf("golden mismatch for %s (-want +got); rerun with -update if intended:\n%s", name, diff)
			}
		})
	}
}

// normalizeFixture decodes an OTLP-JSON fixture, normalizes it, and does
// the same after re-encoding it as protobuf.
func normalizeFixture(t *testing.T, name string, raw []byte) (fromJSON, fromProto Batch) {
	t.Helper()
	if strings.HasSuffix(name, "_traces.json") {
		td, err := DecodeTraces(raw, EncodingJSON)
		if err != nil {
			t.Fatal(err)
		}
		var m ptrace.ProtoMarshaler
		pb, err := m.MarshalTraces(td)
		if err != nil {
			t.Fatal(err)
		}
		td2, err := DecodeTraces(pb, EncodingProto)
		if err != nil {
			t.Fatal(err)
		}
		return Traces(td), Traces(td2)
	}
	md, err := DecodeMetrics(raw, EncodingJSON)
	if err != nil {
		t.Fatal(err)
	}
	var m pmetric.ProtoMarshaler
	pb, err := m.MarshalMetrics(md)
	if err != nil {
		t.Fatal(err)
	}
	md2, err := DecodeMetrics(pb, EncodingProto)
	if err != nil {
		t.Fatal(err)
	}
	return Metrics(md), Metrics(md2)
}

// goldenJSON renders a Batch for review: fields in declaration order, NaN
// as "NaN", SampleKind by name, empty strings, slices and structs left out.
func goldenJSON(b Batch) []byte {
	var buf bytes.Buffer
	writeGolden(&buf, reflect.ValueOf(b), 0)
	buf.WriteByte('\n')
	return buf.Bytes()
}

func isEmptyGolden(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String, reflect.Slice, reflect.Map:
		return v.Len() == 0
	case reflect.Struct:
		return v.IsZero()
	}
	return false
}

func writeGolden(buf *bytes.Buffer, v reflect.Value, depth int) {
	pad := strings.Repeat("  ", depth+1)
	end := strings.Repeat("  ", depth)
	if v.Type() == reflect.TypeOf(SampleKind(0)) {
		kind := map[SampleKind]string{Gauge: `"gauge"`, Cumulative: `"cumulative"`}[SampleKind(v.Uint())]
		buf.WriteString(kind)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		buf.WriteString("{")
		first := true
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			if isEmptyGolden(f) {
				continue
			}
			if !first {
				buf.WriteString(",")
			}
			first = false
			buf.WriteString("\n" + pad + `"` + v.Type().Field(i).Name + `": `)
			writeGolden(buf, f, depth+1)
		}
		if !first {
			buf.WriteString("\n" + end)
		}
		buf.WriteString("}")
	case reflect.Slice:
		// Slices of scalars on one line, slices of structs one per line.
		if v.Type().Elem().Kind() != reflect.Struct {
			b, _ := json.Marshal(v.Interface())
			buf.Write(b)
			return
		}
		buf.WriteString("[")
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				buf.WriteString(",")
			}
			buf.WriteString("\n" + pad)
			writeGolden(buf, v.Index(i), depth+1)
		}
		buf.WriteString("\n" + end + "]")
	case reflect.Map:
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		sort.Strings(keys)
		buf.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				buf.WriteString(",")
			}
			buf.WriteString("\n" + pad + `"` + k + `": `)
			writeGolden(buf, v.MapIndex(reflect.ValueOf(k)), depth+1)
		}
		buf.WriteString("\n" + end + "}")
	case reflect.Float32, reflect.Float64:
		if math.IsNaN(v.Float()) {
			buf.WriteString(`"NaN"`)
			return
		}
		b, _ := json.Marshal(v.Float())
		buf.Write(b)
	default:
		b, _ := json.Marshal(v.Interface())
		buf.Write(b)
	}
}
