#!/usr/bin/env bash
# Builds doublerun's local Postgres and PgBouncer images from Debian packages,
# for Docker engines that cannot reach a container registry.
#
#   debootstrap (minbase bookworm) -> docker import -> small Dockerfile per image
#
# Idempotent: an image that already exists is left alone. The root filesystem
# is built outside the repository (gremlins copies the whole module root for
# every worker), under $DOUBLERUN_IMAGE_WORKDIR.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
base=${DOUBLERUN_BASE_IMAGE:-doublerun/bookworm-base:local}
pg=${DOUBLERUN_POSTGRES_IMAGE:-doublerun/postgres:15-local}
pgb=${DOUBLERUN_PGBOUNCER_IMAGE:-doublerun/pgbouncer:1.18-local}
workdir=${DOUBLERUN_IMAGE_WORKDIR:-/var/tmp/doublerun-images}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

log() { printf 'images: %s\n' "$*" >&2; }
have() { docker image inspect "$1" >/dev/null 2>&1; }
# recipe hashes an image's build directory; an image built from an older
# recipe is rebuilt, so a changed entrypoint never goes untested.
recipe() { (cd "$here/$1" && cat Dockerfile ./*.sh 2>/dev/null) | sha256sum | cut -c1-16; }
current() { [ "$(docker image inspect -f '{{index .Config.Labels "io.doublerun.recipe"}}' "$1" 2>/dev/null)" = "$(recipe "$2")" ]; }

if ! docker info >/dev/null 2>&1; then
  log "docker engine not answering; start dockerd or use DOUBLERUN_PROVIDER=native"
  exit 1
fi

if current "$pg" postgres && current "$pgb" pgbouncer; then
  log "$pg and $pgb already present; nothing to do"
  exit 0
fi

if ! have "$base"; then
  if [ "$(id -u)" != 0 ]; then
    log "building the base image needs root (debootstrap and chroot); rerun with sudo"
    exit 1
  fi
  if ! command -v debootstrap >/dev/null; then
    log "debootstrap not found; install it: apt-get install -y debootstrap"
    exit 1
  fi
  root="$workdir/rootfs"
  rm -rf "$root"
  mkdir -p "$workdir"
  trap 'umount "$root/proc" 2>/dev/null || true; rm -rf "$root"' EXIT
  start=$(date +%s)
  log "debootstrap bookworm into $root (about a minute)"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$workdir/debootstrap.log" 2>&1 ||
    { tail -20 "$workdir/debootstrap.log" >&2; log "debootstrap failed; see $workdir/debootstrap.log"; exit 1; }
  log "installing postgresql-15 and pgbouncer into the root filesystem"
  # Keep the package's postinst from creating and starting a cluster.
  mkdir -p "$root/etc/postgresql-common/createcluster.d"
  echo "create_main_cluster = false" >"$root/etc/postgresql-common/createcluster.d/doublerun.conf"
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod +x "$root/usr/sbin/policy-rc.d"
  mount -t proc proc "$root/proc"
  chroot "$root" /bin/sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 pgbouncer ca-certificates && apt-get clean && rm -rf /var/lib/apt/lists/*' \
    >"$workdir/apt.log" 2>&1 || { tail -20 "$workdir/apt.log" >&2; log "apt-get in chroot failed; see $workdir/apt.log"; exit 1; }
  umount "$root/proc"
  rm -f "$root/usr/sbin/policy-rc.d"
  log "importing the root filesystem as $base"
  tar -C "$root" -c . | docker import - "$base" >/dev/null
  rm -rf "$root"
  trap - EXIT
  log "base image built in $(( $(date +%s) - start ))s"
fi

for spec in "$pg postgres" "$pgb pgbouncer"; do
  set -- $spec
  if ! current "$1" "$2"; then
    log "building $1"
    mkdir -p "$workdir"
    docker build -q --build-arg BASE="$base" --label "io.doublerun.recipe=$(recipe "$2")" -t "$1" "$here/$2" \
      >/dev/null 2>"$workdir/build-$2.log" || { cat "$workdir/build-$2.log" >&2; log "docker build of $1 failed"; exit 1; }
  fi
done
log "ready: DOUBLERUN_POSTGRES_IMAGE=$pg DOUBLERUN_PGBOUNCER_IMAGE=$pgb"
