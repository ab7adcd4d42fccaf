# tollgate's container image: a static binary built on the official Rust
# image, run from an empty base as a non-root user.
#
#   docker build -t tollgate .            # or: podman build -t tollgate .
#   docker run --rm -p 8080:8080 -p 8081:8081 \
#     -v "$PWD/rules:/etc/tollgate/rules:ro" tollgate
#
# The entry point is `tollgate serve`; the default arguments listen on every
# interface (HTTP on 8080: /json, /v1/*, /healthz, /readyz, /metrics; gRPC on
# 8081) and read the rules mounted at /etc/tollgate/rules. Arguments given to
# `docker run` replace them (they are `serve`'s flags). The base is empty: no
# shell, no CA certificates (for rediss:// give --redis-tls-ca a mounted
# file). scripts/check-image checks the runtime stage.

FROM docker.io/library/rust:1-bookworm AS build
WORKDIR /src
COPY . .
# glibc linked statically (crt-static), so the binary needs no shared
# library at run time; the target is named so build scripts and proc macros
# stay dynamic.
RUN target="$(uname -m)-unknown-linux-gnu" \
 && RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked -p tollgate --target "$target" \
 && cp "target/$target/release/tollgate" /tollgate

FROM scratch AS runtime
COPY --from=build /tollgate /tollgate
# 65532: the conventional "nonroot" user of distroless images.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/tollgate", "serve"]
CMD ["--http", "0.0.0.0:8080", "--grpc", "0.0.0.0:8081", "--rules", "/etc/tollgate/rules"]
