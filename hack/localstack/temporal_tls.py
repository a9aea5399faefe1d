"""A TLS front for the Temporal dev server, which serves neither TLS nor API keys: nginx
(Debian's package) with one listener for mutual TLS and one for TLS plus an API key, both
forwarding gRPC to the dev server. What it takes to test Sundial's connections with real
credentials (../shared/reference/temporal-tls.md has the facts it rests on)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .common import Ports, StackError
from .process import Server, port_open

# What nginx answers instead of forwarding: a gRPC status, so that clients see
# UNAUTHENTICATED rather than an HTTP error they cannot read.
_REFUSE = """
        location @unauthenticated {{
            internal;
            default_type application/grpc;
            add_header grpc-status 16 always;
            add_header grpc-message "{message}" always;
            return 204;
        }}"""


@dataclass(frozen=True)
class TemporalTLS:
    """How to reach the front, and the credentials that pass it (and some that do not)."""

    mtls_address: str
    api_key_address: str
    ca_pem: bytes
    client_cert_pem: bytes
    client_key_pem: bytes
    wrong_client_cert_pem: bytes  # signed by another CA: refused
    wrong_client_key_pem: bytes
    api_key: str


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[str, ec.EllipticCurvePrivateKey] | None,
    usage: x509.ObjectIdentifier | None,
) -> bytes:
    """An X.509 v3 certificate (rustls refuses v1): a CA when `issuer` is None."""
    now = dt.datetime.now(dt.UTC)
    issuer_name, issuer_key = issuer or (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    is_ca = issuer is None
    usage_bits = x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=is_ca, crl_sign=is_ca,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
    builder = builder.add_extension(usage_bits, critical=True)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if usage == ExtendedKeyUsageOID.SERVER_AUTH:
        names: list[x509.GeneralName] = [
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.DNSName("localhost"),
        ]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    certificate = builder.sign(issuer_key, hashes.SHA256())
    return certificate.public_bytes(serialization.Encoding.PEM)


class TemporalFront(Server):
    def __init__(self, log_dir: Path, pid_dir: Path, state_dir: Path, ports: Ports) -> None:
        super().__init__("temporal-tls", log_dir, pid_dir)
        self.dir = state_dir / "temporal-tls"
        self.ports = ports
        self._credentials: TemporalTLS | None = None

    @property
    def credentials(self) -> TemporalTLS:
        if self._credentials is None:
            raise StackError("the Temporal TLS front is not started (SUNDIAL_TEMPORAL_TLS=0?)")
        return self._credentials

    def _make_credentials(self) -> TemporalTLS:
        """New each start: a CA, the server's and a client's certificates, a client
        certificate of another CA, and an API key."""
        ca_key, other_ca_key = _key(), _key()
        ca = ("sundial-test-ca", ca_key)
        server_key, client_key, wrong_key = _key(), _key(), _key()
        files = {
            "ca.crt": _certificate("sundial-test-ca", ca_key, None, None),
            "server.crt": _certificate(
                "localhost", server_key, ca, ExtendedKeyUsageOID.SERVER_AUTH
            ),
            "server.key": _pem_key(server_key),
        }
        self.dir.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (self.dir / name).write_bytes(data)
        (self.dir / "server.key").chmod(0o600)
        return TemporalTLS(
            mtls_address=f"127.0.0.1:{self.ports.temporal_mtls}",
            api_key_address=f"127.0.0.1:{self.ports.temporal_api_key}",
            ca_pem=files["ca.crt"],
            client_cert_pem=_certificate(
                "sundial-client", client_key, ca, ExtendedKeyUsageOID.CLIENT_AUTH
            ),
            client_key_pem=_pem_key(client_key),
            wrong_client_cert_pem=_certificate(
                "intruder", wrong_key, ("other-ca", other_ca_key), ExtendedKeyUsageOID.CLIENT_AUTH
            ),
            wrong_client_key_pem=_pem_key(wrong_key),
            api_key=secrets.token_urlsafe(24),
        )

    def _config(self, api_key: str) -> str:
        d, p = self.dir, self.ports
        upstream = f"grpc://127.0.0.1:{p.temporal}"
        temp = "\n".join(
            f"    {kind}_temp_path {d}/tmp-{kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        return f"""
daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 512; }}
http {{
    access_log off;
{temp}
    ssl_certificate {d}/server.crt;
    ssl_certificate_key {d}/server.key;
    grpc_read_timeout 300s;
    grpc_send_timeout 300s;
    server {{
        listen 127.0.0.1:{p.temporal_mtls} ssl http2;
        ssl_client_certificate {d}/ca.crt;
        ssl_verify_client on;
        # 495: a certificate that does not verify; 496: none sent.
        error_page 495 496 = @unauthenticated;
        location / {{ grpc_pass {upstream}; }}
{_REFUSE.format(message="a client certificate of the test CA is required")}
    }}
    server {{
        listen 127.0.0.1:{p.temporal_api_key} ssl http2;
        error_page 401 = @unauthenticated;
        location / {{
            if ($http_authorization != "Bearer {api_key}") {{ return 401; }}
            grpc_pass {upstream};
        }}
{_REFUSE.format(message="missing or wrong API key")}
    }}
}}
"""

    def spawn(self) -> None:
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(nginx).exists():
            raise StackError(
                "nginx is needed for the Temporal TLS front: run hack/install-node-packages.sh "
                "(or apt-get install nginx-light), or set SUNDIAL_TEMPORAL_TLS=0 to go without"
            )
        self._credentials = self._make_credentials()
        conf = self.dir / "nginx.conf"
        conf.write_text(self._config(self._credentials.api_key))
        conf.chmod(0o600)
        self.start(
            [nginx, "-c", str(conf), "-p", str(self.dir)],
            ports=[self.ports.temporal_mtls, self.ports.temporal_api_key],
        )

    def wait(self, timeout: float) -> None:
        p = self.ports
        self.wait_ready(
            lambda: port_open(p.temporal_mtls) and port_open(p.temporal_api_key),
            timeout,
            self.credentials.mtls_address,
        )
