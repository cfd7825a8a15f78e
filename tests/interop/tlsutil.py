"""Test certificates made at test time with the openssl CLI (never committed): a CA, and a
server certificate for 127.0.0.1 signed by it, in the PEM files Kafka's
``ssl.keystore.type=PEM`` reads (private key and chain in one file)."""

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
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
             "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "ext", cwd=d)
    (d / "server.pem").write_text((d / "server.key").read_text() + (d / "server.crt").read_text())
    return {"ca": str(d / "ca.pem"), "keystore": str(d / "server.pem")}
