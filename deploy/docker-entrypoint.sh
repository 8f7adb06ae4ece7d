#!/bin/sh
# Container entry point: apply the database migrations before the service starts,
# then hand over to the command.
#
# `crawler run` first refuses the placeholder passwords of .env.example (exit 78,
# EX_CONFIG: a restart cannot fix it). Only `crawler run` migrates; one-off commands (`crawler add ...`, `crawler stats`)
# go straight through. Set CRAWLER_SKIP_MIGRATIONS=1 to skip (e.g. read-only replicas).
#
# Signals. Under an init (`docker run --init`, compose's `init: true`) this script is
# not PID 1: it execs the command, which then gets SIGTERM from `docker stop` directly.
# As PID 1 (a plain `docker run` / `podman run`), the kernel drops every signal PID 1
# has no handler for, so a SIGTERM sent while the migrations ran or while Python was
# still importing (before the service installs its handler) was lost, and the stop
# ended in SIGKILL after the 10 s grace period (measured: exit 137 after 10.6 s,
# scripts/image-check.sh). So as PID 1 the script stays the parent: it runs each step
# as a child, passes SIGTERM/SIGINT/SIGHUP on, and exits with the child's status
# (0 after a clean stop, 143 when the child died of the SIGTERM itself).
set -eu

# Run "$@" as a child, forward SIGTERM/SIGINT/SIGHUP to it, return its exit status.
run_forwarding() {
    "$@" &
    child=$!
    trap 'got=1; kill -TERM "$child" 2>/dev/null || :' TERM
    trap 'got=1; kill -INT "$child" 2>/dev/null || :' INT
    trap 'got=1; kill -HUP "$child" 2>/dev/null || :' HUP
    while :; do
        got=""
        # `wait` returns early (status > 128) when a trapped signal arrives; the
        # child is still there then, so wait again for its real status.
        if wait "$child"; then status=0; else status=$?; fi
        [ -n "$got" ] || break
    done
    trap - TERM INT HUP
    return "$status"
}

# Refuse the placeholder passwords of .env.example: compose's ${VAR:?} check passes any
# value, so a stack started from the copied example would run with a published password.
if [ "${1:-}" = "crawler" ] && [ "${2:-}" = "run" ]; then
    for pair in "POSTGRES_PASSWORD:change-me-postgres" "GRAFANA_ADMIN_PASSWORD:change-me-grafana"; do
        name=${pair%%:*}
        placeholder=${pair#*:}
        eval "value=\${$name:-}"
        if [ "$value" = "$placeholder" ]; then
            echo "docker-entrypoint: $name is still the placeholder '$placeholder' of .env.example: set a password of your own in .env, then docker compose up -d" >&2
            exit 78
        fi
    done
    case "${CRAWLER_DATABASE_URL:-}" in
        *:change-me-postgres@*)
            echo "docker-entrypoint: CRAWLER_DATABASE_URL holds the placeholder password 'change-me-postgres' of .env.example: set POSTGRES_PASSWORD in .env, then docker compose up -d" >&2
            exit 78 ;;
    esac
fi

pid1=0
[ "$$" = 1 ] && pid1=1

if [ "${1:-}" = "crawler" ] && [ "${2:-}" = "run" ] && [ "${CRAWLER_SKIP_MIGRATIONS:-0}" != "1" ]; then
    echo "docker-entrypoint: applying database migrations (crawler db upgrade)" >&2
    if [ "$pid1" = 1 ]; then
        run_forwarding crawler db upgrade || exit "$status"
    else
        crawler db upgrade
    fi
fi

if [ "$pid1" = 1 ]; then
    run_forwarding "$@" || exit "$status"
    exit 0
fi
exec "$@"
