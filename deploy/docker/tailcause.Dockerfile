# syntax=docker/dockerfile:1
# The tailcause image: one static binary serving every role
# (`tailcause ingest|enrich|causal|query|topics|migrate`), as the manifests in
# deploy/k8s run it. Build from the repository root:
#
#   docker build -f deploy/docker/tailcause.Dockerfile \
#     --build-arg VERSION="$(git describe --always --dirty)" \
#     -t ghcr.io/tailcause/tailcause:dev .
#
# deploy/docker/docker_test.go runs this file's build command and checks the
# image's wiring against go.mod and the manifests.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/tailcause ./cmd/tailcause

# distroless/static: CA certificates (webhooks over HTTPS) and tzdata, no
# shell, uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/tailcause /tailcause
USER 65532:65532
# OTLP gRPC, OTLP HTTP (ingest), the query API, /metrics /healthz /readyz.
EXPOSE 4317 4318 8080 9464
ENTRYPOINT ["/tailcause"]
