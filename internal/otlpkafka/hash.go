package otlpkafka

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/cespare/xxhash/v2"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// Markers of the attribute-hash encoding. They, the key order and the two
// xxhash64 halves reproduce the Collector's pdatautil.MapHash byte for byte,
// which is what its kafka exporter uses as the record key for
// partition_metrics_by_resource_attributes and
// partition_logs_by_resource_attributes. Changing any of them changes which
// partition a resource's records land on.
const (
	hashExtra       byte = 0xf3
	hashKey         byte = 0xf4
	hashEmpty       byte = 0xf5
	hashBytes       byte = 0xf6
	hashStr         byte = 0xf7
	hashTrue        byte = 0xf8
	hashFalse       byte = 0xf9
	hashInt         byte = 0xfa
	hashDouble      byte = 0xfb
	hashMapBegin    byte = 0xfc
	hashMapEnd      byte = 0xfd
	hashSliceBegin  byte = 0xfe
	hashSliceEnd    byte = 0xff
	resourceHashLen      = 16
)

// attrHasher computes resource-attribute hashes with reusable scratch space.
// Not safe for concurrent use.
type attrHasher struct {
	buf  []byte
	keys []string
}

// AppendResourceHash appends the 16-byte hash of m to dst, as the Collector's
// kafka exporter computes its resource-attribute key. An empty map hashes to
// sixteen zero bytes.
func AppendResourceHash(dst []byte, m pcommon.Map) []byte {
	var h attrHasher
	return h.appendHash(dst, m)
}

func (h *attrHasher) appendHash(dst []byte, m pcommon.Map) []byte {
	if m.Len() == 0 {
		return append(dst, make([]byte, resourceHashLen)...)
	}
	h.buf = h.buf[:0]
	h.writeMap(m)
	dst = binary.LittleEndian.AppendUint64(dst, xxhash.Sum64(h.buf))
	h.buf = append(h.buf, hashExtra)
	return binary.LittleEndian.AppendUint64(dst, xxhash.Sum64(h.buf))
}

// writeMap writes the map's entries in sorted key order. Keys that occur
// twice are written twice, each with the value Get returns (the first one),
// exactly as the Collector does.
func (h *attrHasher) writeMap(m pcommon.Map) {
	base := len(h.keys)
	for k := range m.All() {
		h.keys = append(h.keys, k)
	}
	keys := h.keys[base:]
	slices.Sort(keys)
	for _, k := range keys {
		v, _ := m.Get(k)
		h.buf = append(h.buf, hashKey)
		h.buf = append(h.buf, k...)
		h.writeValue(v)
	}
	clear(h.keys[base:]) // drop string references held by the scratch
	h.keys = h.keys[:base]
}

func (h *attrHasher) writeValue(v pcommon.Value) {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		h.buf = append(h.buf, hashStr)
		h.buf = append(h.buf, v.Str()...)
	case pcommon.ValueTypeBool:
		if v.Bool() {
			h.buf = append(h.buf, hashTrue)
		} else {
			h.buf = append(h.buf, hashFalse)
		}
	case pcommon.ValueTypeInt:
		h.buf = append(h.buf, hashInt)
		h.buf = binary.LittleEndian.AppendUint64(h.buf, uint64(v.Int()))
	case pcommon.ValueTypeDouble:
		h.buf = append(h.buf, hashDouble)
		h.buf = binary.LittleEndian.AppendUint64(h.buf, math.Float64bits(v.Double()))
	case pcommon.ValueTypeMap:
		h.buf = append(h.buf, hashMapBegin)
		h.writeMap(v.Map())
		h.buf = append(h.buf, hashMapEnd)
	case pcommon.ValueTypeSlice:
		h.buf = append(h.buf, hashSliceBegin)
		s := v.Slice()
		for i := 0; i < s.Len(); i++ {
			h.writeValue(s.At(i))
		}
		h.buf = append(h.buf, hashSliceEnd)
	case pcommon.ValueTypeBytes:
		h.buf = append(h.buf, hashBytes)
		h.buf = append(h.buf, v.Bytes().AsRaw()...)
	case pcommon.ValueTypeEmpty:
		h.buf = append(h.buf, hashEmpty)
	}
}
