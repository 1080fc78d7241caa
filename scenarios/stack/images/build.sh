#!/usr/bin/env bash
# Builds doublerun's local Postgres and PgBouncer images from Debian packages,
# for Docker engines that cannot reach a container registry. One pair of
# images per version set:
#
#   pg15-pgbouncer1.18  bookworm  doublerun/postgres:15-local  doublerun/pgbouncer:1.18-local
#   pg17-pgbouncer1.24  trixie    doublerun/postgres:17-local  doublerun/pgbouncer:1.24-local
#
#   debootstrap (minbase SUITE) + postgresql-N, pgbouncer -> docker import
#   -> one image per server: the same filesystem with its own config
#
# The images follow the contracts in the stack package's doc.go: the Postgres
# image behaves like the official one (entrypoint.sh: POSTGRES_USER,
# POSTGRES_PASSWORD, POSTGRES_DB, port 5432, "postgres -c k=v" arguments;
# stops on SIGINT, a fast shutdown); the PgBouncer image runs
# `pgbouncer /etc/pgbouncer/pgbouncer.ini` as the postgres user on 6432.
# Each image's config is set with `docker create` + `docker commit` rather
# than a Dockerfile: the legacy builder makes a container per instruction,
# which took 45-60 s an image on a loaded machine; this takes seconds.
#
# Usage: build.sh [SET...]       build these sets (default: every set)
#        build.sh --list         print "SET SUITE PG_MAJOR PGBOUNCER POSTGRES_IMAGE PGBOUNCER_IMAGE" per set
#        build.sh --mirror [ROOT] print the Debian mirror found in ROOT/etc (default: /etc)
#
# The stack package embeds this directory and runs it on first use when the
# docker provider needs local images; `make images` runs it directly.
#
# Idempotent: an image built from the current recipe (label
# io.doublerun.recipe) is left alone. Builds are serialised across processes
# with flock on $DOUBLERUN_IMAGE_WORKDIR/build.lock, so test binaries that
# start at the same time build once. The root filesystem is built outside
# the repository (gremlins copies the whole module root for every worker),
# under $DOUBLERUN_IMAGE_WORKDIR.
#
# The Debian mirror is the one in the host's apt sources (the first source
# that serves the host's own suite); DEBIAN_MIRROR overrides it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
workdir=${DOUBLERUN_IMAGE_WORKDIR:-/var/tmp/doublerun-images}

# name suite postgres-major pgbouncer-major.minor postgres-image pgbouncer-image
sets=(
  "pg15-pgbouncer1.18 bookworm 15 1.18 doublerun/postgres:15-local doublerun/pgbouncer:1.18-local"
  "pg17-pgbouncer1.24 trixie 17 1.24 doublerun/postgres:17-local doublerun/pgbouncer:1.24-local"
)

log() { printf 'images: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

label() { docker image inspect -f '{{index .Config.Labels "io.doublerun.recipe"}}' "$1" 2>/dev/null || true; }
hash() { sha256sum | cut -c1-16; }

# prepare_root ROOT: what both images need beyond the packages.
prepare_root() {
  install -m 0755 "$here/entrypoint.sh" "$1/usr/local/bin/docker-entrypoint.sh"
  mkdir -p "$1/var/lib/postgresql/data" "$1/var/run/postgresql" "$1/etc/pgbouncer"
  chroot "$1" chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql /etc/pgbouncer
  chmod 0700 "$1/var/lib/postgresql/data"
  rm -rf "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/usr/share/info/*
}

# create_args KIND PG_MAJOR prints the `docker create` arguments, then the
# command, of the postgres or the pgbouncer image, one a line.
create_args() {
  local path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  case "$1" in
  postgres)
    printf '%s\n' --user postgres --stop-signal SIGINT --expose 5432 \
      -e "PATH=/usr/lib/postgresql/$2/bin:$path" -e PGDATA=/var/lib/postgresql/data -e LANG=C.UTF-8 \
      --entrypoint /usr/local/bin/docker-entrypoint.sh postgres
    ;;
  pgbouncer)
    printf '%s\n' --user postgres --expose 6432 -e "PATH=$path" \
      --entrypoint /usr/sbin/pgbouncer /etc/pgbouncer/pgbouncer.ini
    ;;
  esac
}

# template_user is the stack's superuser (stack.User), for whom the Postgres
# image carries a cluster made at build time (bake_template).
template_user=doublerun

# bake_script PG_MAJOR prints the shell script that makes that cluster, as
# entrypoint.sh would make a new one but with no password (entrypoint.sh
# sets it on its copy), and packs it in /var/lib/postgresql/template-USER.tar:
# one file to read through the image's overlay filesystem, not a thousand.
bake_script() {
  local d=/var/lib/postgresql/template-$template_user
  printf '%s\n' "set -e" \
    "/usr/lib/postgresql/$1/bin/initdb -D $d -U $template_user --auth-local=trust --auth-host=scram-sha-256 --no-sync >/dev/null" \
    "echo 'host all all all scram-sha-256' >>$d/pg_hba.conf" \
    "echo \"listen_addresses = '*'\" >>$d/postgresql.conf" \
    "tar -C $d -cf $d.tar ." \
    "rm -rf $d"
}

# bake_template SUITE PG_MAJOR runs initdb in a container of the suite's
# base image, as the postgres user with the image's locale, and commits
# it as doublerun/SUITE-pgtemplate:local, from which the Postgres image is
# made. initdb runs once per image build instead of at every container's
# first start: 49 times in one make test, 1.07 CPU-seconds each with the
# bootstrap servers it starts (process accounting, a4519b7).
bake_template() {
  local ctr rc=0
  ctr=$(docker create --user postgres -e LANG=C.UTF-8 --entrypoint /bin/sh "doublerun/$1-base:local" -c "$(bake_script "$2")") || return 1
  docker start -a "$ctr" >&2 && docker commit "$ctr" "doublerun/$1-pgtemplate:local" >/dev/null || rc=1
  docker rm "$ctr" >/dev/null || true
  return $rc
}

# The recipes: an image built from an older one is rebuilt, so a changed
# entrypoint, package or config never goes untested.
base_recipe() {
  { echo "$1 postgresql-$2 pgbouncer ca-certificates"; declare -f prepare_root; cat "$here/entrypoint.sh"; } | hash
}
recipe() {
  {
    base_recipe "$2" "$3"
    create_args "$1" "$3"
    if [ "$1" = postgres ]; then bake_script "$3"; fi
  } | hash
}

# host_mirror [ROOT] prints the first Debian archive URI in the host's apt
# sources that serves the host's own suite: one-line entries in sources.list
# and sources.list.d/*.list, and deb822 stanzas in sources.list.d/*.sources.
host_mirror() {
  local root=${1:-} codename
  codename=$(. "$root/etc/os-release" 2>/dev/null && echo "${VERSION_CODENAME:-}")
  [ -n "$codename" ] || return 0
  local files=()
  [ -f "$root/etc/apt/sources.list" ] && files+=("$root/etc/apt/sources.list")
  for f in "$root"/etc/apt/sources.list.d/*.list "$root"/etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && files+=("$f")
  done
  [ ${#files[@]} -gt 0 ] || return 0
  for f in "${files[@]}"; do
    case "$f" in
    *.sources)
      awk -v want="$codename" '
        function flush() {
          if (types ~ /(^| )deb( |$)/ && enabled !~ /^(no|false)$/ && (" " suites " ") ~ (" " want " ") && uris != "") {
            split(uris, u, " "); print u[1]; found = 1; exit
          }
          types = ""; uris = ""; suites = ""; enabled = ""
        }
        /^[ \t]*#/ { next }
        /^[ \t]*$/ { flush(); next }
        { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "") }
        key == "types" { types = $0 } key == "uris" { uris = $0 }
        key == "suites" { suites = $0 } key == "enabled" { enabled = tolower($0) }
        END { if (!found) flush() }' "$f"
      ;;
    *)
      awk -v want="$codename" '
        $1 != "deb" { next }
        { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/ && i < NF) i++; i++ } }
        $(i + 1) == want { print $i; exit }' "$f"
      ;;
    esac
  done | head -1
}

case "${1:-}" in
--list)
  printf '%s\n' "${sets[@]}"
  exit 0
  ;;
--mirror)
  host_mirror "${2:-}"
  exit 0
  ;;
esac

# The sets asked for, checked before anything slow happens.
want=()
for arg in "$@"; do
  found=
  for s in "${sets[@]}"; do
    [ "${s%% *}" = "$arg" ] && { want+=("$s"); found=1; }
  done
  [ -n "$found" ] || die "unknown version set '$arg'; known: $(printf '%s ' "${sets[@]%% *}")"
done
[ ${#want[@]} -gt 0 ] || want=("${sets[@]}")

if ! docker info >/dev/null 2>&1; then
  die "docker engine not answering; start dockerd or use DOUBLERUN_PROVIDER=native"
fi

mkdir -p "$workdir"
if command -v flock >/dev/null; then
  exec 9>>"$workdir/build.lock"
  if ! flock -n 9; then
    log "another process is building images; waiting for it"
    flock 9
  fi
fi

stale=()
for s in "${want[@]}"; do
  read -r name suite pgmajor _ pg pgb <<<"$s"
  if [ "$(label "$pg")" != "$(recipe postgres "$suite" "$pgmajor")" ] ||
    [ "$(label "$pgb")" != "$(recipe pgbouncer "$suite" "$pgmajor")" ]; then
    stale+=("$s")
  fi
done
if [ ${#stale[@]} -eq 0 ]; then
  [ -n "${DOUBLERUN_IMAGES_QUIET:-}" ] || log "images of $(printf '%s ' "${want[@]%% *}")already present; nothing to do"
  exit 0
fi

needs_base=
for s in "${stale[@]}"; do
  read -r name suite pgmajor _ <<<"$s"
  [ "$(label "doublerun/$suite-base:local")" = "$(base_recipe "$suite" "$pgmajor")" ] || needs_base=1
done
if [ -n "$needs_base" ]; then
  [ "$(id -u)" = 0 ] || die "building the base images needs root (debootstrap and chroot); rerun with sudo, or use DOUBLERUN_PROVIDER=native"
  # debootstrap and chroot live in the sbin directories, which a PATH set
  # for an unprivileged shell (or by env -i) leaves out: the package this
  # installs would not be found.
  export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
  if ! command -v debootstrap >/dev/null; then
    command -v apt-get >/dev/null || die "debootstrap not found; install it"
    log "installing debootstrap with apt-get"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap; } \
      >"$workdir/apt-host.log" 2>&1 || { tail -20 "$workdir/apt-host.log" >&2; die "apt-get install debootstrap failed; see $workdir/apt-host.log"; }
  fi
  mirror=${DEBIAN_MIRROR:-$(host_mirror)}
  [ -n "$mirror" ] || die "no Debian archive serving this host's suite in /etc/apt/sources.list{,.d}; set DEBIAN_MIRROR to a Debian archive URL"
fi

# build_base SUITE PG_MAJOR: debootstrap, the two packages, prepare_root,
# docker import.
build_base() {
  local suite=$1 pgmajor=$2 base="doublerun/$1-base:local"
  [ "$(label "$base")" = "$(base_recipe "$suite" "$pgmajor")" ] && return 0
  local root="$workdir/rootfs-$suite"
  rm -rf "$root"
  trap 'umount "'"$root"'/proc" 2>/dev/null || true; rm -rf "'"$root"'"' EXIT
  log "$suite: debootstrap into $root from $mirror (about a minute)"
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$workdir/debootstrap-$suite.log" 2>&1 ||
    { tail -20 "$workdir/debootstrap-$suite.log" >&2; die "debootstrap $suite failed; see $workdir/debootstrap-$suite.log"; }
  log "$suite: installing postgresql-$pgmajor and pgbouncer into the root filesystem"
  # Keep the package's postinst from creating and starting a cluster.
  mkdir -p "$root/etc/postgresql-common/createcluster.d"
  echo "create_main_cluster = false" >"$root/etc/postgresql-common/createcluster.d/doublerun.conf"
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod +x "$root/usr/sbin/policy-rc.d"
  mount -t proc proc "$root/proc"
  chroot "$root" /bin/sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-$pgmajor pgbouncer ca-certificates && apt-get clean && rm -rf /var/lib/apt/lists/*" \
    >"$workdir/apt-$suite.log" 2>&1 || { tail -20 "$workdir/apt-$suite.log" >&2; die "apt-get in the $suite chroot failed; see $workdir/apt-$suite.log"; }
  umount "$root/proc"
  rm -f "$root/usr/sbin/policy-rc.d"
  prepare_root "$root"
  log "$suite: importing the root filesystem as $base"
  tar -C "$root" -c . | docker import -c "LABEL io.doublerun.recipe=$(base_recipe "$suite" "$pgmajor")" - "$base" >/dev/null
  rm -rf "$root"
  trap - EXIT
}

# check_version IMAGE BINARY WANT: the image's BINARY --version names WANT.
check_version() {
  local got
  got=$(docker run --rm --entrypoint "$2" "$1" --version 2>&1 | head -1)
  case "$got" in
  *" $3"*) log "$1: $got" ;;
  *) die "$1 has '$got', expected $2 $3; the suite's package changed, update the version set" ;;
  esac
}

for s in "${stale[@]}"; do
  read -r name suite pgmajor pgbversion pg pgb <<<"$s"
  start=$(date +%s)
  build_base "$suite" "$pgmajor"
  for spec in "$pg postgres" "$pgb pgbouncer"; do
    read -r image kind <<<"$spec"
    want_label=$(recipe "$kind" "$suite" "$pgmajor")
    [ "$(label "$image")" = "$want_label" ] && continue
    log "$name: making $image"
    from="doublerun/$suite-base:local"
    if [ "$kind" = postgres ]; then
      bake_template "$suite" "$pgmajor" || die "initdb in doublerun/$suite-base:local failed"
      from="doublerun/$suite-pgtemplate:local"
    fi
    mapfile -t args < <(create_args "$kind" "$pgmajor")
    ctr=$(docker create "${args[@]:0:${#args[@]}-1}" "$from" "${args[-1]}") &&
      docker commit -c "LABEL io.doublerun.recipe=$want_label" "$ctr" "$image" >/dev/null &&
      docker rm "$ctr" >/dev/null || die "making $image from $from failed"
    if [ "$kind" = postgres ]; then docker rmi "$from" >/dev/null || true; fi
  done
  check_version "$pg" postgres "$pgmajor."
  check_version "$pgb" pgbouncer "$pgbversion."
  log "$name: ready in $(($(date +%s) - start))s: DOUBLERUN_POSTGRES_IMAGE=$pg DOUBLERUN_PGBOUNCER_IMAGE=$pgb"
done
