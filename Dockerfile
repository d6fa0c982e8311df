# syntax=docker/dockerfile:1.7
# The verdict image: the one `verdict` binary (CLI, `verdict scheduler`, `verdict worker`) on a
# small Debian runtime with git (workers and intake shell out to it) and CA certificates.
#
#   docker build --build-arg VERDICT_GIT_COMMIT="$(git rev-parse HEAD)" -t REGISTRY/verdict:TAG .
#   docker run --rm REGISTRY/verdict:TAG --help
#
# Needs BuildKit (the default builder of Docker 23+) for the cache mounts: the cargo registry and
# the target directory survive between builds, so a source change recompiles verdict's own
# crates only, not its dependencies. The runtime runs as UID/GID 10001 and writes only to
# /var/cache/verdict (repository mirrors and snapshots) and /tmp; mount both writable when the
# root filesystem is read-only (the Helm chart does).

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=trixie

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
# The source commit, shown by verdict_build_info{commit} (read at compile time; .git is not in
# the build context).
ARG VERDICT_GIT_COMMIT=unknown
ENV VERDICT_GIT_COMMIT=${VERDICT_GIT_COMMIT}
WORKDIR /src
# .dockerignore keeps target/, .git and everything the build does not read out of the context.
COPY . .
RUN --mount=type=cache,id=verdict-cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=verdict-cargo-git,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,id=verdict-target,target=/src/target,sharing=locked \
    cargo build --release --locked -p verdict --bin verdict \
 && install -D -m 0755 target/release/verdict /out/verdict

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# tini is PID 1: it forwards SIGTERM to verdict (which drains, SPEC Q4) and reaps the git
# helpers (git-remote-https, …) that are orphaned when verdict kills a git process at its time
# limit; verdict itself reaps only its own children.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 verdict \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/verdict --create-home \
      --shell /usr/sbin/nologin verdict \
 && install -d -o 10001 -g 10001 -m 0750 /var/cache/verdict
COPY --from=build /out/verdict /usr/local/bin/verdict
USER 10001:10001
ENV HOME=/home/verdict
WORKDIR /home/verdict
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/verdict"]
CMD ["--help"]
