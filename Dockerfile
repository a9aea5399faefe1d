# The operator image. Built in CI elsewhere (this repository's tests need no Docker).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
RUN useradd --uid 10001 --no-create-home sundial
USER 10001
ENTRYPOINT ["python", "-m", "sundial"]
