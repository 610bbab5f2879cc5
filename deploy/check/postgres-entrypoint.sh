#!/bin/sh
# The containers check's PostgreSQL stand-in (Debian's postgresql-15, deploy/check/containers.sh) with the
# entrypoint contract of the official image that docker-compose.yml names, as far as the compose files use
# it: `docker-entrypoint.sh postgres [-c ...]`; at the first start (an empty PGDATA) initdb with
# POSTGRES_USER as the superuser, its password from POSTGRES_PASSWORD_FILE, scram-sha-256 over TCP from
# anywhere, and the database POSTGRES_DB owned by that user; the server runs as the postgres OS user and
# listens on every address. Not for deployments: the official image is.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}" "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
export PGDATA
if [ "${1:-}" != postgres ]; then
    exec "$@"
fi
if [ "$(id -u)" = 0 ]; then  # as the official image: prepare the directories, then run as postgres
    mkdir -p "$PGDATA" /run/postgresql
    chown postgres:postgres "$PGDATA" /run/postgresql
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    [ -r "${POSTGRES_PASSWORD_FILE:-}" ] || { echo "POSTGRES_PASSWORD_FILE unset or unreadable" >&2; exit 1; }
    initdb --username="$POSTGRES_USER" --pwfile="$POSTGRES_PASSWORD_FILE" --auth-local=trust \
        --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 -D "$PGDATA" > /dev/null
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    if [ "$POSTGRES_DB" != postgres ]; then
        # Single-user mode: no server listens before the database exists (a healthcheck cannot pass early).
        echo "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\"" | postgres --single -D "$PGDATA" postgres > /dev/null
    fi
    echo "initialised $PGDATA: superuser $POSTGRES_USER, database $POSTGRES_DB"
fi
exec "$@"
