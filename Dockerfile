# syntax=docker/dockerfile:1
# Fleetlens: server + built dashboard + agent in one image (the agent runs from the same image
# in a DaemonSet with the NVIDIA runtime; NVML comes from the host driver at run time).

FROM rust:1.95-bookworm AS build
WORKDIR /src
RUN apt-get update && apt-get install -y --no-install-recommends nodejs npm && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cargo build --release --locked -p fleetlens-server -p fleetlens-agent \
 && ./frontend/build.sh

FROM debian:bookworm-slim AS runtime
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/fleetlens --create-home fleetlens
COPY --from=build /src/target/release/fleetlens-server /src/target/release/fleetlens-agent /usr/local/bin/
COPY --from=build /src/frontend/dist /usr/share/fleetlens/dist
USER fleetlens
WORKDIR /var/lib/fleetlens
ENV FLEETLENS_LISTEN=0.0.0.0:8080 \
    FLEETLENS_DATABASE_URL=sqlite:///var/lib/fleetlens/fleetlens.db \
    FLEETLENS_STATIC_DIR=/usr/share/fleetlens/dist \
    FLEETLENS_LOG_FORMAT=json
EXPOSE 8080
VOLUME ["/var/lib/fleetlens"]
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s CMD curl -fsS http://127.0.0.1:8080/readyz || exit 1
ENTRYPOINT ["/usr/local/bin/fleetlens-server"]
