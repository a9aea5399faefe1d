# The operator image (docs/local-images.md): `make image`, or docker build / buildah bud here.
#
# BASE: an image with CPython 3.11 and its venv module; the build and final stages use the same
# one (the venv's python is a link to the base's). The default is the public Debian bookworm
# image. Pin it by digest when you build for real, e.g.
#   --build-arg BASE=python:3.11-slim-bookworm@sha256:<digest>
# (no digest is written here: it cannot be resolved on a machine without a registry). The
# local build (hack/images.py) passes its own bookworm base, built with debootstrap.
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
# pip's own settings, empty by default: install from the package index. The local build has no
# network; hack/images.py downloads the wheels from the same lock files into wheelhouse/ in the
# build context and passes PIP_NO_INDEX=1 PIP_FIND_LINKS=/src/wheelhouse.
ARG PIP_NO_INDEX=
ARG PIP_FIND_LINKS=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# .dockerignore keeps the context to pyproject.toml, the two lock files, operator/ and an
# optional wheelhouse/.
COPY . .
# /opt/build: pip and the build backend, pinned with hashes (requirements-build.lock); it never
# reaches the final image. /opt/sundial: the runtime venv, without pip, holding exactly the
# hashed pins of requirements.lock (--no-deps: nothing unlocked comes in) and the project's
# wheel. Byte-compiled here, so the operator never writes .pyc files (read-only root file
# system).
RUN python3 -m venv /opt/build \
 && /opt/build/bin/pip install --no-cache-dir --require-hashes --no-deps \
      -r requirements-build.lock \
 && python3 -m venv --without-pip /opt/sundial \
 && /opt/build/bin/pip --python /opt/sundial/bin/python install --no-cache-dir \
      --require-hashes --no-deps -r requirements.lock \
 && /opt/build/bin/pip wheel --no-cache-dir --no-build-isolation --no-deps \
      --wheel-dir /tmp/dist . \
 && /opt/build/bin/pip --python /opt/sundial/bin/python install --no-cache-dir --no-deps \
      /tmp/dist/sundial-*.whl \
 && /opt/sundial/bin/python -m compileall -q /opt/sundial

FROM ${BASE}
ARG VERSION=dev
# SPDX expression. pyproject.toml declares no license yet: NOASSERTION until it does
# (hack/images.py and `make image` pass project.license once it is there).
ARG LICENSES=NOASSERTION
# The repository URL; hack/images.py and `make image` pass pyproject.toml's
# project.urls.Source once it is there.
ARG SOURCE=
LABEL org.opencontainers.image.title="sundial" \
      org.opencontainers.image.description="Kubernetes operator: one ScheduledJob, a native CronJob or a Temporal Schedule, and every missed run reported." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="${LICENSES}" \
      org.opencontainers.image.source="${SOURCE}"
COPY --from=build /opt/sundial /opt/sundial
# A numeric user with no home and no login; --no-log-init: no sparse lastlog entry for a high
# uid. Nothing under /opt/sundial is writable by it.
RUN groupadd --gid 10001 sundial \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin --no-log-init sundial
# HOME and TMPDIR: /tmp, the one writable place (the Deployment mounts an emptyDir there).
ENV PATH=/opt/sundial/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp
USER 10001:10001
ENTRYPOINT ["/opt/sundial/bin/python", "-m", "sundial"]
