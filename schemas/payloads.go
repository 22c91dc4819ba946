package schemas

import _ "embed"

//go:embed culprits.v1.schema.json
var culpritsV1 []byte

// CulpritsV1Schema is the JSON Schema (draft 2020-12) of the v1 ranked
// culprits payload: the API's incident resource, the webhook body and
// `tailcause rank --format json`.
func CulpritsV1Schema() []byte { return append([]byte(nil), culpritsV1...) }
