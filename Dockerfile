# syntax=docker/dockerfile:1
# The crawler service image: `crawler run` on start, migrations applied first.
#
#   docker build -t crawler .
#   docker run --rm -e CRAWLER_DATABASE_URL=... -p 9410:9410 crawler
#
# Two stages: the builder installs the package from this repository into a venv with
# deploy/install.sh (the same script CI runs, see tests/deploy); the runtime stage copies
# only that venv onto a slim base and runs as an unprivileged user.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------- builder
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Dependency metadata and sources (.dockerignore keeps tests, caches and .git out).
COPY pyproject.toml README.md ./
COPY crawler ./crawler
COPY deploy/install.sh ./deploy/install.sh
RUN sh deploy/install.sh /opt/venv /src

# ---------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="crawler" \
      org.opencontainers.image.description="Incremental web crawler that learns which URLs deserve its polling budget"
RUN groupadd --system --gid 10001 crawler \
 && useradd --system --uid 10001 --gid crawler --home-dir /var/lib/crawler \
            --create-home --shell /usr/sbin/nologin crawler
COPY --from=builder /opt/venv /opt/venv
COPY --chmod=0755 deploy/docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    CRAWLER_METRICS_HOST=0.0.0.0 \
    CRAWLER_METRICS_PORT=9410
WORKDIR /var/lib/crawler
USER crawler:crawler
EXPOSE 9410
# /healthz answers 200 while the crawl loop runs (crawler.health); no curl in slim images.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('CRAWLER_METRICS_PORT', '9410'), timeout=4)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["crawler", "run"]
