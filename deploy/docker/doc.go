// Package docker holds no code: it is the container images of tailcause
// (tailcause.Dockerfile: the binary every role runs; otelcol.Dockerfile:
// the node Collector of deploy/otelcol). There is no container engine on
// the development machines, so its test runs each image's build command
// here and checks the images' wiring against go.mod, deploy/otelcol and
// the Kubernetes manifests. See README.md.
package docker
