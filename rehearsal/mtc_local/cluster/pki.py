"""The local API server's TLS: a CA and a serving certificate per home, made once with `cryptography`.

kubectl (client-go) sends a bearer token only over HTTPS, so the local cluster serves HTTPS like a real one, and the
kubeconfig carries the CA (`certificate-authority-data`), as `kind` does. Keys are private (0600) in <home>/pki.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from pathlib import Path

from mtc_local.shared import auth

VALID_DAYS = 3650


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, auth.PRIVATE_FILE)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def _names(hosts: tuple[str, ...]) -> list:
    from cryptography import x509

    names: list = []
    for host in dict.fromkeys(("127.0.0.1", "localhost", *hosts)):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def ensure(root: Path, hosts: tuple[str, ...] = ()) -> tuple[Path, Path, Path]:
    """(ca.crt, server.crt, server.key) under <root>/pki, made when missing or when a host is not covered."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder = root / "pki"
    auth.make_private_dir(folder)
    ca_path, cert_path, key_path = folder / "ca.crt", folder / "server.crt", folder / "server.key"
    wanted = _names(hosts)
    if ca_path.exists() and cert_path.exists() and key_path.exists():
        current = x509.load_pem_x509_certificate(cert_path.read_bytes())
        covered = current.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        if all(name in covered for name in wanted):
            return ca_path, cert_path, key_path
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mtc-local-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mtc-local-apiserver")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(wanted), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    _write_private(key_path, key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    _write_private(cert_path, cert.public_bytes(pem))
    _write_private(ca_path, ca.public_bytes(pem))
    return ca_path, cert_path, key_path


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context
