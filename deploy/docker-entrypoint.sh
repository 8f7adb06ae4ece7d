#!/bin/sh
# Container entry point: apply the database migrations before the service starts,
# then hand over to the command (exec: the crawler becomes PID 1's child-free
# process and gets SIGTERM from `docker stop` directly).
#
# Only `crawler run` migrates; one-off commands (`crawler add ...`, `crawler stats`)
# go straight through. Set CRAWLER_SKIP_MIGRATIONS=1 to skip (e.g. read-only replicas).
set -eu

if [ "${1:-}" = "crawler" ] && [ "${2:-}" = "run" ] && [ "${CRAWLER_SKIP_MIGRATIONS:-0}" != "1" ]; then
    echo "docker-entrypoint: applying database migrations (crawler db upgrade)" >&2
    crawler db upgrade
fi

exec "$@"
