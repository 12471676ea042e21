# syntax=docker/dockerfile:1
# One image for the kubejury operator and for every generation / judge / aggregation Job.
#
#   docker build -t ghcr.io/kubejury/kubejury:0.1.0 .
#
# Base image: pinned by tag. Pin it by digest as well in your registry mirror
# (python:3.11-slim-bookworm@sha256:...); the digest is not written here because it could not be
# verified from the machine this file was written on (no registry access).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# --------------------------------------------------------------------------- dependencies stage
# Installs kubejury's dependencies into a self-contained virtualenv, /opt/kubejury. This stage reads
# nothing but pyproject.toml, so a change to the sources (or README.md) reuses its layers and a
# rebuild downloads and installs no dependency again. Every dependency ships manylinux wheels for
# CPython 3.11, so no compiler is needed even here. pip, setuptools and wheel live in a virtualenv
# of their own, /opt/pip, and install into /opt/kubejury with --python: /opt/kubejury never holds
# them, and /opt/pip stays in the build stages.
FROM ${PYTHON_IMAGE} AS deps
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml ./
RUN python -m venv /opt/pip \
 && python -m venv --without-pip /opt/kubejury \
 && python -c "import tomllib; t = tomllib.load(open('pyproject.toml', 'rb')); \
print(*t['build-system']['requires'], sep='\n', file=open('build-requirements.txt', 'w')); \
print(*t['project']['dependencies'], sep='\n', file=open('requirements.txt', 'w'))" \
 && /opt/pip/bin/pip install --no-compile -r build-requirements.txt \
 && /opt/pip/bin/pip --python /opt/kubejury/bin/python install --no-compile -r requirements.txt \
 && /opt/kubejury/bin/python -m compileall -q /opt/kubejury/lib

# ---------------------------------------------------------------------------------- build stage
# Builds kubejury's wheel, installs it (without dependencies: they are installed above) and keeps
# in /package only the files that this install added, so the final image carries the dependencies
# and kubejury as two layers and a change to the sources rebuilds only the small one.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
COPY --from=deps /opt /opt
WORKDIR /src
COPY pyproject.toml README.md ./
COPY jobs ./jobs
COPY operator ./operator
RUN cd / && find opt/kubejury ! -type d | sort > /tmp/dependency-files \
 && cd /src && /opt/pip/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /tmp/wheel . \
 && /opt/pip/bin/pip --python /opt/kubejury/bin/python install --no-deps --no-compile /tmp/wheel/*.whl \
 && /opt/kubejury/bin/python -m compileall -q /opt/kubejury/lib \
 && /opt/kubejury/bin/kubejury --help > /dev/null \
 && /opt/kubejury/bin/kubejury-operator --version \
 && cd / && find opt/kubejury ! -type d | sort | comm -13 /tmp/dependency-files - > /tmp/package-files \
 && mkdir /package \
 && xargs --delimiter='\n' --arg-file=/tmp/package-files cp --archive --parents --target-directory=/package

# ---------------------------------------------------------------------------------- final stage
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kubejury" \
      org.opencontainers.image.description="kubejury operator and evaluation Jobs" \
      org.opencontainers.image.licenses="Apache-2.0"
# No build tools, no package manager caches, no pip: remove the base image's own pip too.
RUN python -m pip uninstall -y pip setuptools wheel 2>/dev/null || true \
 && groupadd --system --gid 10001 kubejury \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin kubejury
COPY --from=deps /opt/kubejury /opt/kubejury
COPY --from=build /package/opt/kubejury /opt/kubejury
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
