"""The dev cluster's certificates and keys, made locally on first start.

A real cluster's control plane trusts one CA for client certificates and its serving certificates;
components authenticate to the API server with client certificates whose subject is their identity
(CN = user, O = group), and ServiceAccount tokens are signed by a key pair of their own. This module
makes exactly those files under ``<state>/pki`` and keeps them across restarts, so a kubeconfig
written once stays valid.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Names the API server's serving certificate is valid for: loopback, and the in-cluster Service names.
SERVING_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
SERVING_IPS = ("127.0.0.1", "10.96.0.1")
VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class ClientIdentity:
    """Who a client certificate says its holder is: user name (CN) and groups (O)."""

    file_stem: str
    user: str
    groups: tuple[str, ...] = ()


#: Control-plane clients and the identity each gets. kube-controller-manager and kube-scheduler use
#: the users the default RBAC bootstrap roles are bound to; KWOK plays every kubelet and so is admin.
ADMIN = ClientIdentity("admin", "kubernetes-admin", ("system:masters",))
CONTROLLER_MANAGER = ClientIdentity("kube-controller-manager", "system:kube-controller-manager")
SCHEDULER = ClientIdentity("kube-scheduler", "system:kube-scheduler")
KWOK = ClientIdentity("kwok", "kwok-controller", ("system:masters",))
#: The API server towards kubelets (logs, exec, port-forward): a real node's kubelet authorizes it.
APISERVER_KUBELET_CLIENT = ClientIdentity(
    "apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",)
)
CLIENTS = (ADMIN, CONTROLLER_MANAGER, SCHEDULER, KWOK, APISERVER_KUBELET_CLIENT)
#: The API server's identity towards aggregated API servers (requestheader authentication).
FRONT_PROXY_CLIENT = "front-proxy-client"


@dataclass(frozen=True)
class Pki:
    """Paths of the files :func:`ensure_pki` makes."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def front_proxy_ca_cert(self) -> Path:
        return self.directory / "front-proxy-ca.crt"

    @property
    def front_proxy_ca_key(self) -> Path:
        return self.directory / "front-proxy-ca.key"

    @property
    def front_proxy_client_cert(self) -> Path:
        return self.directory / "front-proxy-client.crt"

    @property
    def front_proxy_client_key(self) -> Path:
        return self.directory / "front-proxy-client.key"

    @property
    def serving_cert(self) -> Path:
        return self.directory / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def sa_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.directory / "sa.pub"

    def client_cert(self, who: ClientIdentity) -> Path:
        return self.directory / f"{who.file_stem}.crt"

    def client_key(self, who: ClientIdentity) -> Path:
        return self.directory / f"{who.file_stem}.key"


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8
            if isinstance(key, ec.EllipticCurvePrivateKey)
            else serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _load_ca(ca_cert: Path, ca_key: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    key = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{ca_key}: expected an EC private key")
    return cert, key


def _name(common_name: str, groups: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _make_ca(cert_path: Path, key_path: Path, common_name: str, now: datetime.datetime) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _issue(
    ca: tuple[Path, Path],
    cert_path: Path,
    key_path: Path,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    now: datetime.datetime,
    sans: list[x509.GeneralName] | None = None,
) -> None:
    ca_cert, ca_key = _load_ca(*ca)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _serving_ips(cert_path: Path) -> set[str]:
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}


def ensure_client(pki: Pki, who: ClientIdentity) -> None:
    """Issue ``who``'s client certificate unless it exists (a real node's kubelet, kube-proxy)."""
    if not (pki.client_cert(who).exists() and pki.client_key(who).exists()):
        _issue(
            (pki.ca_cert, pki.ca_key),
            pki.client_cert(who),
            pki.client_key(who),
            _name(who.user, who.groups),
            ExtendedKeyUsageOID.CLIENT_AUTH,
            datetime.datetime.now(datetime.UTC),
        )


def ensure_pki(directory: Path, extra_ips: tuple[str, ...] = ()) -> Pki:
    """Make whatever of the CA, serving and client certificates and SA keys is missing; return paths.

    ``extra_ips``: more addresses the API server serves on (a real node's side of the host); a
    serving certificate without one of them is issued again.
    """
    pki = Pki(directory)
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    if not (pki.ca_cert.exists() and pki.ca_key.exists()):
        _make_ca(pki.ca_cert, pki.ca_key, "kubejury-dev-cluster-ca", now)
    ca = (pki.ca_cert, pki.ca_key)
    # The aggregation layer's own CA and client, as a real cluster has them (kubeadm's front-proxy).
    if not (pki.front_proxy_ca_cert.exists() and pki.front_proxy_ca_key.exists()):
        _make_ca(pki.front_proxy_ca_cert, pki.front_proxy_ca_key, "kubejury-dev-front-proxy-ca", now)
    if not (pki.front_proxy_client_cert.exists() and pki.front_proxy_client_key.exists()):
        _issue(
            (pki.front_proxy_ca_cert, pki.front_proxy_ca_key),
            pki.front_proxy_client_cert,
            pki.front_proxy_client_key,
            _name(FRONT_PROXY_CLIENT),
            ExtendedKeyUsageOID.CLIENT_AUTH,
            now,
        )
    serving_ips = (*SERVING_IPS, *extra_ips)
    if not (
        pki.serving_cert.exists()
        and pki.serving_key.exists()
        and set(serving_ips) <= _serving_ips(pki.serving_cert)
    ):
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in SERVING_DNS_NAMES]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in serving_ips]
        _issue(
            ca,
            pki.serving_cert,
            pki.serving_key,
            _name("kube-apiserver"),
            ExtendedKeyUsageOID.SERVER_AUTH,
            now,
            sans,
        )
    for who in CLIENTS:
        ensure_client(pki, who)
    if not (pki.sa_key.exists() and pki.sa_pub.exists()):
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_key(pki.sa_key, sa)
        pki.sa_pub.write_bytes(
            sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    return pki


def issue_serving_cert(
    pki: Pki,
    cert_path: Path,
    key_path: Path,
    common_name: str,
    dns_names: tuple[str, ...],
    ips: tuple[str, ...],
) -> None:
    """Issue a serving certificate signed by the cluster CA (a local webhook server the API server calls
    at ``https://127.0.0.1``: its ``caBundle`` is then the cluster CA)."""
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert_path.parent.mkdir(parents=True, exist_ok=True)
    _issue(
        (pki.ca_cert, pki.ca_key),
        cert_path,
        key_path,
        _name(common_name),
        ExtendedKeyUsageOID.SERVER_AUTH,
        datetime.datetime.now(datetime.UTC),
        sans,
    )
