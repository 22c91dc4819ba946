// Package k8s holds no code: it is the Kubernetes deployment of the
// tailcause roles (base/ and overlays/production/, kustomize), see
// README.md. Its tests build every kustomization in-process, decode each
// object strictly into its Kubernetes API type, check the wiring (config,
// secrets, probes, ports, selectors) against the binary's real
// subcommands, flags and environment variables, and load every reference
// config shipped under deploy/.
package k8s
