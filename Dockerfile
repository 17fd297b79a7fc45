# syntax=docker/dockerfile:1
# The sluice image: one static binary on an empty base, running as a
# non-root user, its SQLite files in the /data volume.
#
#   docker build -t sluice --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg REVISION=$(git rev-parse HEAD) .
#   docker run -p 8080:8080 -v sluice-data:/data \
#     -e SLUICE_ADMIN_TOKEN=$(openssl rand -hex 32) sluice
#
# The admin API (keys, rules, the console, /metrics) listens on the
# container's loopback only. To reach it from the host alone:
#   -e SLUICE_ADMIN_LISTEN=0.0.0.0:8081 -p 127.0.0.1:8081:8081
# and never publish it on a public address.
#
# buildah builds it too: buildah build --storage-driver vfs --isolation chroot -t sluice .
# GO_IMAGE names the builder: any image with Go 1.26, a POSIX shell and CA
# certificates (scripts/image-test.sh makes one from the host's Go when no
# registry can be reached).
ARG GO_IMAGE=docker.io/library/golang:1.26-bookworm

FROM ${GO_IMAGE} AS build
WORKDIR /src
ARG GOPROXY=https://proxy.golang.org,direct
ARG VERSION=
ARG REVISION=
COPY . .
# modernc's SQLite is pure Go, so the binary needs no C library. -tags grpcnotrace keeps gRPC's
# golang.org/x/net/trace (and its html/template) out, and so the linker's dead-code elimination of
# methods in (docs/deploy.md).
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOFLAGS= GOPROXY="$GOPROXY" go build -trimpath -buildvcs=false -tags grpcnotrace \
      -ldflags "-s -w -X main.version=$VERSION -X main.revision=$REVISION" \
      -o /out/sluice ./cmd/sluice && \
    mkdir -p /out/data && chmod 0700 /out/data

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY deploy/docker/passwd deploy/docker/group /etc/
COPY --from=build --chown=65532:65532 /out/data /data
COPY --from=build /out/sluice /usr/local/bin/sluice
# The client API on every interface of the container, the admin API (with
# /metrics) on its loopback (see above to expose it). Production mode: JSON
# logs, and the admin API needs SLUICE_ADMIN_TOKEN (at least 32 bytes).
ENV SLUICE_DATA_DIR=/data \
    SLUICE_LISTEN=0.0.0.0:8080 \
    SLUICE_ADMIN_LISTEN=127.0.0.1:8081 \
    SLUICE_ENV=production
USER 65532:65532
VOLUME /data
EXPOSE 8080 8081
# SIGTERM drains: the listener closes, calls in flight finish (up to 30 s),
# the ledger is flushed, then the process exits.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/sluice", "serve"]
