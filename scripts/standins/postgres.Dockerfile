# Stand-in for the official postgres image, from Debian's postgresql package, for
# scripts/image-check.sh compose (FROM: the Debian base the script imports). Same
# interface as far as docker-compose.yml uses it: POSTGRES_USER/PASSWORD/DB initialise
# an empty /var/lib/postgresql/data, pg_isready is on PATH, port 5432, runs as postgres.
ARG BASE=localhost/crawler-standin/services-base:bookworm
FROM ${BASE}
ENV PGDATA=/var/lib/postgresql/data
COPY --chmod=0755 postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
RUN set -eu; bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1); \
    ln -s "$bindir" /usr/local/lib/postgresql-bin; \
    mkdir -p "$PGDATA" /var/run/postgresql; \
    chown postgres:postgres "$PGDATA" /var/run/postgresql; chmod 0700 "$PGDATA"
ENV PATH=/usr/local/lib/postgresql-bin:$PATH
USER postgres
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["postgres-entrypoint.sh"]
