# syntax=docker/dockerfile:1
# The node Collector image (deploy/otelcol): the distribution of
# deploy/otelcol/builder-config.yaml built with the OpenTelemetry builder, as
# deploy/otelcol/build.sh builds it locally. Build from the repository root:
#
#   docker build -f deploy/docker/otelcol.Dockerfile -t ghcr.io/tailcause/otelcol-tailcause:dev .
#
# The DaemonSet mounts its config at /etc/otelcol/config.yaml; the image
# carries deploy/otelcol/config.yaml there as a default.
FROM golang:1.26-bookworm AS build
# Keep in step with BUILDER_VERSION in deploy/otelcol/build.sh (checked by
# deploy/docker/docker_test.go).
ARG BUILDER_VERSION=0.165.0
RUN go install go.opentelemetry.io/collector/cmd/builder@v${BUILDER_VERSION}
WORKDIR /build
COPY deploy/otelcol/builder-config.yaml ./
RUN CGO_ENABLED=0 builder --config builder-config.yaml --ldflags="-s -w"

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /build/_build/otelcol-tailcause /otelcol-tailcause
COPY deploy/otelcol/config.yaml /etc/otelcol/config.yaml
USER 65532:65532
# OTLP gRPC, OTLP HTTP, health_check, the Collector's own metrics.
EXPOSE 4317 4318 13133 8888
ENTRYPOINT ["/otelcol-tailcause"]
CMD ["--config=/etc/otelcol/config.yaml"]
