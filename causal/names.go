package causal

import "strings"

// EntityString is the canonical form of an entity: "host=…,gpu=…", the
// fields that are set, in a fixed order.
func EntityString(e Entity) string {
	var parts []string
	for _, kv := range [][2]string{{"host", e.Host}, {"gpu", e.GPU}, {"engine", e.Engine}, {"model", e.Model}, {"pod", e.Pod}, {"service", e.Service}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	return strings.Join(parts, ",")
}

// TopCulprit is "cause entity" of the rank-1 culprit, "" without culprits:
// what the scheduled mode (causal/incident) compares to decide that an
// incident changed.
func TopCulprit(in Incident) string {
	if len(in.Culprits) == 0 {
		return ""
	}
	return string(in.Culprits[0].Cause) + " " + EntityString(in.Culprits[0].Entity)
}
