"""Operator-wide configuration, read once at start-up from SUNDIAL_* environment variables."""

from __future__ import annotations

import os

from pydantic import BaseModel, Field

ENV_PREFIX = "SUNDIAL_"


class OperatorConfig(BaseModel):
    kubeconfig: str | None = Field(
        default=None, description="Path of a kubeconfig; default: in-cluster, then KUBECONFIG."
    )
    namespaces: list[str] = Field(
        default_factory=list, description="Namespaces to watch (comma-separated); empty: all."
    )
    workers: int = Field(default=4, ge=1, le=64, description="Concurrent reconciles.")
    log_level: str = "INFO"
    health_port: int = Field(default=8080, description="/healthz for the liveness probe.")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> OperatorConfig:
        environ = dict(os.environ if environ is None else environ)
        values: dict[str, object] = {}
        for name in cls.model_fields:
            raw = environ.get(ENV_PREFIX + name.upper())
            if raw is None:
                continue
            if name == "namespaces":
                values[name] = [n.strip() for n in raw.split(",") if n.strip()]
            else:
                values[name] = raw
        return cls.model_validate(values)
