# The tailguard image: the `tailguard` binary (proxy, serve, load, ...) on Debian slim, run as a
# non-root user. docs/deploy.md says what of it is checked without a Docker engine.
#
#   docker build -t ghcr.io/tailguard/tailguard:0.1.0 .

# The toolchain this repository is tested with (at least the workspace's rust-version).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# The command `make build` runs (a test checks they are the same): the release profile, fat LTO,
# plus the `kube` feature (EndpointSlice discovery) that a pod's sidecar may use.
RUN cargo build --release --locked --features kube \
    && cp target/release/tailguard /tailguard

# Debian slim rather than distroless: the lab's rendered Job prints its results with `cat`.
FROM debian:bookworm-slim
COPY --from=build /tailguard /usr/local/bin/tailguard
# The sidecar's and serve's user in the manifests (runAsUser 65532, runAsNonRoot).
USER 65532:65532
EXPOSE 4140 4143 9990
ENTRYPOINT ["/usr/local/bin/tailguard"]
