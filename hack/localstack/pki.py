"""A throw-away CA and the certificates a single-node cluster needs; kubeconfig files."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .common import NODE_IP, NODE_NAME, SERVICE_IP


def write_private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=ca,
        crl_sign=ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


class ClientCert:
    """A client identity: the apiserver takes CN as the user name and O as the group."""

    def __init__(self, directory: Path, name: str, common_name: str, group: str | None) -> None:
        self.cert = directory / f"{name}.crt"
        self.key = directory / f"{name}.key"
        self.subject = _name(common_name, group)


class Pki:
    """Files are reused across runs so that a kubeconfig exported by a developer keeps
    working after the stack restarts."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.ca_cert = directory / "ca.crt"
        self.ca_key = directory / "ca.key"
        self.serving_cert = directory / "apiserver.crt"
        self.serving_key = directory / "apiserver.key"
        self.sa_key = directory / "sa.key"
        self.sa_pub = directory / "sa.pub"
        self.admin = ClientCert(directory, "admin", "sundial-admin", "system:masters")
        # The node's identity, which the Node authorizer limits to its own Pods' objects.
        self.kubelet = ClientCert(directory, "kubelet", f"system:node:{NODE_NAME}", "system:nodes")
        # What the apiserver shows the kubelet for logs and exec (webhook-authorized there).
        self.apiserver_kubelet_client = ClientCert(
            directory, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"
        )
        # Bound by the bootstrap RBAC policy to system:node-proxier.
        self.kube_proxy = ClientCert(directory, "kube-proxy", "system:kube-proxy", None)

    @property
    def clients(self) -> tuple[ClientCert, ...]:
        return (self.admin, self.kubelet, self.apiserver_kubelet_client, self.kube_proxy)

    @property
    def files(self) -> tuple[Path, ...]:
        fixed = (
            self.ca_cert,
            self.ca_key,
            self.serving_cert,
            self.serving_key,
            self.sa_key,
            self.sa_pub,
        )
        return fixed + tuple(path for c in self.clients for path in (c.cert, c.key))

    def ensure(self) -> None:
        if self._reusable():
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        for issued in self.dir.glob("user-*"):  # signed by the CA about to be replaced
            issued.unlink()
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = _name("sundial-local-ca")
        ca = (
            self._builder(ca_name, ca_name, ca_key.public_key(), days=3650)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(ca=True), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        write_private(self.ca_key, _key_pem(ca_key))
        self.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))

        sans: list[x509.GeneralName] = [
            x509.DNSName(name)
            for name in (
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            )
        ]
        sans += [
            x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", SERVICE_IP, NODE_IP)
        ]
        self._issue_leaf(
            ca,
            ca_key,
            _name("kube-apiserver"),
            ExtendedKeyUsageOID.SERVER_AUTH,
            self.serving_cert,
            self.serving_key,
            sans=sans,
        )
        for client in self.clients:
            self._issue_leaf(
                ca, ca_key, client.subject, ExtendedKeyUsageOID.CLIENT_AUTH, client.cert, client.key
            )
        # Service-account tokens are RS256 by convention; some clients accept nothing else.
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        write_private(self.sa_key, _key_pem(sa_key))
        self.sa_pub.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def client(self, name: str, common_name: str, group: str | None = None) -> ClientCert:
        """A client identity of the stack's CA, issued on first use and kept with the
        others: a user the tests can throttle, refuse or revoke (the admin, in
        system:masters, is exempt from flow control and from RBAC)."""
        client = ClientCert(self.dir, f"user-{name}", common_name, group)
        if not (client.cert.is_file() and client.key.is_file()):
            ca = x509.load_pem_x509_certificate(self.ca_cert.read_bytes())
            ca_key = serialization.load_pem_private_key(self.ca_key.read_bytes(), password=None)
            if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
                raise TypeError(f"{self.ca_key} is not the EC key this module writes")
            self._issue_leaf(
                ca, ca_key, client.subject, ExtendedKeyUsageOID.CLIENT_AUTH, client.cert, client.key
            )
        return client

    def _reusable(self) -> bool:
        if not all(path.is_file() for path in self.files):
            return False
        try:
            cert = x509.load_pem_x509_certificate(self.serving_cert.read_bytes())
        except ValueError:
            return False
        return cert.not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=1)

    @staticmethod
    def _builder(
        subject: x509.Name,
        issuer: x509.Name,
        public_key: ec.EllipticCurvePublicKey,
        days: int,
    ) -> x509.CertificateBuilder:
        now = dt.datetime.now(dt.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            # Back-dated so that a slightly skewed clock does not reject a fresh cert.
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        )

    def _issue_leaf(
        self,
        ca: x509.Certificate,
        ca_key: ec.EllipticCurvePrivateKey,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        cert_path: Path,
        key_path: Path,
        sans: list[x509.GeneralName] | None = None,
    ) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            self._builder(subject, ca.subject, key.public_key(), days=365)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(ca=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        write_private(key_path, _key_pem(key))
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def write_kubeconfig(path: Path, pki: Pki, server: str, client: ClientCert | None = None) -> None:
    """A kubeconfig for `client` (default: the admin) that trusts the stack's CA."""
    client = client or pki.admin

    def b64(file: Path) -> str:
        return base64.b64encode(file.read_bytes()).decode()

    user = client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "sundial-local",
                "cluster": {"server": server, "certificate-authority-data": b64(pki.ca_cert)},
            }
        ],
        "users": [
            {
                "name": str(user),
                "user": {
                    "client-certificate-data": b64(client.cert),
                    "client-key-data": b64(client.key),
                },
            }
        ],
        "contexts": [
            {
                "name": "sundial-local",
                "context": {"cluster": "sundial-local", "user": str(user), "namespace": "default"},
            }
        ],
        "current-context": "sundial-local",
    }
    write_private(path, yaml.safe_dump(config, sort_keys=False).encode())
