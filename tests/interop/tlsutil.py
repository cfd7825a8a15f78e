"""Test certificates made at test time with the openssl CLI (and Java's keytool for a trust
store Java reads), never committed: a CA, server certificates for 127.0.0.1 signed by it, in
the PEM files Kafka's ``ssl.keystore.type=PEM`` reads (private key and chain in one file), and
for mutual TLS client certificates with their keys (plain and encrypted PKCS#8) and PKCS#12
stores (the PBES2/AES ones ``openssl pkcs12 -export`` makes by default, and legacy 3DES)."""

import shutil
import ssl
import subprocess
from pathlib import Path


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(directory):
    """Writes ca.pem, server.pem (PKCS#8 key + certificate) into ``directory``; returns the
    paths as a dict."""
    d = Path(directory)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
             "-out", "ca.pem", "-days", "2", "-subj", "/CN=shoal-interop-ca", cwd=d)
    make_server(d, "server")
    return {"ca": str(d / "ca.pem"), "keystore": str(d / "server.pem")}


def make_server(directory, name, subject="/CN=127.0.0.1"):
    """A server certificate for 127.0.0.1 and localhost signed by the CA of ``directory``
    (``make_certs`` first), with a new key and serial: NAME.pem (key + certificate), NAME.crt,
    NAME.key. Returns the path of NAME.pem."""
    d = Path(directory)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", subject, cwd=d)
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", "ext", cwd=d)
    (d / f"{name}.pem").write_text((d / f"{name}.key").read_text() + (d / f"{name}.crt").read_text())
    return str(d / f"{name}.pem")


def make_client(directory, name, cn, key_password=None):
    """A client certificate with subject CN=``cn`` signed by the CA of ``directory``:
    NAME.crt, NAME.key (plain PKCS#8) and, with ``key_password``, NAME.enc.key (PKCS#8
    encrypted, PBES2/AES-256). Returns the paths as a dict."""
    d = Path(directory)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
    (d / "client-ext").write_text("extendedKeyUsage=clientAuth\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "2",
             "-extfile", "client-ext", cwd=d)
    paths = {"cert": str(d / f"{name}.crt"), "key": str(d / f"{name}.key")}
    if key_password:
        _openssl("pkcs8", "-topk8", "-in", f"{name}.key", "-out", f"{name}.enc.key",
                 "-v2", "aes-256-cbc", "-passout", f"pass:{key_password}", cwd=d)
        paths["encrypted_key"] = str(d / f"{name}.enc.key")
    return paths


def make_pkcs12(directory, name, cert, key, password, legacy=False):
    """NAME.p12 holding ``key`` and ``cert`` with the CA certificate as its chain, under
    ``password``: openssl's default PBES2/AES-256 with a SHA-256 MAC, or with ``legacy`` the
    PBE-SHA1-3DES and SHA-1 MAC of older stores. Returns its path."""
    d = Path(directory)
    args = ["pkcs12", "-export", "-in", cert, "-inkey", key, "-certfile", "ca.pem",
            "-name", name, "-out", f"{name}.p12", "-passout", f"pass:{password}"]
    if legacy:
        args += ["-keypbe", "PBE-SHA1-3DES", "-certpbe", "PBE-SHA1-3DES", "-macalg", "sha1"]
    _openssl(*args, cwd=d)
    return str(d / f"{name}.p12")


def make_truststore_pkcs12(directory, name, password):
    """NAME.p12 holding the CA certificate as a trusted entry, made with Java's keytool (Java
    only trusts certificates marked trusted, which OpenSSL 3.0 cannot mark). Returns its path."""
    d = Path(directory)
    keytool = shutil.which("keytool") or "keytool"
    subprocess.run([keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", "ca.pem",
                    "-keystore", f"{name}.p12", "-storetype", "PKCS12",
                    "-storepass", password], cwd=d, check=True, capture_output=True, timeout=60)
    return str(d / f"{name}.p12")


def serial_of(path):
    """The serial number of the (first) certificate in a PEM file, as an int."""
    out = subprocess.run(["openssl", "x509", "-in", path, "-noout", "-serial"], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return int(out.strip().split("=", 1)[1], 16)


def peer_certificate(bootstrap, ca, cert, key):
    """Opens a TLS connection to ``bootstrap`` with a client certificate and returns the
    broker's certificate as (issuer CN, serial number)."""
    import socket

    host, port = bootstrap.rsplit(":", 1)
    context = ssl.create_default_context(cafile=ca)
    context.load_cert_chain(cert, key)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            peer = tls.getpeercert()
    issuer = dict(x[0] for x in peer["issuer"])
    return issuer.get("commonName"), int(peer["serialNumber"], 16)
