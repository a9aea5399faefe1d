"""The local stack's TLS front for Temporal refuses what a real Temporal with mutual TLS or
API keys refuses, and serves what it serves: the ground Sundial's connection tests stand on."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client
from temporalio.service import RPCError, TLSConfig

from localstack import LocalStack

pytestmark = pytest.mark.cluster


async def _list_schedules(address: str, tls: TLSConfig, api_key: str | None = None) -> None:
    client = await asyncio.wait_for(Client.connect(address, tls=tls, api_key=api_key), 15)
    async for _ in await client.list_schedules():
        break


def _refused(address: str, tls: TLSConfig | bool, api_key: str | None = None) -> str:
    """How the SDK reports the refusal: at connect, a RuntimeError carrying the status."""
    with pytest.raises((RPCError, RuntimeError)) as refused:
        asyncio.run(_list_schedules(address, tls, api_key))  # type: ignore[arg-type]
    error = refused.value
    if isinstance(error, RPCError):
        return error.status.name
    return str(error)


def test_mutual_tls_admits_only_the_test_ca_client(stack: LocalStack) -> None:
    front = stack.temporal_tls
    good = TLSConfig(
        server_root_ca_cert=front.ca_pem,
        client_cert=front.client_cert_pem,
        client_private_key=front.client_key_pem,
    )
    asyncio.run(_list_schedules(front.mtls_address, good))
    wrong = TLSConfig(
        server_root_ca_cert=front.ca_pem,
        client_cert=front.wrong_client_cert_pem,
        client_private_key=front.wrong_client_key_pem,
    )
    assert "Unauthenticated" in _refused(front.mtls_address, wrong)
    without = TLSConfig(server_root_ca_cert=front.ca_pem)
    assert "Unauthenticated" in _refused(front.mtls_address, without)


def test_the_api_key_listener_admits_only_the_key(stack: LocalStack) -> None:
    front = stack.temporal_tls
    tls = TLSConfig(server_root_ca_cert=front.ca_pem)
    asyncio.run(_list_schedules(front.api_key_address, tls, front.api_key))
    for key in ("wrong-key", None):
        assert "Unauthenticated" in _refused(front.api_key_address, tls, key)
    # Plaintext to a TLS listener never gets through.
    assert _refused(front.api_key_address, False, front.api_key)
