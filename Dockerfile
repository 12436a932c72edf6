# The `kinformer` program as a container image (docs/deploy.md).
#
#   docker build -t kinformer:0.1.0 .
#   docker run --rm kinformer:0.1.0 run --for 10s   # no cluster: the embedded API server
#
# Three stages: `skeleton` keeps the manifests, the lock file and a stub in
# every Rust file, so `builder` compiles the dependencies in a layer that only
# a manifest, Cargo.lock or a new file invalidates; `builder` then compiles the
# sources; the runtime image holds the binary and the default configuration.
# tests/deploy.rs checks these conventions, and runs the builder's steps on the
# host (ignored test, see docs/deploy.md); CI lints this file with hadolint.

# The toolchain CI uses (Cargo.toml's rust-version is the oldest that builds).
ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS skeleton
WORKDIR /src
COPY . .
# Every .rs file becomes `fn main() {}` (valid as a library, a binary, a test,
# an example or a bench); everything else but Cargo.toml and Cargo.lock goes.
RUN printf 'fn main() {}\n' > ../stub.rs \
    && find . -name '*.rs' -exec cp ../stub.rs {} \; \
    && find . -type f ! -name '*.rs' ! -name Cargo.toml ! -name Cargo.lock -delete

FROM rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
COPY --from=skeleton /src ./
# Dependencies, downloaded then compiled against the stubs: cached until a
# manifest or the lock file changes. Nothing is downloaded after this.
RUN cargo fetch --locked \
    && cargo build --release --locked --offline --bin kinformer
COPY . .
# COPY keeps the context's modification times, older than the stub build's:
# without the touch, cargo would take the stubs' artifacts as fresh.
RUN find . -name '*.rs' -exec touch {} + \
    && cargo build --release --locked --offline --bin kinformer

# Runtime: distroless `cc` is Debian 12's glibc, libgcc and CA certificates
# and nothing else (no shell, no package manager), matching the bookworm
# builder's glibc; kinformer needs no more (rustls, no OpenSSL). Its `nonroot`
# variant runs as uid 65532. For reproducible builds pin it by digest.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /src/target/release/kinformer /usr/local/bin/kinformer
# The default configuration (the repository's config.toml: ConfigMaps, two
# subscribers). deploy/configmap.yaml mounts the cluster's over it.
COPY config.toml /etc/kinformer/config.toml
ENV KINFORMER_CONFIG=/etc/kinformer/config.toml
# Numeric, so the kubelet can check `runAsNonRoot` against it.
USER 65532:65532
# Prometheus metrics, /healthz and /readyz with `--metrics 0.0.0.0:9898`.
EXPOSE 9898
ENTRYPOINT ["/usr/local/bin/kinformer"]
CMD ["run", "--metrics", "0.0.0.0:9898"]
