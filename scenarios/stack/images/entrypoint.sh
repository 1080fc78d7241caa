#!/bin/sh
# Initialises the cluster on first start, then runs postgres in the foreground.
set -eu
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
if [ -z "${POSTGRES_PASSWORD:-}" ]; then
  echo "entrypoint: POSTGRES_PASSWORD must be set" >&2
  exit 1
fi
if [ "${1:-postgres}" = postgres ]; then
  [ $# -gt 0 ] && shift
fi
# The cluster build.sh made with initdb when it built the image, for the
# stack's superuser, as one tar file (bake_script): unpacking it costs an
# eighth of initdb's CPU (cp -a of the same files through the image's
# overlay, half), and a stack starts a container per Postgres. Its
# superuser has no password until the single-user session below sets one.
# Every copy has the template's system identifier; DOUBLERUN_INITDB=1 runs
# initdb for a server that needs one of its own (an HA pair's primary,
# beside its oracle).
template=/var/lib/postgresql/template-$POSTGRES_USER.tar
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  sql=
  if [ -s "$template" ] && [ -z "${DOUBLERUN_INITDB:-}" ]; then
    tar -xf "$template" -C "$PGDATA"
    sql="ALTER ROLE \"$POSTGRES_USER\" PASSWORD '$(printf '%s' "$POSTGRES_PASSWORD" | sed "s/'/''/g")';"
  else
    pw=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pw"
    initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pw" \
      --auth-local=trust --auth-host=scram-sha-256 --no-sync >/dev/null
    rm -f "$pw"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
  fi
  if [ "$POSTGRES_DB" != postgres ]; then
    sql="$sql
CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\";"
  fi
  # One statement a line (no -j): a newline ends each.
  if [ -n "$sql" ]; then
    printf '%s\n' "$sql" | postgres --single -D "$PGDATA" postgres >/dev/null
  fi
fi
exec postgres -D "$PGDATA" "$@"
