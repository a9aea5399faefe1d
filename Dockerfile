# The operator image.
#
# BASE: an image with Python 3.11+ and its venv module. With a registry, the default public
# image. Without one, hack/images.py builds this file FROM its local Debian base
# (localhost/sundial/python-base:bookworm; docs/local-images.md).
# PIP_OPTIONS: empty installs from the package index. The local build runs with no network,
# so hack/images.py downloads the wheels on the host into wheelhouse/ in the build context
# and passes "--no-index --find-links=wheelhouse".
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ARG PIP_OPTIONS=
WORKDIR /src
# .dockerignore keeps the context to pyproject.toml, operator/ and an optional wheelhouse/.
COPY . .
RUN python3 -m venv /opt/sundial \
 && /opt/sundial/bin/pip install --no-cache-dir --disable-pip-version-check $PIP_OPTIONS .

FROM ${BASE}
COPY --from=build /opt/sundial /opt/sundial
RUN useradd --uid 10001 --no-create-home sundial
ENV PYTHONUNBUFFERED=1
USER 10001
ENTRYPOINT ["/opt/sundial/bin/sundial"]
