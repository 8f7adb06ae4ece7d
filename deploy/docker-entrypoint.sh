#!/bin/sh
# Container entry point: apply the database migrations before the service starts,
# then hand over to the command.
#
# Only `crawler run` migrates; one-off commands (`crawler add ...`, `crawler stats`)
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
