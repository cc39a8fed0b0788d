"""The TLS test hub (tests/support/hub_server.py: anonymous bearer tokens, blob GETs
redirected to a CDN name) behind benchmarks/_delay_proxy.py, for the registry benchmarks:
start it, read how many requests it has seen.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks._common import ROOT
from benchmarks._delay_proxy import DelayProxy

STATE = Path(os.environ.get("ROCMENV_TESTENV_STATE", "/var/lib/rocmenv-testenv"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def hub_behind_delay(one_way: float, upstream: str) -> Iterator[tuple[int, DelayProxy]]:
    hub_port = free_port()
    with DelayProxy(("127.0.0.1", hub_port), one_way) as proxy:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "tests/support/hub_server.py"),
                "--listen",
                f"127.0.0.1:{hub_port}",
                "--upstream",
                upstream,
                "--cert",
                str(STATE / "tls/server.crt"),
                "--key",
                str(STATE / "tls/server.key"),
                "--public-port",
                str(proxy.port),
            ]
        )
        try:
            for _ in range(100):
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", hub_port)),
                ):
                    break
                time.sleep(0.05)
            yield proxy.port, proxy
        finally:
            proc.terminate()
            proc.wait(10)


def hub_seq(port: int) -> int:
    import ssl
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(STATE / "tls/ca.crt"))
    with urllib.request.urlopen(
        f"https://registry.rocmenv.test:{port}/_hub/seq", context=ctx, timeout=30
    ) as resp:
        seq: int = json.loads(resp.read())["seq"]
        return seq
