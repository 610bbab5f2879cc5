#!/usr/bin/env bash
# The images built and the compose stack run, for real, on a machine with Debian's packages and PyPI
# only: no Docker engine and no container registry (docs/deploy.md, "Building and checking the images").
#
#   bash deploy/check/containers.sh        # as root; ~8 min the first time, ~1 min cached
#
#   1. podman's settings: on a machine without systemd it needs runc, cgroupfs, a file events log and
#      ulimits it may set. A missing /etc/containers/containers.conf is written (and printed); an
#      existing one is only read, and the check stops naming what it lacks.
#   2. base images made with mmdebstrap from the Debian mirror, cached as podman images keyed by their
#      inputs: Debian bookworm with a CPython 3.11 (>= 3.11.3, the pinned sets' floor) copied in, for
#      the Dockerfile's PYTHON_IMAGE; Debian's redis-server for the compose file's Redis; Debian's
#      postgresql-15 for its PostgreSQL, with deploy/check/postgres-entrypoint.sh as the official image's
#      docker-entrypoint.sh (the contract the compose file uses: POSTGRES_USER/_DB/_PASSWORD_FILE).
#   3. the CPU targets (api, worker-cpu, mcp) built with `podman build --format docker` (the OCI format
#      drops HEALTHCHECK), pip's settings passed as the build secrets `pipconf` and `ca`, made from this
#      machine's pip configuration by deploy/check/pipconf.py, outside the repository.
#   4. docker-compose.yml up with podman-compose, under its own project name and port, then from the
#      host: /readyz, a keyed write then retrieve, /metrics of the API and the worker, every HEALTHCHECK
#      (`podman healthcheck run`), the worker, Redis and then PostgreSQL SIGKILLed with acknowledged
#      writes unapplied (restart policies bring them back) and every acknowledged write counted after,
#      stored once; the MCP image's stdio `initialize`; then teardown, volumes included. The worker runs
#      on the PostgreSQL service (MEMORYOS_DATABASE_URL, the password from the compose secret).
# It ends with the image sizes, build times and one line per check.
#
# Settings (environment): CHECK_PYTHON, the interpreter whose installation goes into the base (default
# python3: CPython 3.11.3+ built for bookworm, e.g. pyenv's); DEBIAN_MIRROR; CHECK_API_PORT (18765);
# CHECK_CACHE (~/.cache/memoryos/containers: podman-compose's venv); CHECK_KEEP_FAILED=1 leaves a failed
# check's stack running for inspection.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)
step() { echo "containers [$(($(date +%s) - started))s]: $*"; }
fail() { echo "containers: FAILED: $*" >&2; exit 1; }

PODMAN_COMPOSE=podman-compose==1.6.0
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What the official python:3.11-slim-bookworm image holds for CPython's extension modules; passwd for
# the Dockerfile's useradd.
BASE_PACKAGES=ca-certificates,netbase,tzdata,passwd,libssl3,libsqlite3-0,libffi8,libbz2-1.0,liblzma5,libreadline8,libncursesw6,libuuid1,zlib1g,libexpat1,libnsl2,libtirpc3
REDIS_PACKAGES=redis-server
POSTGRES_PACKAGES=postgresql-15
PROJECT=memoryos-check
API_PORT=${CHECK_API_PORT:-18765}
API_KEY=containers-check-key
cache=${CHECK_CACHE:-$HOME/.cache/memoryos/containers}
# Container limits podman may set here: the shell's open files; nproc 32768, since runc's setrlimit is
# refused above that in this kind of sandbox (measured: 32768 passes, 49152 and the shell's 96365 fail).
ULIMITS=("nofile=$(ulimit -Hn):$(ulimit -Hn)" "nproc=32768:32768")
work=$(mktemp -d)
results=()
record() { results+=("$1"); echo "  ok: $1"; }

for tool in podman mmdebstrap strip curl; do
    command -v "$tool" > /dev/null || fail "$tool missing: apt-get install podman buildah mmdebstrap runc catatonit binutils curl"
done
[ "$(id -u)" = 0 ] || fail "run as root (rootful podman, mmdebstrap in root mode)"

# ---------------------------------------------------------------------------------------------------
step "podman settings"
conf=/etc/containers/containers.conf
if [ -d /run/systemd/system ]; then
    echo "  systemd runs here: podman's defaults apply"
elif [ ! -e "$conf" ]; then
    # The defaults assume systemd (cgroup manager, journald events) and crun, and raise nofile/nproc,
    # which a container sandbox refuses: ULIMITS instead.
    mkdir -p /etc/containers
    cat > "$conf" <<EOF
# Written by MemoryOS's deploy/check/containers.sh: podman on a machine without systemd.
[containers]
default_ulimits = ["${ULIMITS[0]}", "${ULIMITS[1]}"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
    echo "  wrote $conf:"
    sed 's/^/    /' "$conf"
else
    missing=()
    for setting in 'runtime = "runc"' 'cgroup_manager = "cgroupfs"' 'events_logger = "file"' default_ulimits; do
        grep -q "^[[:space:]]*$setting" "$conf" || missing+=("$setting")
    done
    [ ${#missing[@]} = 0 ] || fail "$conf exists and lacks: ${missing[*]} (not changed; add them, see docs/deploy.md)"
    echo "  $conf has what a machine without systemd needs"
fi

compose_venv="$cache/podman-tools"
if [ "$(cat "$compose_venv/.pinned" 2>/dev/null)" != "$PODMAN_COMPOSE" ]; then
    step "installing $PODMAN_COMPOSE into $compose_venv"
    rm -rf "$compose_venv"
    python3 -m venv "$compose_venv"
    "$compose_venv/bin/python" -m pip install --quiet "$PODMAN_COMPOSE" > "$work/pip.log" 2>&1 \
        || { grep -v 'is ignored' "$work/pip.log"; exit 1; }
    echo "$PODMAN_COMPOSE" > "$compose_venv/.pinned"
fi
compose() { "$compose_venv/bin/podman-compose" -p "$PROJECT" --env-file "$work/env" -f docker-compose.yml "$@"; }

# ---------------------------------------------------------------------------------------------------
# A base image is rebuilt only when its inputs change: the tag carries their digest.
python=$(command -v "${CHECK_PYTHON:-python3}")
python_version=$("$python" -c 'import platform; print(platform.python_version())')
"$python" -c 'import sys; v = sys.version_info; sys.exit(0 if (3, 11, 3) <= v[:3] < (3, 12) else 1)' \
    || fail "$python is $python_version: the pinned sets need CPython 3.11.3 or later (set CHECK_PYTHON)"
python_prefix=$("$python" -c 'import sys; print(sys.base_prefix)')
digest() { printf '%s\n' "$@" | sha256sum | cut -c1-12; }
# No recommended packages (debconf's would bring perl), documentation or translations. /usr merged as
# debootstrap and Debian's official images do it (directory symlinks, usr-is-merged): otherwise
# init-system-helpers' `usrmerge | usr-is-merged` installs usrmerge, and with it perl (~50 MB) that
# python:3.11-slim-bookworm lacks. The interpreter goes where the official image has it (/usr/local),
# stripped, without its site-packages (pip comes from its own ensurepip), tests, Tk and static library.
base_options=(--variant=minbase --aptopt='APT::Install-Recommends "false"'
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
    --dpkgopt=path-exclude=/usr/share/doc/* --dpkgopt=path-exclude=/usr/share/man/*
    --dpkgopt=path-exclude=/usr/share/info/* --dpkgopt=path-exclude=/usr/share/locale/*)
base_hooks=(
    'tar -C "$PY_PREFIX" -c --exclude="lib/python3.11/site-packages/*" --exclude=lib/python3.11/test \
        --exclude=lib/python3.11/idlelib --exclude=lib/python3.11/tkinter --exclude=lib/python3.11/turtledemo \
        --exclude="lib/python3.11/config-3.11-*" --exclude="_tkinter*" --exclude="*.opt-?.pyc" \
        bin/python3.11 lib/libpython3.11.so.1.0 lib/python3.11 | tar -C "$1/usr/local" -x'
    'ln -s python3.11 "$1/usr/local/bin/python3" && ln -s python3 "$1/usr/local/bin/python"'
    'strip --strip-unneeded "$1"/usr/local/bin/python3.11 "$1"/usr/local/lib/libpython3.11.so.1.0 \
        "$1"/usr/local/lib/python3.11/lib-dynload/*.so'
    'chroot "$1" ldconfig'
    'chroot "$1" python3 -m ensurepip --default-pip > /dev/null 2>&1'
    'chroot "$1" python3 -c "import ssl, sqlite3, ctypes, lzma, bz2, readline, uuid, zlib"'
    'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*'
)
base_image=localhost/memoryos-base:py$python_version-$(digest "$SUITE" "$MIRROR" "$BASE_PACKAGES" \
    "$(sha256sum "$python_prefix/lib/libpython3.11.so.1.0")" "${base_options[@]}" "${base_hooks[@]}")
redis_image=localhost/memoryos-redis:$SUITE-$(digest "$SUITE" "$MIRROR" "$REDIS_PACKAGES" "${base_options[@]}" "${base_hooks[-1]}")
postgres_hooks=(
    'cp deploy/check/postgres-entrypoint.sh "$1/usr/local/bin/docker-entrypoint.sh"'
    'rm -rf "$1"/var/lib/postgresql/15 "$1"/etc/postgresql/15'  # the package's own cluster: PGDATA instead
    "${base_hooks[-1]}"
)
postgres_image=localhost/memoryos-postgres:$SUITE-$(digest "$SUITE" "$MIRROR" "$POSTGRES_PACKAGES" "${base_options[@]}" \
    "${postgres_hooks[@]}" "$(sha256sum deploy/check/postgres-entrypoint.sh)")
mirrors=("deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" "deb ${MIRROR%/debian}/debian-security $SUITE-security main")

if podman image exists "$base_image"; then
    step "base image $base_image (cached)"
else
    step "base image $base_image: mmdebstrap $SUITE + CPython $python_version from $python_prefix"
    PY_PREFIX=$python_prefix mmdebstrap --quiet "${base_options[@]}" --include="$BASE_PACKAGES" \
        "${base_hooks[@]/#/--customize-hook=}" \
        "$SUITE" - "${mirrors[@]}" \
        | podman import --quiet --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "$base_image" > /dev/null
fi
if podman image exists "$redis_image"; then
    step "redis image $redis_image (cached)"
else
    step "redis image $redis_image: mmdebstrap $SUITE + $REDIS_PACKAGES"
    mmdebstrap --quiet "${base_options[@]}" --include="$REDIS_PACKAGES" --customize-hook="${base_hooks[-1]}" \
        "$SUITE" - "${mirrors[@]}" | podman import --quiet --change 'CMD ["redis-server"]' - "$redis_image" > /dev/null
fi
if podman image exists "$postgres_image"; then
    step "postgres image $postgres_image (cached)"
else
    step "postgres image $postgres_image: mmdebstrap $SUITE + $POSTGRES_PACKAGES"
    mmdebstrap --quiet "${base_options[@]}" --include="$POSTGRES_PACKAGES" \
        "${postgres_hooks[@]/#/--customize-hook=}" "$SUITE" - "${mirrors[@]}" \
        | podman import --quiet --change 'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'ENV PGDATA=/var/lib/postgresql/data' --change 'ENV LANG=C.UTF-8' \
            --change 'ENTRYPOINT ["docker-entrypoint.sh"]' --change 'CMD ["postgres"]' \
            --change 'STOPSIGNAL SIGINT' - "$postgres_image" > /dev/null
fi

# ---------------------------------------------------------------------------------------------------
ca=$(python3 deploy/check/pipconf.py "$work/pip.conf")
secrets=(--secret "id=pipconf,src=$work/pip.conf")
[ -z "$ca" ] || secrets+=(--secret "id=ca,src=$ca")
echo "  pip settings for the build (from this machine's pip configuration):"
sed 's/^/    /' "$work/pip.conf"
declare -A build_s size_mb
for target in api worker-cpu mcp; do
    step "podman build --target $target"
    t0=$(date +%s)
    # buildah raises nofile/nproc for its RUN steps regardless of containers.conf: ULIMITS.
    podman build --format docker --build-arg "PYTHON_IMAGE=$base_image" "${secrets[@]}" \
        --ulimit "${ULIMITS[0]}" --ulimit "${ULIMITS[1]}" \
        --target "$target" -t "memoryos:$target" . > "$work/build-$target.log" 2>&1 \
        || { tail -40 "$work/build-$target.log"; fail "podman build --target $target"; }
    build_s[$target]=$(($(date +%s) - t0))
    size_mb[$target]=$(($(podman image inspect --format '{{.Size}}' "memoryos:$target") / 1000000))
    echo "  $target: ${build_s[$target]} s, ${size_mb[$target]} MB"
done
for target in api worker-cpu; do
    [ "$(podman image inspect --format '{{.Config.Healthcheck}}' "memoryos:$target")" != "<nil>" ] \
        || fail "memoryos:$target lost its HEALTHCHECK"
done
record "images built: api ${size_mb[api]} MB, worker-cpu ${size_mb[worker-cpu]} MB, mcp ${size_mb[mcp]} MB; HEALTHCHECK kept"
# Over budget is reported at the end, after the stack's checks have run.
over=()
# 300 MB until issue 59: the OTLP exporter the API must carry (OpenTelemetry's SDK, its HTTP exporter,
# protobuf, requests) is 13 MB (docs/deploy.md).
[ "${size_mb[api]}" -le 320 ] || over+=("the api image is ${size_mb[api]} MB, over its 320 MB")
for target in api worker-cpu mcp; do
    ! podman run --rm --entrypoint python "memoryos:$target" -c 'import torch' 2> /dev/null \
        || fail "memoryos:$target carries torch"
done
record "no torch in api, worker-cpu, mcp"

# ---------------------------------------------------------------------------------------------------
# The stack: docker-compose.yml as written, with this check's key (in its own API secrets file), port and
# Redis image, under its own project name (containers memoryos-check_<service>_1, volumes
# memoryos-check_*), so it never touches a deployment named memoryos. podman-compose ignores `condition: service_healthy`: a service that starts
# before Redis answers exits and its restart policy brings it back, as after a Redis restart.
# The write-lag bound is off (0): the fault steps below stop the worker while BURST writes are acknowledged,
# and with the default bound (0.5 s) the API refuses the rest with 429 as soon as its sampler sees the oldest
# queued write older than that, which on a loaded machine happens within the burst (curl: 429, "write
# worker-kill-20 was not acknowledged"). The bound itself is tested in tests/ against a real Redis.
cat > "$work/api.env" <<ENV
MEMORYOS_API_KEYS={"$API_KEY": "check"}
MEMORYOS_API_MAX_WRITE_LAG_S=0
ENV
# The database's password as an operator makes it (docs/deploy.md, PostgreSQL): one random line, readable
# by the containers' users (postgres, 10001) through the bind mount.
python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > "$work/postgres_password"
chmod 644 "$work/postgres_password"
cat > "$work/env" <<ENV
DEPLOY_API_SECRETS=$work/api.env
DEPLOY_API_PUBLISH=127.0.0.1:$API_PORT
DEPLOY_IMAGE=localhost/memoryos
DEPLOY_POSTGRES_PASSWORD_FILE=$work/postgres_password
REDIS_IMAGE=$redis_image
POSTGRES_IMAGE=$postgres_image
ENV
teardown() {
    local status=$?
    if [ "$status" != 0 ]; then  # a failed check: what each service said last, before it goes
        for service in redis postgres api worker; do
            echo "--- $service, last lines of its log"
            podman logs --tail 30 "$(ctr "$service")" 2>&1
        done
    fi
    if [ "$status" != 0 ] && [ -n "${CHECK_KEEP_FAILED:-}" ]; then
        step "kept for inspection (CHECK_KEEP_FAILED): podman-compose -p $PROJECT -f docker-compose.yml down -v"
        return
    fi
    step "teardown"
    compose down -v > "$work/down.log" 2>&1 || cat "$work/down.log"
    rm -rf "$work"
}
step "podman-compose up"
compose up -d > "$work/up.log" 2>&1 || { cat "$work/up.log"; fail "podman-compose up"; }
trap teardown EXIT
ctr() { echo "${PROJECT}_$1_1"; }
api=http://127.0.0.1:$API_PORT
space=$api/v1/users/check-user/assistants/check-assistant
call() { curl -fsS --max-time 60 -H "Authorization: Bearer $API_KEY" -H 'Content-Type: application/json' "$@"; }
until_ok() {  # SECONDS WHAT COMMAND...: retry until the command succeeds
    local deadline=$(($(date +%s) + $1)) what=$2
    shift 2
    until "$@" > /dev/null 2>&1; do
        [ "$(date +%s)" -lt "$deadline" ] || fail "$what: not within the time allowed"
        sleep 1
    done
}
t0=$(date +%s)
until_ok 180 "/readyz" curl -fsS "$api/readyz"
record "/readyz 200, $(($(date +%s) - t0)) s after up"

# The worker keeps the spaces in the database, not in its data volume: its URL, and the space's row.
podman exec "$(ctr worker)" sh -c 'test -n "$MEMORYOS_DATABASE_URL"' || fail "the worker has no MEMORYOS_DATABASE_URL"
psql_in() { podman exec "$(ctr postgres)" psql -U memoryos -d memoryos -AXtq -c "$1"; }  # the socket: trusted

# A write names its write id; the retrieve waits for those ids, so it sees them once applied by the worker.
written=()
remember() {  # WRITE_ID: one exchange whose text carries the id, for retrieve to find; counted once acknowledged
    call -X POST "$space/memories" \
        -d "{\"user_input\": \"my locker code is $1\", \"agent_response\": \"noted: $1\", \"write_id\": \"$1\"}" > /dev/null \
        || return 1  # explicit: `set -e` does not act in a function that until_ok calls
    written+=("$1")
}
all_retrieved() {  # every acknowledged write applied: a retrieve waiting for their ids answers, and each is listed
    local ids listing
    ids=$(printf '"%s",' "${written[@]}")
    call -X POST "$space/retrieve" -d "{\"query\": \"locker code\", \"top_k\": 10, \"wait_for_write_ids\": [${ids%,}], \"wait_timeout_s\": 30}" > /dev/null || return 1
    listing=$(call "$space/memories?limit=100") || return 1
    for id in "${written[@]}"; do grep -qF "\"my locker code is $id\"" <<< "$listing" || return 1; done
}
retrieve_finds() {  # WRITE_ID: a retrieve that waits for it returns its page
    local body
    body=$(call -X POST "$space/retrieve" -d "{\"query\": \"locker code\", \"top_k\": 10, \"wait_for_write_ids\": [\"$1\"], \"wait_timeout_s\": 30}") || return 1
    grep -qF "$1" <<< "$body"
}
remember write-before-restarts
until_ok 180 "retrieve of the first write" retrieve_finds write-before-restarts
spaces=$(psql_in 'SELECT count(*) FROM spaces') \
    || fail "the spaces table in PostgreSQL"
[ "$spaces" = 1 ] || fail "PostgreSQL holds $spaces spaces, 1 was written"
record "keyed write, then retrieve finds it; the space is a row in PostgreSQL"


# Read whole, then searched: `producer | grep -q` fails under pipefail whenever grep exits at its match
# before the producer's last write (SIGPIPE, 141): `podman exec` relays print's text and its newline as
# two writes, and 12 of 40 such pipelines failed on a 2-core machine.
metrics=$(call "$api/metrics") || fail "API /metrics"
grep -q '^memoryos_http_request_duration_seconds' <<< "$metrics" || fail "API /metrics"
metrics=$(podman exec "$(ctr worker)" python -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9400/metrics', timeout=5).read().decode())") \
    || fail "worker /metrics"
grep -q '^memoryos_' <<< "$metrics" || fail "worker /metrics"
record "/metrics of the API and the worker"

for service in redis postgres api worker; do
    until_ok 60 "HEALTHCHECK of $service" podman healthcheck run "$(ctr "$service")"
done
record "HEALTHCHECK healthy: redis, postgres, api, worker"

# Faults with writes in flight. The worker's processes are stopped (SIGSTOP from the host) while a burst
# of writes is acknowledged, so each burst is queued and unapplied when the fault strikes; the check
# then counts every acknowledged write in the space. A worker or a Redis killed with nothing queued
# would prove nothing about acknowledged writes.
BURST=30
container_pid() { podman inspect --format '{{.State.Pid}}' "$(ctr "$1")"; }
descendants() {  # PID: every process below PID (the container's init), children first
    local child
    for child in $(ps -o pid= --ppid "$1"); do descendants "$child"; echo "$child"; done
}
signal_worker() { descendants "$(container_pid worker)" | xargs -r kill "-$1"; }
burst() {  # NAME: BURST acknowledged writes (each curl -f: a 2xx before the next)
    local i
    for i in $(seq 1 "$BURST"); do remember "$1-$i" || fail "write $1-$i was not acknowledged"; done
}
stored_once() {  # every acknowledged write is one page of the space, no more (sets count)
    count=$(call "$space/memories?limit=100" | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["pages"]))')
    [ "$count" = "${#written[@]}" ] || fail "the space holds $count pages, ${#written[@]} were acknowledged"
}
restarts() { podman inspect --format '{{.RestartCount}}' "$(ctr "$1")"; }
restarted_since() { [ "$(restarts "$1")" -gt "$2" ]; }  # SERVICE COUNT

# The worker SIGKILLed as the OOM killer would, mid-batch: stopped, BURST writes acknowledged, resumed,
# and killed 0.2 s later, while it applies them (its restart policy starts it again; the writes it had
# not acknowledged to Redis are delivered again, the ones it had are applied exactly once).
before=$(restarts worker)
signal_worker STOP
burst worker-kill
signal_worker CONT
sleep 0.2
kill -KILL "$(pgrep -P "$(container_pid worker)" -f 'memoryos worker')"
until_ok 120 "worker restarted by its restart policy" restarted_since worker "$before"
until_ok 240 "retrieve after the worker's kill" all_retrieved
record "worker SIGKILLed 0.2 s into applying $BURST acknowledged writes; restarted by its policy, all retrieved"

# Redis SIGKILLed (its process, from the host: no shutdown, no final AOF rewrite) with BURST acknowledged
# writes queued and none applied: the AOF (appendfsync always) holds each write it acknowledged.
before=$(restarts redis)
signal_worker STOP
burst redis-kill
kill -KILL "$(container_pid redis)"
until_ok 120 "Redis restarted by its restart policy" restarted_since redis "$before"
signal_worker CONT
remember_when_up() { remember write-after-redis-kill; }
until_ok 120 "a write after the Redis kill" remember_when_up
until_ok 240 "retrieve after the Redis kill" all_retrieved
stored_once
record "Redis SIGKILLed with $BURST acknowledged writes unapplied; restarted from its AOF: all ${#written[@]} acknowledged writes retrieved, $count pages listed"

# PostgreSQL SIGKILLed (its postmaster, from the host: no shutdown checkpoint) 0.2 s into the worker's
# applying BURST acknowledged writes: the transactions in flight are lost with their connections, the
# worker applies their entries again once the server is back (a write whose transaction committed is
# not applied twice: its write id is recorded with it), and the restarted server replays its WAL.
before=$(restarts postgres)
signal_worker STOP
burst postgres-kill
signal_worker CONT
sleep 0.2
kill -KILL "$(container_pid postgres)"
until_ok 120 "PostgreSQL restarted by its restart policy" restarted_since postgres "$before"
until_ok 120 "PostgreSQL healthy again" podman healthcheck run "$(ctr postgres)"
until_ok 300 "retrieve after the PostgreSQL kill" all_retrieved
stored_once
record "PostgreSQL SIGKILLed 0.2 s into applying $BURST acknowledged writes; restarted by its policy: all ${#written[@]} acknowledged writes retrieved, $count pages listed, each once"

initialize='{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "containers-check", "version": "0"}}}'
answer=$(echo "$initialize" | timeout 120 podman run -i --rm localhost/memoryos:mcp --user check-user 2> /dev/null | head -1)
grep -q '"serverInfo"' <<< "$answer" || fail "MCP initialize answered: $answer"
record "MCP image: stdio initialize answered"

trap - EXIT
teardown
[ -z "$(podman ps -a -q --filter "label=io.podman.compose.project=$PROJECT")" ] || fail "containers left after down"
[ -z "$(podman volume ls -q --filter "label=io.podman.compose.project=$PROJECT")" ] || fail "volumes left after down"
results+=("teardown: no container or volume left")

echo
echo "image        build s   size MB"
for target in api worker-cpu mcp; do printf '%-12s %7s %9s\n' "$target" "${build_s[$target]}" "${size_mb[$target]}"; done
printf 'check: %s\n' "${results[@]}"
[ ${#over[@]} = 0 ] || fail "${over[*]}"
step "passed"
