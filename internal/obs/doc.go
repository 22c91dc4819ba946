// Package obs is the self-observability of every tailcause role: one small
// HTTP server (Config, DefaultConfig, Validate; Start/Shutdown) that serves
//
//   - /metrics: Prometheus exposition of an injected prometheus.Gatherer
//     (the role's registry; NewRegistry adds the Go and process collectors);
//   - /healthz: liveness, 200 while the process serves HTTP;
//   - /readyz: readiness, the injected Checks run concurrently under
//     Config.CheckTimeout; 200 when all pass, 503 naming the failures. Every
//     probe answer says per check "[+]name ok" or "[-]name failed", as the
//     Kubernetes API server does, and no more: a check's error (addresses,
//     DSNs, server messages) goes to the log, not to whoever can reach the
//     probe. A result is reused for
//     Config.CheckInterval so that probes cannot overload the dependencies,
//     and /readyz turns 503 as soon as Shutdown starts, so a load balancer
//     drains the pod before it stops.
//
// ClickHouseCheck and KafkaCheck build the usual checks; FuncCollector
// exposes counters a role already keeps (atomic fields of a struct, a
// snapshot function) as Prometheus metrics without rewriting them.
package obs
