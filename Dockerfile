# rem-cycle worker image: the daemon (`rem-cycle`) by default; any subcommand via `docker run … status`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A fixed, unprivileged uid/gid so a bind-mounted /data can be chowned to match.
RUN groupadd --system --gid 10001 rem \
    && useradd --system --uid 10001 --gid rem --home-dir /home/rem --create-home --shell /usr/sbin/nologin rem \
    && mkdir -p /data \
    && chown rem:rem /data

WORKDIR /app
COPY pyproject.toml README.md ./
COPY config ./config
COPY store ./store
COPY pipelines ./pipelines
COPY worker ./worker
COPY examples ./examples
# The chromadb client speaks the server's wire protocol: pin it to the server image's version.
# docker-compose.yml passes CHROMA_VERSION, the same value as its chromadb/chroma tag.
ARG CHROMA_VERSION=1.5.9
RUN pip install --no-cache-dir . "chromadb==${CHROMA_VERSION}"

# Everything the worker writes (graph, run state, lazy-edge queue, lock) lives under /data.
ENV REM_DATA_DIR=/data \
    REM_HTTP_PORT=8080
# Inside the container only: the endpoint must be reachable from outside the container's own
# loopback (Docker healthchecks use loopback, but Prometheus scrapes over the network). Outside a
# container the default stays 127.0.0.1. Publish the port to the host's loopback (see compose).
ENV REM_HTTP_HOST=0.0.0.0
VOLUME ["/data"]
EXPOSE 8080

# Numeric, so runtimes can verify "not root" without reading /etc/passwd (runAsNonRoot).
USER 10001:10001
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('REM_HTTP_PORT', '8080') + '/healthz', timeout=4)"]

# SIGTERM (docker stop) ends the current cycle after its transaction; give it REM_GRACE_SECONDS.
STOPSIGNAL SIGTERM
ENTRYPOINT ["rem-cycle"]
CMD []
