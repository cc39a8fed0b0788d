"""A throwaway sshd on a loopback port, for ``DOCKER_HOST=ssh://…``: its own config, host key,
authorized key and pid file in a temporary directory (the system's sshd and its config are
never touched), and a ``HOME`` whose ``.ssh`` holds the client key and the host's entry in
``known_hosts`` (docker-py's paramiko transport rejects unknown hosts).

    with local_sshd(tmp_path) as sshd:
        env = {**os.environ, **sshd.client_env(), "DOCKER_HOST": sshd.docker_host}
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SSHD = Path("/usr/sbin/sshd")


@dataclass(frozen=True, kw_only=True)
class LocalSshd:
    port: int
    home: Path  # the client's HOME (.ssh/id_ed25519, .ssh/known_hosts)

    @property
    def docker_host(self) -> str:
        return f"ssh://root@127.0.0.1:{self.port}"

    def client_env(self) -> dict[str, str]:
        return {"HOME": str(self.home)}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


@contextlib.contextmanager
def local_sshd(directory: Path) -> Iterator[LocalSshd]:
    directory.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    host_pub = _keygen(directory / "host_ed25519")
    home = directory / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    client_pub = _keygen(home / ".ssh" / "id_ed25519")
    (directory / "authorized_keys").write_text(client_pub + "\n")
    key_type, key = host_pub.split()[:2]
    (home / ".ssh" / "known_hosts").write_text(f"[127.0.0.1]:{port} {key_type} {key}\n")
    config = directory / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {directory / 'host_ed25519'}\n"
        f"PidFile {directory / 'sshd.pid'}\nAuthorizedKeysFile {directory / 'authorized_keys'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        "SetEnv PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    log = (directory / "sshd.log").open("wb")
    proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not start: {(directory / 'sshd.log').read_text()}")
            time.sleep(0.05)
        yield LocalSshd(port=port, home=home)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def sshd_available() -> bool:
    return SSHD.is_file() and os.access(SSHD, os.X_OK)
