# syntax=docker/dockerfile:1
# Fleetlens: server + built dashboard + agent in one image. The server is the entrypoint; the
# agent runs from the same image (`--entrypoint /usr/local/bin/fleetlens-agent`, or `command:`
# in Kubernetes) in a DaemonSet with the NVIDIA runtime: NVML (libnvidia-ml.so.1) comes from the
# host driver at run time, injected by the NVIDIA Container Toolkit, so nothing of CUDA is here.
#
#   docker build -t fleetlens:dev .
#   docker run -p 8080:8080 -e FLEETLENS_ADMIN_TOKEN=… fleetlens:dev            # SQLite in the volume
#   docker compose up -d                                                       # with PostgreSQL

ARG RUST_VERSION=1.95
ARG DEBIAN=bookworm

FROM rust:${RUST_VERSION}-${DEBIAN} AS build
WORKDIR /src
# npm: binaryen's wasm-opt for the dashboard; zopfli: its precompressed files (frontend/build.sh
# installs the rest: the wasm32 target and wasm-bindgen-cli at the Cargo.lock version).
RUN apt-get update \
 && apt-get install -y --no-install-recommends nodejs npm zopfli \
 && rm -rf /var/lib/apt/lists/*
COPY . .
# Caches survive between builds (registry, git checkouts, target); the binaries and the dashboard
# are copied out of the cached target into /out, which the next stage copies from.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    --mount=type=cache,target=/src/.tools \
    cargo build --release --locked -p fleetlens-server -p fleetlens-agent \
 && ./frontend/build.sh \
 && mkdir -p /out/bin \
 && cp target/release/fleetlens-server target/release/fleetlens-agent /out/bin/ \
 && cp -r frontend/dist /out/dist

FROM debian:${DEBIAN}-slim AS runtime
# ca-certificates: HTTPS to PostgreSQL (sslmode), Slack and webhooks; curl: the health check.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/fleetlens --create-home \
      --shell /usr/sbin/nologin fleetlens
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build /out/dist /usr/share/fleetlens/dist
# Numeric, so Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
WORKDIR /var/lib/fleetlens
ENV FLEETLENS_LISTEN=0.0.0.0:8080 \
    FLEETLENS_DATABASE_URL=sqlite:///var/lib/fleetlens/fleetlens.db \
    FLEETLENS_STATIC_DIR=/usr/share/fleetlens/dist \
    FLEETLENS_LOG_FORMAT=json \
    FLEETLENS_SPOOL_DIR=/var/lib/fleetlens/spool
EXPOSE 8080
VOLUME ["/var/lib/fleetlens"]
# /readyz: the process answers and its database does (a replica that lost PostgreSQL turns
# unhealthy; liveness alone is /healthz). The agent overrides or disables this check.
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8080/readyz >/dev/null || exit 1
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/fleetlens-server"]
