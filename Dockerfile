# The Tusk operator image: one static binary, nothing else.
#
#   docker build -t tusk .                    (BuildKit)
#   podman build -t tusk .   /   buildah bud -t tusk .
#
# The same image serves every role: the operator Deployment runs `tusk operator`,
# and Postgres pods run it as an init container that copies /usr/local/bin/tusk
# into a shared volume for the stock postgres container to run.
#
# RUST_IMAGE lets a build use another Rust toolchain image; the local test
# cluster passes one built without a registry (e2e/images/build-all).

ARG RUST_IMAGE=docker.io/library/rust:1-bookworm

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
# A static-pie glibc binary: it runs in an empty root file system (no libc, no
# NSS at run time). The registry, git and target dirs are cache mounts, so a
# rebuild only compiles what changed; the binary is copied out of the target
# cache in the same step. The target cache may hold a build of another
# checkout whose files are newer than these (cargo judges freshness by mtime),
# so this crate's sources are touched: it always rebuilds, its dependencies not.
RUN --mount=type=cache,id=tusk-cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=tusk-cargo-git,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,id=tusk-target,target=/src/target,sharing=locked \
    set -eux; \
    find src -name '*.rs' -exec touch {} +; \
    RUSTFLAGS="-C target-feature=+crt-static" \
        cargo build --release --locked --target x86_64-unknown-linux-gnu --bin tusk; \
    mkdir -p /out/usr/local/bin /out/etc/ssl/certs /out/tmp; \
    install -m 0755 target/x86_64-unknown-linux-gnu/release/tusk /out/usr/local/bin/tusk; \
    chmod 1777 /out/tmp; \
    if [ -f /etc/ssl/certs/ca-certificates.crt ]; then \
        cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/; \
    fi; \
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >/out/etc/passwd; \
    printf 'root:x:0:\nnonroot:x:65532:\n' >/out/etc/group

FROM scratch
ARG VERSION=dev
LABEL org.opencontainers.image.title="tusk" \
      org.opencontainers.image.description="Tusk: a PostgreSQL operator for Kubernetes (operator, instance manager and kubectl plugin in one static binary)" \
      org.opencontainers.image.source="https://github.com/tusk-dev/tusk" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/ /
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/tusk"]
