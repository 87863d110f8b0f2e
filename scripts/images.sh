#!/usr/bin/env bash
# Builds every runtime image of docker/Dockerfile with no internet registry
# and pushes them to a local registry, as a user with a private registry
# would. Prints `export` lines for the real-node lane:
#
#   eval "$(scripts/images.sh)"
#
# - Docker: Debian's docker.io daemon (20.10, BuildKit), started here on a
#   socket of its own with no iptables rules, no bridge and no IP
#   forwarding (the host is left as it was), its data cached in
#   ~/.cache/flexinfer/docker, and stopped at the end.
# - Bases: nothing can be pulled, so stand-ins carry the names the
#   Dockerfile uses (test-only; users keep the real bases):
#   gcr.io/distroless/cc-debian12:nonroot from the Debian packages
#   distroless/cc holds (libc6, libgcc-s1, libstdc++6, libssl3, ca-certificates, tzdata,
#   base-files, netbase; a passwd entry for 65532; no shell), and
#   debian:bookworm-slim from `debootstrap --variant=minbase`. Built once,
#   kept as tarballs in ~/.cache/flexinfer/images.
# - Binaries: the Dockerfile's build stage compiles in a container, which
#   would double the cold CI build. The lane feeds the runtime targets the
#   binaries the test suite already built on the host instead
#   (--build-arg BINARIES=<image of them>; the build stage is skipped),
#   stripped of debug information. The Dockerfile's build stage itself is
#   not run here (see docs/images.md).
# - The `# syntax=` line of docker/Dockerfile makes BuildKit fetch its
#   frontend from Docker Hub: the build reads a copy without it (the
#   daemon's built-in frontend builds the rest as written).
# - Registry: Debian's docker-registry on 127.0.0.1:5000
#   (FLEXINFER_REGISTRY_ADDR to change it; storage in
#   ~/.cache/flexinfer/registry), running while images are pushed; the
#   lane starts it again to serve them.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE="${HOME}/.cache/flexinfer"
IMAGES="$CACHE/images"
PROFILE_DIR="${CARGO_TARGET_DIR:-$ROOT/target}/${FLEXINFER_IMAGES_PROFILE:-debug}"
# The registry's host:port. (Not FLEXINFER_IMAGE_REGISTRY: that is this
# script's output, `<registry>/flexinfer`, and a shell that evaluated a
# previous run has it set.)
REGISTRY="${FLEXINFER_REGISTRY_ADDR:-127.0.0.1:5000}"
TAG="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' helm/flexinfer/Chart.yaml)"
DOCKER=/usr/bin/docker
SOCK=/run/flexinfer-docker.sock
export DOCKER_HOST="unix://$SOCK" DOCKER_BUILDKIT=1
log() { echo "images: $*" >&2; }

need=()
[ -x /usr/sbin/dockerd ] || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
[ -x /usr/bin/docker-registry ] || need+=(docker-registry)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >&2
fi
mkdir -p "$IMAGES" "$CACHE/docker" "$CACHE/registry"

# --- the daemon -------------------------------------------------------------
started_docker=0
if ! $DOCKER info >/dev/null 2>&1; then
  /usr/sbin/dockerd --data-root "$CACHE/docker/data" --exec-root /run/flexinfer-docker \
    --host "unix://$SOCK" --pidfile /run/flexinfer-docker.pid \
    --iptables=false --ip-forward=false --ip-masq=false --bridge=none \
    >"$CACHE/docker/dockerd.log" 2>&1 &
  started_docker=1
  for _ in $(seq 100); do $DOCKER info >/dev/null 2>&1 && break; sleep 0.2; done
  $DOCKER info >/dev/null 2>&1 || { log "dockerd did not start: $CACHE/docker/dockerd.log"; exit 1; }
fi
registry_pid=""
cleanup() {
  [ -n "$registry_pid" ] && kill "$registry_pid" 2>/dev/null || true
  if [ "$started_docker" = 1 ] && [ -f /run/flexinfer-docker.pid ]; then
    kill "$(cat /run/flexinfer-docker.pid)" 2>/dev/null || true
    for _ in $(seq 50); do [ -f /run/flexinfer-docker.pid ] || break; sleep 0.2; done
    # The cgroup folders the daemon made (it never removes them).
    for c in /sys/fs/cgroup/*/docker; do [ -d "$c" ] && rmdir "$c" 2>/dev/null; done
  fi
  return 0
}
trap cleanup EXIT

# --- stand-in bases -----------------------------------------------------------
distroless="$IMAGES/distroless-cc-debian12-v3.tar"
if [ ! -s "$distroless" ]; then
  log "stand-in gcr.io/distroless/cc-debian12:nonroot from Debian packages"
  work=$(mktemp -d)
  (cd "$work" && apt-get download -q libc6 libgcc-s1 libstdc++6 libssl3 ca-certificates tzdata base-files netbase >&2)
  mkdir "$work/root"
  for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
  # distroless/cc's users and its CA bundle (ca-certificates' postinst
  # would generate the bundle; the machine's is the same list).
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$work/root/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$work/root/etc/group"
  mkdir -p "$work/root/etc/ssl/certs" "$work/root/home/nonroot" "$work/root/tmp"
  cp /etc/ssl/certs/ca-certificates.crt "$work/root/etc/ssl/certs/"
  chmod 1777 "$work/root/tmp"
  chown 65532:65532 "$work/root/home/nonroot"
  rm -rf "$work/root/usr/share/doc" "$work/root/usr/share/man" "$work/root/usr/share/lintian"
  tar -C "$work/root" -cf "$distroless.tmp" .
  mv "$distroless.tmp" "$distroless"
  rm -rf "$work"
fi
debian="$IMAGES/debian-bookworm-slim.tar"
if [ ! -s "$debian" ]; then
  log "stand-in debian:bookworm-slim (debootstrap --variant=minbase, about 2 minutes)"
  work=$(mktemp -d)
  debootstrap --variant=minbase bookworm "$work/root" http://deb.debian.org/debian >&2
  chroot "$work/root" apt-get clean
  rm -rf "$work/root/var/lib/apt/lists"/* "$work/root/usr/share/doc" "$work/root/usr/share/man"
  tar -C "$work/root" -cf "$debian.tmp" .
  mv "$debian.tmp" "$debian"
  rm -rf "$work"
fi
[ "$($DOCKER image inspect -f '{{index .Config.Labels "flexinfer.stand-in"}}' gcr.io/distroless/cc-debian12:nonroot 2>/dev/null)" = 3 ] \
  || $DOCKER import -c 'USER 65532:65532' -c 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
       -c 'LABEL flexinfer.stand-in=3' \
       -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
       "$distroless" gcr.io/distroless/cc-debian12:nonroot >&2
$DOCKER image inspect debian:bookworm-slim >/dev/null 2>&1 \
  || $DOCKER import -c 'CMD ["bash"]' "$debian" debian:bookworm-slim >&2

# --- the binaries -----------------------------------------------------------------
bins=(flexinfer-gateway flexinfer-operator flexinfer-sched flexinfer-agent
      flexinfer-flashload flexinfer-bench flexinfer-sim flexinfer-conformance)
stage=$(mktemp -d)
for bin in "${bins[@]}"; do
  [ -x "$PROFILE_DIR/$bin" ] || { log "missing $PROFILE_DIR/$bin: cargo build --workspace --bins first"; exit 1; }
  objcopy --strip-debug "$PROFILE_DIR/$bin" "$stage/$bin"
done
printf 'FROM scratch\nCOPY . /out/\n' >"$stage/Dockerfile"
$DOCKER build -q -t flexinfer-host-binaries:local "$stage" >&2
rm -rf "$stage"

# --- the runtime targets ------------------------------------------------------------
dockerfile=$(mktemp)
sed '/^# syntax=/d' docker/Dockerfile >"$dockerfile"
targets=$(sed -n 's/^FROM .* AS \(flexinfer-[a-z-]*\)$/\1/p' docker/Dockerfile)
for target in $targets; do
  log "building $target"
  $DOCKER build -q --network host -f "$dockerfile" --target "$target" \
    --build-arg BINARIES=flexinfer-host-binaries:local \
    -t "$REGISTRY/flexinfer/$target:$TAG" . >&2
done
rm -f "$dockerfile"

# Images of GAIE's conformance suite, by their names without the registry.
ECHO_BASIC_IMAGE=k8s-staging-gateway-api/echo-basic:v20251106-v1.3.0-263-g47c3435c
LWEPP_IMAGE=gateway-api-inference-extension/lwepp:v1.6.0
foreign=""

# --- the real node's own images: the pod sandbox's pause program and CoreDNS
# (scripts/real-node.sh builds both) --------------------------------------------------------
if [ -n "${FLEXINFER_REAL_NODE:-}" ] && [ -x "$FLEXINFER_REAL_NODE/pause" ]; then
  node_stage=$(mktemp -d)
  cp "$FLEXINFER_REAL_NODE/pause" "$FLEXINFER_REAL_NODE/coredns" "$node_stage/"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$node_stage/Dockerfile.pause"
  printf 'FROM gcr.io/distroless/cc-debian12:nonroot\nCOPY coredns /coredns\nUSER 65532:65532\nENTRYPOINT ["/coredns"]\n' >"$node_stage/Dockerfile.coredns"
  $DOCKER build -q -f "$node_stage/Dockerfile.pause" -t "$REGISTRY/flexinfer/pause:3.10" "$node_stage" >&2
  $DOCKER build -q -f "$node_stage/Dockerfile.coredns" -t "$REGISTRY/flexinfer/coredns:latest" "$node_stage" >&2
  # The chart's second kube-scheduler (scheduler.enabled), from the control
  # plane's binary, under the name and tag the chart derives from the
  # cluster's version (registry.k8s.io's image holds it in /usr/local/bin).
  kube_version=""
  if [ -n "${FLEXINFER_CONTROL_PLANE:-}" ] && [ -x "$FLEXINFER_CONTROL_PLANE/kube-scheduler" ]; then
    kube_version=$("$FLEXINFER_CONTROL_PLANE/kube-scheduler" --version | awk '{print $2}')
    cp "$FLEXINFER_CONTROL_PLANE/kube-scheduler" "$node_stage/"
    printf 'FROM gcr.io/distroless/cc-debian12:nonroot\nCOPY kube-scheduler /usr/local/bin/kube-scheduler\n' >"$node_stage/Dockerfile.kube-scheduler"
    $DOCKER build -q -f "$node_stage/Dockerfile.kube-scheduler" -t "$REGISTRY/flexinfer/kube-scheduler:$kube_version" "$node_stage" >&2
  fi
  # A llama.cpp server image laid out as the official ones
  # (ghcr.io/ggml-org/llama.cpp:server: /app/llama-server as entrypoint),
  # from the llama-server scripts/real-node.sh built, as user 65532.
  llama=""
  if [ -x "$FLEXINFER_REAL_NODE/llama-server" ]; then
    cp "$FLEXINFER_REAL_NODE/llama-server" "$node_stage/"
    printf 'FROM gcr.io/distroless/cc-debian12:nonroot\nCOPY llama-server /app/llama-server\nEXPOSE 8080\nENTRYPOINT ["/app/llama-server"]\n' >"$node_stage/Dockerfile.llama"
    $DOCKER build -q -f "$node_stage/Dockerfile.llama" -t "$REGISTRY/flexinfer/llama.cpp:server" "$node_stage" >&2
    llama=" llama.cpp"
  fi
  # The Gateway API Inference Extension's conformance backends
  # (scripts/gateway-api.sh builds them), under the names its suite's
  # manifests use; the real node's containerd takes gcr.io and
  # registry.k8s.io from this registry.
  if [ -x "${FLEXINFER_ECHO_BASIC:-}" ] && [ -x "${FLEXINFER_LWEPP:-}" ]; then
    cp "$FLEXINFER_ECHO_BASIC" "$node_stage/echo-basic"
    cp "$FLEXINFER_LWEPP" "$node_stage/lwepp"
    printf 'FROM scratch\nCOPY echo-basic /echo-basic\nUSER 65532:65532\nENTRYPOINT ["/echo-basic"]\n' >"$node_stage/Dockerfile.echo"
    printf 'FROM scratch\nCOPY lwepp /lwepp\nUSER 65532:65532\nENTRYPOINT ["/lwepp"]\n' >"$node_stage/Dockerfile.lwepp"
    $DOCKER build -q -f "$node_stage/Dockerfile.echo" -t "$REGISTRY/$ECHO_BASIC_IMAGE" "$node_stage" >&2
    $DOCKER build -q -f "$node_stage/Dockerfile.lwepp" -t "$REGISTRY/$LWEPP_IMAGE" "$node_stage" >&2
    foreign="$REGISTRY/$ECHO_BASIC_IMAGE $REGISTRY/$LWEPP_IMAGE"
  fi
  rm -rf "$node_stage"
  targets="$targets pause coredns${kube_version:+ kube-scheduler}$llama"
  tag_of() { case $1 in pause) echo 3.10;; coredns) echo latest;; kube-scheduler) echo "$kube_version";; llama.cpp) echo server;; *) echo "$TAG";; esac; }
else
  tag_of() { echo "$TAG"; }
fi

# --- the registry ----------------------------------------------------------------------
cat >"$CACHE/registry/config.yml" <<EOF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $CACHE/registry/data}
  delete: {enabled: true}
http: {addr: $REGISTRY}
EOF
if ! curl -fsS "http://$REGISTRY/v2/" >/dev/null 2>&1; then
  /usr/bin/docker-registry serve "$CACHE/registry/config.yml" >"$CACHE/registry/registry.log" 2>&1 &
  registry_pid=$!
  for _ in $(seq 50); do curl -fsS "http://$REGISTRY/v2/" >/dev/null 2>&1 && break; sleep 0.1; done
fi
for ref in $(for target in $targets; do echo "$REGISTRY/flexinfer/$target:$(tag_of "$target")"; done) $foreign; do
  $DOCKER push -q "$ref" >&2
  size=$($DOCKER image inspect -f '{{.Size}}' "$ref")
  log "$ref $((size / 1024 / 1024)) MiB"
done

echo "export FLEXINFER_IMAGE_REGISTRY=$REGISTRY/flexinfer"
echo "export FLEXINFER_IMAGE_TAG=$TAG"
echo "export FLEXINFER_REGISTRY_CONFIG=$CACHE/registry/config.yml"
echo "images: built and pushed to $REGISTRY/flexinfer: $(echo $targets)" >&2
