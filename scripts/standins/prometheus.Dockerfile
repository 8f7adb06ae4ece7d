# Stand-in for prom/prometheus, from Debian's prometheus package, for
# scripts/image-check.sh compose. Same interface as docker-compose.yml uses it: the
# binary is the entry point (compose gives the flags), config in /etc/prometheus,
# data in /prometheus, runs as nobody, wget for the healthcheck.
ARG BASE=localhost/crawler-standin/services-base:bookworm
FROM ${BASE}
RUN mkdir -p /prometheus && chown nobody:nogroup /prometheus
USER nobody
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
