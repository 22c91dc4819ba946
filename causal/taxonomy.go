package causal

import "github.com/tailcause/tailcause/schemas"

// Cause is a culprit cause id of the taxonomy, which package schemas
// declares (schemas.Causes, schemas.CauseKVPreemption, ...); the alias keeps
// the analyzer's signatures in its own terms.
type Cause = schemas.Cause
