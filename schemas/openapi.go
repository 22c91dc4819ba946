package schemas

import _ "embed"

//go:embed openapi.json
var openAPI []byte

// OpenAPI is the OpenAPI 3.1 document of the query API (`tailcause query`),
// served at /openapi.json. Its IncidentV1 schema mirrors
// culprits.v1.schema.json.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }
