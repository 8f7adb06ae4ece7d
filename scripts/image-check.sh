#!/usr/bin/env bash
# Build the crawler image WITHOUT Docker and check that it really works.
#
#   scripts/image-check.sh [--install-tools] [single|compose|all|clean]
#
#   single   (default) build the image from the unchanged Dockerfile, run it against
#            PostgreSQL and check it (see below)
#   compose  build stand-ins for PostgreSQL and Prometheus from Debian's packages and
#            bring up crawler, postgres and prometheus of docker-compose.yml with
#            podman-compose (netavark network); check that Prometheus scrapes the
#            crawler container (Grafana is not packaged in Debian: left out)
#   all      single, then compose
#   clean    remove the stand-in base images and the tarball cache
#   --install-tools   apt-get install the tools this needs (root; what CI does)
#
# How: mmdebstrap builds a Debian bookworm root file system with python3.11, venv, pip
# and ca-certificates, imported as the Dockerfile's FROM image (python:3.11-slim-bookworm,
# with /usr/local/bin/python{,3} and pip links as the official image has), unless a real
# image of that name is already in local storage. `buildah bud --isolation chroot
# --format docker` builds the Dockerfile as it is (docker format keeps the HEALTHCHECK);
# pip inside the build sees this machine's CA bundle and pip configuration, mounted
# read-only. `podman run --network host --runtime runc` runs it with explicit ulimits.
#
# Checks of `single`: the image runs as a non-root USER and has a HEALTHCHECK; the
# container applies the migrations to a fresh PostgreSQL database (alembic_version is the
# package's head revision); /healthz answers 200; the HEALTHCHECK command read from the
# image config passes inside the container; no process in the container runs as root; `podman stop
# -t 10` (SIGTERM) ends it within 10 s with exit status 0 or 143 and no traceback or
# error in the log; and SIGTERM sent while the container is still starting ends it
# within 10 s too.
#
# Environment:
#   IMAGE_CHECK_CACHE   tarball cache (default ${XDG_CACHE_HOME:-~/.cache}/crawler-image-check)
#   IMAGE_CHECK_KEEP=1  keep the crawler image and the database afterwards
#   IMAGE_CHECK_IMAGE   check this image (in local storage) instead of building one
#   IMAGE_CHECK_PGHOST / IMAGE_CHECK_PGPORT / IMAGE_CHECK_PGUSER
#                       the PostgreSQL to test against (default 127.0.0.1, 5432,
#                       postgres; trust authentication). A database is created and dropped.
#   IMAGE_CHECK_SUITE   Debian suite of the stand-in bases (default bookworm)
#
# Idempotent: containers, the crawler image and the database it made are removed on exit
# (also on failure); the stand-in base images stay in local storage like pulled images,
# and their tarballs are cached, so a rerun skips mmdebstrap.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${IMAGE_CHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/crawler-image-check}
SUITE=${IMAGE_CHECK_SUITE:-bookworm}
PGHOST_=${IMAGE_CHECK_PGHOST:-127.0.0.1}
PGPORT_=${IMAGE_CHECK_PGPORT:-5432}
PGUSER_=${IMAGE_CHECK_PGUSER:-postgres}
RUN_ID="$$-$(date +%s)"
CRAWLER_IMAGE="localhost/crawler:image-check-$RUN_ID"
LABEL=org.crawler.image-check.base
STEP_START=$(date +%s)
T0=$STEP_START

CONTAINERS=()
IMAGES=()
DATABASE=""
TMP=""

# ------------------------------------------------------------------ output helpers
say() { printf 'image-check [%4ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
ok() { say "ok: $*"; }
die() {
    # die "what failed" "what to do"
    printf 'image-check: FAILED: %s\n' "$1" >&2
    printf 'image-check: what to do: %s\n' "$2" >&2
    exit 1
}
step() {
    local now
    now=$(date +%s)
    say "== $* (previous step $((now - STEP_START)) s)"
    STEP_START=$now
}

# ------------------------------------------------------------------ cleanup
cleanup() {
    local status=$?
    set +e
    if [ ${#COMPOSE_DOWN[@]} -gt 0 ]; then
        "${COMPOSE_DOWN[@]}" down -v -t 0 </dev/null >/dev/null 2>&1
    fi
    for c in "${CONTAINERS[@]}"; do
        podman rm -f -t 0 "$c" >/dev/null 2>&1
    done
    if [ -n "$DATABASE" ] && [ "${IMAGE_CHECK_KEEP:-0}" != "1" ]; then
        pg_admin "DROP DATABASE IF EXISTS \"$DATABASE\" WITH (FORCE)" >/dev/null 2>&1
    fi
    if [ "${IMAGE_CHECK_KEEP:-0}" != "1" ]; then
        for i in "${IMAGES[@]}"; do
            podman rmi -f "$i" >/dev/null 2>&1
        done
    fi
    [ -n "$TMP" ] && rm -rf "$TMP"
    [ -n "$COMPOSE_COPY" ] && rm -f "$COMPOSE_COPY"
    if [ $status -eq 0 ]; then
        say "done in $(($(date +%s) - T0)) s"
    else
        say "failed after $(($(date +%s) - T0)) s (containers and images of this run removed)"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------ tools
TOOLS_SINGLE=(buildah podman runc mmdebstrap python3)
PKGS_SINGLE=(buildah podman runc mmdebstrap uidmap python3 ca-certificates)
TOOLS_COMPOSE=(podman-compose netavark)
PKGS_COMPOSE=(podman-compose netavark aardvark-dns)

missing_tools() {
    local t
    for t in "$@"; do
        command -v "$t" >/dev/null 2>&1 || [ -x "/usr/lib/podman/$t" ] || echo "$t"
    done
}

ensure_tools() {
    # ensure_tools install? tools... -- packages...
    local install=$1
    shift
    local tools=() pkgs=() seen=0 a
    for a in "$@"; do
        if [ "$a" = "--" ]; then seen=1; continue; fi
        if [ $seen -eq 0 ]; then tools+=("$a"); else pkgs+=("$a"); fi
    done
    local missing
    missing=$(missing_tools "${tools[@]}" | tr '\n' ' ')
    if [ -z "$missing" ]; then
        return 0
    fi
    if [ "$install" != "1" ]; then
        die "missing tools: $missing" \
            "apt-get install ${pkgs[*]} (as root), or rerun with --install-tools"
    fi
    [ "$(id -u)" = "0" ] || die "--install-tools needs root" "rerun as root (or with sudo)"
    command -v apt-get >/dev/null || die "apt-get not found" "install ${pkgs[*]} by hand"
    say "apt-get install ${pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null || die "apt-get update failed" "check the apt sources"
    apt-get install -y -q --no-install-recommends "${pkgs[@]}" </dev/null >/dev/null ||
        die "apt-get install ${pkgs[*]} failed" "run it by hand to see why"
    missing=$(missing_tools "${tools[@]}" | tr '\n' ' ')
    [ -z "$missing" ] || die "still missing after apt-get: $missing" "install them by hand"
}

check_root() {
    [ "$(id -u)" = "0" ] || die "this check runs buildah/podman/mmdebstrap as root" \
        "rerun as root (rootless podman needs subuid ranges and is not covered here)"
}

# ------------------------------------------------------------------ podman helpers
# nofile/nproc must be given explicitly: podman's defaults (nofile 1048576) exceed the
# hard limits of many hosts (runc then fails with "error setting rlimit type 7").
ulimit_args() {
    local hn hu
    hn=$(ulimit -Hn)
    hu=$(ulimit -Hu)
    [ "$hn" = "unlimited" ] && hn=1048576
    [ "$hu" = "unlimited" ] && hu=65536
    local n=$((hn < 65536 ? hn : 65536)) u=$((hu < 8192 ? hu : 8192))
    echo "--ulimit nofile=$n:$n --ulimit nproc=$u:$u"
}
ULIMITS=$(ulimit_args)
ULIMITS_NOFILE=$(echo "$ULIMITS" | sed -n 's/.*nofile=\([0-9]*\):.*/\1/p')
ULIMITS_NPROC=$(echo "$ULIMITS" | sed -n 's/.*nproc=\([0-9]*\):.*/\1/p')
COMPOSE_DOWN=()
COMPOSE_COPY=""

# podman run with the flags this machine needs; --health-interval disable: no systemd
# timer (there is no systemd here), the HEALTHCHECK itself stays in the config.
prun() {
    # shellcheck disable=SC2086
    podman run --runtime runc --health-interval disable $ULIMITS "$@"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# SQL as the PostgreSQL superuser, through the psycopg inside the built image (the host
# needs no PostgreSQL client).
pg_admin() {
    prun --rm --network host --entrypoint python "$CRAWLER_IMAGE" -c '
import sys, psycopg
conninfo = f"host={sys.argv[1]} port={sys.argv[2]} user={sys.argv[3]} dbname={sys.argv[4]}"
with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as c:
    cur = c.execute(sys.argv[5])
    if sys.argv[5].lstrip().upper().startswith("SELECT"):
        print(cur.fetchone()[0])
' "$PGHOST_" "$PGPORT_" "$PGUSER_" "${PGDB:-postgres}" "$1"
}

# ------------------------------------------------------------------ stand-in bases
# ensure_base NAME TAG PACKAGES [extra --change...]: a Debian root file system with
# PACKAGES, imported as TAG. The tarball is cached under $CACHE by a key of its inputs.
BASE_HOOK_VERSION=1
ensure_base() {
    local name=$1 tag=$2 packages=$3
    shift 3
    local key
    key=$(printf '%s\n' "$BASE_HOOK_VERSION" "$SUITE" "$packages" "$(base_hook "$name")" | sha256sum | cut -c1-16)
    if podman image exists "$tag" 2>/dev/null; then
        local existing
        existing=$(podman image inspect --format "{{index .Labels \"$LABEL\"}}" "$tag")
        if [ -z "$existing" ] || [ "$existing" = "<no value>" ]; then
            say "using the image $tag found in local storage (not a stand-in: no $LABEL label)"
            return 0
        fi
        if [ "$existing" = "$key" ]; then
            ok "stand-in $tag is in local storage ($name, key $key)"
            return 0
        fi
        say "stand-in $tag is out of date (key $existing, now $key): rebuilding"
    fi
    mkdir -p "$CACHE"
    local tarball="$CACHE/$name-$SUITE-$key.tar"
    if [ ! -s "$tarball" ]; then
        say "mmdebstrap $SUITE with: $packages (cached afterwards in $tarball)"
        local sources=()
        # This machine's apt sources (and so its mirror) are used when it runs Debian.
        if [ -f /etc/apt/sources.list.d/debian.sources ]; then
            sources=(/etc/apt/sources.list.d/debian.sources)
        elif [ -s /etc/apt/sources.list ]; then
            sources=(/etc/apt/sources.list)
        fi
        mmdebstrap --variant=minbase --mode=root --format=tar --quiet \
            --include="$(echo "$packages" | tr ' ' ',')" \
            --dpkgopt='path-exclude=/usr/share/doc/*' \
            --dpkgopt='path-exclude=/usr/share/man/*' \
            --dpkgopt='path-exclude=/usr/share/info/*' \
            --dpkgopt='path-exclude=/usr/share/locale/*' \
            --dpkgopt='path-include=/usr/share/locale/locale.alias' \
            --customize-hook="chroot \"\$1\" sh -euc '$(base_hook "$name")'" \
            "$SUITE" "$tarball.part" "${sources[@]}" </dev/null >"$CACHE/$name.mmdebstrap.log" 2>&1 ||
            die "mmdebstrap of the $name base failed (log: $CACHE/$name.mmdebstrap.log)" \
                "read the log; the apt sources must reach the Debian archive"
        mv "$tarball.part" "$tarball"
    else
        ok "cached tarball $tarball"
    fi
    local changes=(--change "LABEL $LABEL=$key"
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
        --change 'ENV LANG=C.UTF-8')
    local c
    for c in "$@"; do changes+=(--change "$c"); done
    podman import --quiet "${changes[@]}" "$tarball" "$tag" >/dev/null ||
        die "podman import of $tarball failed" "remove $tarball and rerun"
    ok "imported stand-in $tag ($name, key $key)"
}

# Shell run inside the new root file system at the end of mmdebstrap.
base_hook() {
    case $1 in
    python)
        # The official python image's paths: python, python3, pip, pip3 in /usr/local/bin;
        # and pip may install outside a venv there (no PEP 668 marker).
        echo 'for p in python python3; do ln -sf /usr/bin/python3 /usr/local/bin/$p; done;' \
             'for p in pip pip3; do ln -sf /usr/bin/pip3 /usr/local/bin/$p; done;' \
             'rm -f /usr/lib/python3*/EXTERNALLY-MANAGED; rm -rf /var/lib/apt/lists/*'
        ;;
    *) echo 'rm -rf /var/lib/apt/lists/*' ;;
    esac
}

# The FROM image of the Dockerfile: ARG PYTHON_IMAGE's default, fully qualified the way
# podman stores short names.
dockerfile_base() {
    local ref
    ref=$(sed -n 's/^ARG PYTHON_IMAGE=\(.*\)$/\1/p' "$REPO/Dockerfile" | head -n 1)
    [ -n "$ref" ] || die "no 'ARG PYTHON_IMAGE=' in the Dockerfile" \
        "scripts/image-check.sh reads the base image name from it; keep that ARG"
    qualify "$ref"
}
qualify() {
    case $1 in
    */*/*) echo "$1" ;;
    */*) echo "docker.io/$1" ;;
    *) echo "docker.io/library/$1" ;;
    esac
}

# ------------------------------------------------------------------ pip configuration
# One pip.conf with this machine's settings (config files in pip's order, then PIP_*
# variables), and the local paths it names (find-links, certificates, and the folder
# holding a file:// index, whose pages may link to files beside it),
# so pip inside the build resolves packages the way pip on this machine does.
write_pip_conf() {
    python3 - "$1" <<'PY'
import configparser, os, sys
from pathlib import Path

files = [Path("/etc/xdg/pip/pip.conf"), Path("/etc/pip.conf"),
         Path.home() / ".pip/pip.conf", Path.home() / ".config/pip/pip.conf"]
if os.environ.get("PIP_CONFIG_FILE"):
    files.append(Path(os.environ["PIP_CONFIG_FILE"]))
merged: dict[str, str] = {}
for f in files:
    if f.is_file():
        cp = configparser.ConfigParser()
        cp.read(f)
        for section in ("global", "install"):
            if cp.has_section(section):
                merged.update(cp.items(section))
for key, value in os.environ.items():
    if key.startswith("PIP_") and key != "PIP_CONFIG_FILE":
        merged[key[4:].lower().replace("_", "-")] = value
with open(sys.argv[1], "w") as out:
    out.write("[global]\n")
    for key, value in sorted(merged.items()):
        out.write(f"{key} = {value}\n")
paths = set()
for key in ("index-url", "extra-index-url", "find-links", "cert", "client-cert", "constraint"):
    for item in merged.get(key, "").split():
        path = item[len("file://"):] if item.startswith("file://") else item
        path = path.rstrip("/") or "/"
        if key.endswith("index-url"):
            # an index's pages link to files beside it (e.g. simple/ and files/)
            path = os.path.dirname(path) or "/"
        if path.startswith("/") and path != "/" and os.path.exists(path):
            paths.add(path)
for p in sorted(paths):
    print(p)
PY
}

# ------------------------------------------------------------------ single
build_crawler_image() {
    step "base image for the Dockerfile's FROM"
    local base
    base=$(dockerfile_base)
    ensure_base python "$base" "python3 python3-venv python3-pip ca-certificates" 'CMD ["python3"]'

    step "buildah bud of the unchanged Dockerfile"
    local pip_paths mounts=(-v /etc/ssl/certs:/etc/ssl/certs:ro -v "$TMP/pip.conf:/etc/pip.conf:ro")
    pip_paths=$(write_pip_conf "$TMP/pip.conf")
    local p
    for p in $pip_paths; do
        case $p in /etc/ssl/certs | /etc/ssl/certs/*) continue ;; esac
        mounts+=(-v "$p:$p:ro")
    done
    IMAGES+=("$CRAWLER_IMAGE")
    local t=$(date +%s)
    buildah bud --isolation chroot --format docker --pull=never --layers=false \
        "${mounts[@]}" -t "$CRAWLER_IMAGE" -f "$REPO/Dockerfile" "$REPO" \
        </dev/null >"$TMP/bud.log" 2>&1 || {
        grep -v 'WARNING: Location' "$TMP/bud.log" | tail -n 40 >&2
        die "buildah bud failed (last lines above)" \
            "fix the Dockerfile step that failed; pip errors: check this machine's pip config"
    }
    ok "built $CRAWLER_IMAGE in $(($(date +%s) - t)) s ($(podman image inspect --format '{{.Size}}' "$CRAWLER_IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
}

check_image_config() {
    step "image configuration"
    local user hc
    user=$(podman image inspect --format '{{.Config.User}}' "$CRAWLER_IMAGE")
    case ${user%%:*} in
    "" | root | 0) die "the image's USER is '${user}' (root)" "keep 'USER crawler:crawler' in the Dockerfile" ;;
    esac
    ok "USER $user"
    hc=$(podman image inspect --format '{{json .Config.Healthcheck}}' "$CRAWLER_IMAGE")
    [ "$hc" != "null" ] && [ -n "$hc" ] ||
        die "the image has no HEALTHCHECK" "build with --format docker (OCI images drop it)"
    ok "HEALTHCHECK $hc"
}

# The HEALTHCHECK's Test of the image config as a command line for `podman exec`.
healthcheck_argv() {
    podman image inspect --format '{{json .Config.Healthcheck.Test}}' "$CRAWLER_IMAGE" | python3 -c '
import json, sys
test = json.load(sys.stdin)
kind, args = test[0], test[1:]
if kind == "CMD-SHELL":
    args = ["/bin/sh", "-c", args[0]]
elif kind != "CMD":
    sys.exit(f"unsupported HEALTHCHECK kind {kind!r}")
sys.stdout.write("\0".join(args))
'
}

wait_healthz() {
    # wait_healthz CONTAINER PORT SECONDS
    local ctr=$1 port=$2 limit=$3 i body
    for ((i = 0; i < limit; i++)); do
        if body=$(python3 - "$port" 2>/dev/null <<'PY'
import sys, urllib.request
print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/healthz", timeout=3).read().decode().strip())
PY
        ); then
            echo "$body"
            return 0
        fi
        if [ "$(podman inspect --format '{{.State.Running}}' "$ctr")" != "true" ]; then
            podman logs "$ctr" 2>&1 | tail -n 40 >&2
            die "the container exited before /healthz answered (log above)" \
                "read the log: migrations or the database URL are the usual causes"
        fi
        sleep 1
    done
    podman logs "$ctr" 2>&1 | tail -n 40 >&2
    die "/healthz did not answer 200 within $limit s (log above)" \
        "read the log; on a busy machine raise the wait"
}

start_crawler() {
    # start_crawler NAME PORT: the image's own ENTRYPOINT and CMD, against $DATABASE
    local name=$1 port=$2
    CONTAINERS+=("$name")
    podman rm -f -t 0 "$name" >/dev/null 2>&1 || true
    prun -d --name "$name" --network host \
        -e CRAWLER_DATABASE_URL="postgresql+psycopg://$PGUSER_@$PGHOST_:$PGPORT_/$DATABASE" \
        -e CRAWLER_METRICS_PORT="$port" -e CRAWLER_METRICS_HOST=127.0.0.1 \
        -e CRAWLER_SLOT_SECONDS=1 \
        "$CRAWLER_IMAGE" >/dev/null 2>"$TMP/run.err" || {
        cat "$TMP/run.err" >&2
        die "podman run failed (above)" "runc and ulimits are the usual causes: see docs/deploy-image.md"
    }
}

stop_and_judge() {
    # stop_and_judge NAME WHAT: podman stop -t 10; within 10 s, exit 0/143, clean log
    local name=$1 what=$2 t0 t1 code
    t0=$(date +%s.%N)
    podman stop -t 10 "$name" >/dev/null 2>"$TMP/stop.err"
    t1=$(date +%s.%N)
    code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
    local took
    took=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
    podman logs "$name" >"$TMP/$name.log" 2>&1
    if grep -q 'resorting to SIGKILL' "$TMP/stop.err" || [ "$code" = "137" ]; then
        tail -n 20 "$TMP/$name.log" >&2
        die "$what: SIGTERM did not stop the container within 10 s (SIGKILL; exit $code, ${took} s)" \
            "the service must handle SIGTERM at every stage: see docs/deploy-image.md"
    fi
    case $code in 0 | 143) ;; *)
        tail -n 20 "$TMP/$name.log" >&2
        die "$what: exit status $code after SIGTERM (log above)" "read the log" ;;
    esac
    if grep -nE 'Traceback|CRITICAL| ERROR ' "$TMP/$name.log" >&2; then
        die "$what: the log has errors (lines above)" "read $name's log: podman logs $name"
    fi
    ok "$what: SIGTERM -> exit $code in ${took} s, log clean (last: $(tail -n 1 "$TMP/$name.log"))"
}

single() {
    check_root
    ensure_tools "${INSTALL:-0}" "${TOOLS_SINGLE[@]}" -- "${PKGS_SINGLE[@]}"
    say "buildah $(buildah --version | awk '{print $3}'), podman $(podman --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}'), ulimits: $ULIMITS"
    TMP=$(mktemp -d)
    if [ -n "${IMAGE_CHECK_IMAGE:-}" ]; then
        CRAWLER_IMAGE=$IMAGE_CHECK_IMAGE
        podman image exists "$CRAWLER_IMAGE" ||
            die "IMAGE_CHECK_IMAGE=$CRAWLER_IMAGE is not in local storage" "build it or unset IMAGE_CHECK_IMAGE"
        say "checking the given image $CRAWLER_IMAGE (no build)"
    else
        build_crawler_image
    fi
    check_image_config

    step "fresh PostgreSQL database"
    DATABASE="crawler_image_check_${RUN_ID//-/_}"
    pg_admin "CREATE DATABASE \"$DATABASE\"" >/dev/null 2>"$TMP/pg.err" || {
        DATABASE=""
        cat "$TMP/pg.err" >&2
        die "cannot create a database on $PGUSER_@$PGHOST_:$PGPORT_ (above)" \
            "start PostgreSQL there with trust auth for $PGUSER_, or set IMAGE_CHECK_PGHOST/PORT/USER"
    }
    ok "created database $DATABASE"

    step "run the image (its ENTRYPOINT and CMD) with podman"
    local name="crawler-image-check-$RUN_ID" port
    port=$(free_port)
    start_crawler "$name" "$port"
    local body
    body=$(wait_healthz "$name" "$port" 180)
    ok "/healthz answered 200: $body"

    step "checks inside the running container"
    podman logs "$name" >"$TMP/start.log" 2>&1
    grep -q 'applying database migrations' "$TMP/start.log" ||
        die "the entrypoint did not run the migrations" "keep 'crawler db upgrade' in deploy/docker-entrypoint.sh"
    local head current
    head=$(podman exec "$name" python -c 'from crawler.store import head_revision; print(head_revision())')
    current=$(PGDB=$DATABASE pg_admin "SELECT version_num FROM alembic_version")
    [ -n "$head" ] && [ "$head" = "$current" ] ||
        die "migrations: database at '$current', package head '$head'" "read the container log"
    ok "migrations ran: alembic_version = $current = head of the packaged migrations"

    local argv=()
    while IFS= read -r -d '' a; do argv+=("$a"); done < <(healthcheck_argv; printf '\0')
    if ! podman exec "$name" "${argv[@]}" >"$TMP/hc.out" 2>&1; then
        cat "$TMP/hc.out" >&2
        die "the image's HEALTHCHECK command failed inside the container (above)" \
            "run it by hand: podman exec $name ${argv[*]}"
    fi
    ok "HEALTHCHECK command from the image config exits 0 inside the container"
    if podman healthcheck run "$name" >/dev/null 2>&1; then
        ok "podman healthcheck run: healthy"
    else
        die "podman healthcheck run: unhealthy" "run: podman healthcheck run $name"
    fi

    # every process of the container (the entrypoint as PID 1 and the service under it)
    local procs
    procs=$(podman exec "$name" sh -c 'for s in /proc/[0-9]*/status; do
        echo "$(grep ^Uid: "$s" | tr -s "\t " " " | cut -d" " -f2-5) $(tr "\0" " " <"${s%status}cmdline")"
    done' 2>/dev/null | grep -av '^ *$')
    echo "$procs" | sed 's/^/    uid euid suid fsuid cmd: /'
    if echo "$procs" | awk '{ if ($1 == 0 || $2 == 0 || $3 == 0 || $4 == 0) bad = 1 } END { exit !bad }'; then
        die "a process in the container runs as root (above)" "keep the Dockerfile's USER"
    fi
    ok "no process in the container runs as root"

    step "SIGTERM while running"
    stop_and_judge "$name" "running service"

    step "SIGTERM while starting"
    local early="crawler-image-check-early-$RUN_ID"
    start_crawler "$early" "$(free_port)"
    sleep 2
    stop_and_judge "$early" "starting service (SIGTERM 2 s after start)"
}

# ------------------------------------------------------------------ compose
STANDINS="$REPO/scripts/standins"
PROJECT=crawler-image-check

# The stack of docker-compose.yml with the images Debian can provide: the crawler image
# (built above), PostgreSQL and Prometheus from Debian's packages (stand-ins built here).
# Grafana is not packaged in Debian: it is left out. podman-compose needs name
# resolution between containers, which the CNI backend here lacks (no dnsname plugin in
# Debian): the netavark backend with aardvark-dns provides it, selected for this
# script's podman calls only (CONTAINERS_CONF), not for the machine.
compose() {
    check_root
    ensure_tools "${INSTALL:-0}" "${TOOLS_SINGLE[@]}" "${TOOLS_COMPOSE[@]}" catatonit -- \
        "${PKGS_SINGLE[@]}" "${PKGS_COMPOSE[@]}" catatonit
    [ -n "$TMP" ] || TMP=$(mktemp -d)
    printf '[network]\nnetwork_backend = "netavark"\n' >"$TMP/containers.conf"
    export CONTAINERS_CONF="$TMP/containers.conf"
    say "podman-compose $(podman-compose --version 2>/dev/null | awk '/podman-compose/ {print $3}'), network backend: $(podman info --format '{{.Host.NetworkBackend}}')"

    if [ -z "${IMAGE_CHECK_IMAGE:-}" ] && ! podman image exists "$CRAWLER_IMAGE"; then
        build_crawler_image
    elif [ -n "${IMAGE_CHECK_IMAGE:-}" ]; then
        CRAWLER_IMAGE=$IMAGE_CHECK_IMAGE
    fi

    step "stand-in images from Debian's packages"
    # One Debian root file system for both (one mmdebstrap run instead of two: ~200 s
    # less on a fresh machine); each stand-in's Dockerfile adds its own entry point.
    local svc_base=localhost/crawler-standin/services-base:$SUITE
    ensure_base services "$svc_base" "postgresql prometheus wget ca-certificates"
    local pg_base=$svc_base prom_base=$svc_base
    local pg_image=localhost/crawler-standin/postgres:$SUITE-$RUN_ID
    local prom_image=localhost/crawler-standin/prometheus:$SUITE-$RUN_ID
    IMAGES+=("$pg_image" "$prom_image")
    buildah bud --isolation chroot --format docker --pull=never --layers=false --quiet \
        --build-arg BASE="$pg_base" -t "$pg_image" -f "$STANDINS/postgres.Dockerfile" "$STANDINS" \
        </dev/null >"$TMP/pg-bud.log" 2>&1 || { tail -n 30 "$TMP/pg-bud.log" >&2; die "building the PostgreSQL stand-in failed" "read the lines above"; }
    buildah bud --isolation chroot --format docker --pull=never --layers=false --quiet \
        --build-arg BASE="$prom_base" -t "$prom_image" -f "$STANDINS/prometheus.Dockerfile" "$STANDINS" \
        </dev/null >"$TMP/prom-bud.log" 2>&1 || { tail -n 30 "$TMP/prom-bud.log" >&2; die "building the Prometheus stand-in failed" "read the lines above"; }
    ok "PostgreSQL $(podman run --rm --runtime runc --health-interval disable $ULIMITS --entrypoint postgres "$pg_image" --version | awk '{print $3}'), Prometheus $(podman run --rm --runtime runc --health-interval disable $ULIMITS --entrypoint prometheus "$prom_image" --version 2>&1 | awk 'NR==1 {print $3}') (Debian's packages)"

    step "podman-compose up crawler postgres prometheus"
    cat >"$TMP/override.yml" <<YML
services:
  crawler:
    image: $CRAWLER_IMAGE
    ulimits: {nofile: {soft: ${ULIMITS_NOFILE}, hard: ${ULIMITS_NOFILE}}, nproc: ${ULIMITS_NPROC}}
    environment:
      CRAWLER_SLOT_SECONDS: "1"
  postgres:
    image: $pg_image
    ulimits: {nofile: {soft: ${ULIMITS_NOFILE}, hard: ${ULIMITS_NOFILE}}, nproc: ${ULIMITS_NPROC}}
  prometheus:
    image: $prom_image
    ulimits: {nofile: {soft: ${ULIMITS_NOFILE}, hard: ${ULIMITS_NOFILE}}, nproc: ${ULIMITS_NPROC}}
YML
    export POSTGRES_PASSWORD="check-$RUN_ID" GRAFANA_ADMIN_PASSWORD="unused-$RUN_ID"
    METRICS_PUBLISH_PORT=$(free_port)
    PROMETHEUS_PUBLISH_PORT=$(free_port)
    export METRICS_PUBLISH_PORT PROMETHEUS_PUBLISH_PORT
    # podman-compose 1.0.3 (Debian bookworm) cannot read env_file's long syntax
    # (`- path: .env` / `required: false`: TypeError in container_to_args); the copy it
    # reads has that block removed (the check sets the variables itself). It sits next
    # to docker-compose.yml because relative paths are resolved from the file's folder.
    COMPOSE_COPY="$REPO/.image-check-compose-$RUN_ID.yml"
    python3 - "$REPO/docker-compose.yml" "$COMPOSE_COPY" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
text, n = re.subn(r"\n    env_file:\n      - path: [^\n]*\n        required: false", "", text)
open(sys.argv[2], "w").write(text)
print(f"compose copy: {n} env_file block(s) removed", file=sys.stderr)
PY
    local pc=(podman-compose -p "$PROJECT" -f "$COMPOSE_COPY" -f "$TMP/override.yml")
    COMPOSE_DOWN=("${pc[@]}")
    "${pc[@]}" down -v </dev/null >/dev/null 2>&1 || true
    "${pc[@]}" up -d crawler postgres prometheus </dev/null >"$TMP/compose-up.log" 2>&1 || {
        tail -n 40 "$TMP/compose-up.log" >&2
        die "podman-compose up failed (above)" "read the lines above (full log: podman-compose ... up)"
    }
    ok "podman-compose up: $(podman ps --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Names}}' | tr '\n' ' ')"

    step "Prometheus scrapes the crawler container"
    local prom_ctr i state=""
    prom_ctr=$(podman ps --filter "label=io.podman.compose.project=$PROJECT" --filter "label=com.docker.compose.service=prometheus" --format '{{.Names}}' | head -n 1)
    [ -n "$prom_ctr" ] || die "no prometheus container is running" "podman ps -a; podman logs of the prometheus container"
    for ((i = 0; i < 120; i++)); do
        state=$(podman exec "$prom_ctr" wget -qO- 'http://127.0.0.1:9090/api/v1/targets?state=active' 2>/dev/null | python3 -c '
import json, sys
doc = json.load(sys.stdin)
for t in doc["data"]["activeTargets"]:
    if t["labels"].get("job") == "crawler":
        print(t["health"], t["scrapeUrl"], t.get("lastError", ""))
' 2>/dev/null || true)
        case $state in up*) break ;; esac
        sleep 2
    done
    case $state in up*) ;; *)
        for c in $(podman ps -a --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Names}}'); do
            echo "--- $c" >&2; podman logs --tail 15 "$c" >&2 2>&1
        done
        die "Prometheus' crawler target is not up: '$state' (logs above)" \
            "the crawler must listen on 0.0.0.0:9410 and the compose network must resolve 'crawler'" ;;
    esac
    ok "Prometheus target crawler: $state"
    local value
    value=$(podman exec "$prom_ctr" wget -qO- 'http://127.0.0.1:9090/api/v1/query?query=up%7Bjob%3D%22crawler%22%7D' | python3 -c '
import json, sys
print(json.load(sys.stdin)["data"]["result"][0]["value"][1])')
    [ "$value" = "1" ] || die "up{job=\"crawler\"} is $value" "read the Prometheus log"
    ok "PromQL up{job=\"crawler\"} = 1"
    if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$METRICS_PUBLISH_PORT/healthz', timeout=5)" 2>/dev/null; then
        ok "the crawler's published port 127.0.0.1:$METRICS_PUBLISH_PORT answers /healthz"
    else
        say "note: the published port 127.0.0.1:$METRICS_PUBLISH_PORT does not answer from the host (netavark's port forwarding on loopback); the check above ran inside the network"
    fi
    "${pc[@]}" down -v -t 10 </dev/null >"$TMP/compose-down.log" 2>&1 || true
    COMPOSE_DOWN=()
    ok "podman-compose down -v"
}

clean() {
    local tag
    for tag in "$(dockerfile_base)" "localhost/crawler-standin/services-base:$SUITE"; do
        local label
        label=$(podman image inspect --format "{{index .Labels \"$LABEL\"}}" "$tag" 2>/dev/null || true)
        if [ -n "$label" ] && [ "$label" != "<no value>" ]; then
            podman rmi -f "$tag" >/dev/null && ok "removed stand-in $tag"
        fi
    done
    rm -rf "$CACHE" && ok "removed $CACHE"
}

# ------------------------------------------------------------------ main
INSTALL=0
MODE=single
for arg in "$@"; do
    case $arg in
    --install-tools) INSTALL=1 ;;
    single | compose | all | clean) MODE=$arg ;;
    -h | --help) sed -n '2,45p' "$0"; exit 0 ;;
    *) die "unknown argument '$arg'" "see: scripts/image-check.sh --help" ;;
    esac
done
case $MODE in
single) single ;;
compose) compose ;;
all) single; compose ;;
clean) clean ;;
esac
