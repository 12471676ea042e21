# syntax=docker/dockerfile:1
# One image for the kubejury operator and for every generation / judge / aggregation Job.
#
#   docker build -t ghcr.io/kubejury/kubejury:0.1.0 .
#
# Base image: pinned by tag. Pin it by digest as well in your registry mirror
# (python:3.11-slim-bookworm@sha256:...); the digest is not written here because it could not be
# verified from the machine this file was written on (no registry access).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ---------------------------------------------------------------------------------- build stage
# Installs kubejury and its dependencies into a self-contained virtualenv. Every dependency ships
# manylinux wheels for CPython 3.11, so no compiler is needed even here; pip and friends stay in
# this stage.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/kubejury
# Dependencies first (better layer caching), then the sources.
COPY pyproject.toml README.md ./
COPY jobs ./jobs
COPY operator ./operator
RUN /opt/kubejury/bin/pip install --no-compile . \
 && /opt/kubejury/bin/python -m compileall -q /opt/kubejury/lib \
 && /opt/kubejury/bin/pip uninstall -y pip setuptools wheel \
 && /opt/kubejury/bin/kubejury --help > /dev/null \
 && /opt/kubejury/bin/kubejury-operator --version

# ---------------------------------------------------------------------------------- final stage
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kubejury" \
      org.opencontainers.image.description="kubejury operator and evaluation Jobs" \
      org.opencontainers.image.licenses="Apache-2.0"
# No build tools, no package manager caches, no pip: remove the base image's own pip too.
RUN python -m pip uninstall -y pip setuptools wheel 2>/dev/null || true \
 && groupadd --system --gid 10001 kubejury \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin kubejury
COPY --from=build /opt/kubejury /opt/kubejury
# HOME and caches point at /tmp: the pods run with a read-only root filesystem and an emptyDir /tmp.
ENV PATH=/opt/kubejury/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib \
    XDG_CACHE_HOME=/tmp/.cache
# Numeric user so Kubernetes can verify runAsNonRoot without reading /etc/passwd.
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080 9090 9443
# The Jobs override the command (kubejury generate|judge|aggregate ...).
ENTRYPOINT []
CMD ["kubejury-operator"]
