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
    metrics_port: int = Field(default=9090, ge=0, description="/metrics; 0 turns it off.")
    temporal_address: str = Field(default="localhost:7233", description="Temporal frontend.")
    temporal_namespace: str = "default"
    temporal_tls_cert_file: str | None = Field(default=None, description="Client certificate.")
    temporal_tls_key_file: str | None = Field(default=None, description="Client private key.")
    temporal_tls_ca_file: str | None = Field(default=None, description="Server CA bundle.")
    temporal_api_key_file: str | None = Field(
        default=None, description="File holding an API key (a mounted Secret)."
    )
    temporal_api_key: str | None = Field(default=None, description="API key (prefer the file).")
    schedule_id_prefix: str = Field(
        default="sundial/",
        description="Prefix of every Temporal schedule id; give each cluster its own when "
        "several share one Temporal namespace.",
    )
    temporal_resync_seconds: float = Field(
        default=30.0, ge=5, description="How often each temporal-backed job is re-described."
    )
    temporal_requests_per_second: float = Field(
        default=20.0, gt=0, description="Ceiling on the operator's request rate to Temporal."
    )

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
