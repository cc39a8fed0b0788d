"""The shared test environment: constants, the image family, and a tiny registry client.

``scripts/setup.sh`` builds the environment (see its header); this module is what tests
and the setup helper (``scripts/lib/testenv_setup.py``) share:

* constants: :data:`OPEN_REGISTRY`, :data:`AUTH_REGISTRY`, :data:`TOKEN_SERVER_URL`,
  :data:`TEST_USERNAME` / :data:`TEST_PASSWORD`, :data:`SGL_DEV_REPO`, …
* :func:`load_family` → :class:`Family`, the typed ``images/family.toml``;
* :func:`engine_ping`, :func:`registry_status` — reachability checks used by the fixtures;
* :class:`RegistryClient` — OCI Distribution v2 over plain HTTP on loopback, keep-alive,
  with the bearer-token flow (anonymous or Basic credentials at the token realm);
* :func:`push_manifest_copy`, :func:`unique_repo` — throwaway repositories/tags for tests
  (e.g. re-point a tag between ``pin`` and ``validate`` without touching shared tags);
* :func:`push_tagset` — thousands of tags by manifest PUTs (what setup uses).

This is test-support code: it is deliberately independent of ``rocmenv`` (the code under
test) and uses only the standard library.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import http.client
import io
import json
import os
import re
import secrets
import shutil
import socket
import sys
import tarfile
import time
import typing
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# --------------------------------------------------------------------------- constants

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGES_DIR = REPO_ROOT / "images"
FAMILY_FILE = IMAGES_DIR / "family.toml"

OPEN_REGISTRY = "127.0.0.1:5000"
AUTH_REGISTRY = "127.0.0.1:5001"
TOKEN_SERVER_LISTEN = "127.0.0.1:5002"
TOKEN_SERVER_URL = f"http://{TOKEN_SERVER_LISTEN}"
TOKEN_REALM = f"{TOKEN_SERVER_URL}/token"
TOKEN_SERVICE = "rocmenv-test-registry"
TOKEN_ISSUER = "rocmenv-test-token-server"
TEST_USERNAME = "ci-bot"
TEST_PASSWORD = "rocmenv-test-password-1"

SGL_DEV_REPO = "rocm/sgl-dev"
PUBLIC_REPO = "public/sgl-dev"
# What setup pushes to the auth registry (all copies of the "demo" family image).
AUTH_PRIVATE_TAGS = (
    "v0.5.8-rocm700-mi30x-20260215",
    "v0.5.8-rocm700-mi30x",
    "miles-rocm720-mi35x",
)
AUTH_PUBLIC_TAGS = ("v0.5.8-rocm700-mi30x-20260215",)

DEFAULT_STATE_DIR = Path("/var/lib/rocmenv-testenv")
DOCKER_SOCKET = "/var/run/docker.sock"

MT_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MT_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MT_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MT_OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
INDEX_TYPES = frozenset({MT_DOCKER_LIST, MT_OCI_INDEX})
MANIFEST_ACCEPT = ", ".join((MT_OCI_INDEX, MT_DOCKER_LIST, MT_OCI_MANIFEST, MT_DOCKER_MANIFEST))

Layout = Literal["old", "new"]


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where setup keeps registry storage, keys, logs and pid files."""
    env = os.environ if env is None else env
    return Path(env.get("ROCMENV_TESTENV_STATE") or DEFAULT_STATE_DIR)


REQUIRE_VAR = "ROCMENV_REQUIRE_ENGINE"
_REQUIRE_TRUE = frozenset({"1", "true", "yes"})
_REQUIRE_FALSE = frozenset({"", "0", "false", "no"})

# Every kind of environment a test may need and the host may lack. Each has a probe in
# ``ENVIRONMENT_PROBES`` (``None`` = present, else why not) used by the ``requires`` marker.
EnvironmentKind = Literal[
    "engine",
    "registry",
    "auth-registry",
    "git",
    "system-python",
    "debian-sitecustomize",
    "slurm",
    "proxy",
    "podman",
    "tool",
]
ENVIRONMENT_KINDS: tuple[EnvironmentKind, ...] = typing.get_args(EnvironmentKind)
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's: has the Debian sitecustomize to chain-load


class RequireFlagError(ValueError):
    """``ROCMENV_REQUIRE_ENGINE`` holds a value that is neither yes nor no."""


def require_engine(env: Mapping[str, str] | None = None) -> bool:
    """Whether a missing environment must FAIL tests (``ROCMENV_REQUIRE_ENGINE``).

    ``1``/``true``/``yes`` (any case): fail. Unset, empty, ``0``/``false``/``no``: may skip.
    Anything else raises :class:`RequireFlagError` (a typo must not silently allow skips).
    """
    env = os.environ if env is None else env
    raw = env.get(REQUIRE_VAR, "")
    value = raw.strip().lower()
    if value in _REQUIRE_TRUE:
        return True
    if value in _REQUIRE_FALSE:
        return False
    raise RequireFlagError(
        f"{REQUIRE_VAR}={raw!r} is not a yes/no value: use 1/true/yes (skips fail) or "
        "0/false/no or unset (skips allowed)"
    )


def missing_environment(reason: str, *, kind: EnvironmentKind = "engine") -> typing.NoReturn:
    """In a test: skip, or fail when ``ROCMENV_REQUIRE_ENGINE`` is set. Never returns.

    The one exit for every environment-dependent test (engine, registry, git, system Python,
    Debian sitecustomize, Slurm, proxies, podman, external tools): no test calls
    ``pytest.skip`` for a missing environment itself.
    """
    import pytest

    if kind not in ENVIRONMENT_KINDS:
        raise ValueError(f"unknown environment kind {kind!r} (known: {ENVIRONMENT_KINDS})")
    if require_engine():
        pytest.fail(
            f"{REQUIRE_VAR} is set but {reason} [{kind}].\n"
            "Run scripts/setup.sh (as root) to install and start what the tests need.",
            pytrace=False,
        )
    pytest.skip(f"{reason} [{kind}] (run scripts/setup.sh; {REQUIRE_VAR}=1 makes this a failure)")


def _tool_problem(name: str, kind_text: str) -> str | None:
    return None if shutil.which(name) else f"{kind_text} ({name}) is not on PATH"


def _system_python_problem() -> str | None:
    if not Path(SYSTEM_PYTHON).exists():
        return f"the system Python {SYSTEM_PYTHON} is missing (apt-get install python3)"
    return None


def debian_sitecustomize_path() -> Path | None:
    """The Debian ``sitecustomize.py`` of the system Python, if it has one."""
    if _system_python_problem():
        return None
    import subprocess

    done = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    path = Path(f"/usr/lib/python{done.stdout.strip()}/sitecustomize.py")
    return path if path.is_file() else None


def _debian_sitecustomize_problem() -> str | None:
    problem = _system_python_problem()
    if problem:
        return problem
    path = debian_sitecustomize_path()
    if path is None or "apport_python_hook" not in path.read_text(encoding="utf-8"):
        return f"{SYSTEM_PYTHON} has no Debian sitecustomize calling apport_python_hook"
    return None


def _registry_problem() -> str | None:
    status = registry_status(OPEN_REGISTRY)
    if status == 200:
        return None
    got = "no answer" if status is None else f"HTTP {status}"
    return f"the open test registry http://{OPEN_REGISTRY}/v2/ is not serving ({got})"


ENVIRONMENT_PROBES: dict[EnvironmentKind, typing.Callable[[], str | None]] = {
    "engine": lambda: engine_ping(),
    "registry": _registry_problem,
    "auth-registry": lambda: AuthRegistry().problem(),
    "git": lambda: _tool_problem("git", "git"),
    "system-python": _system_python_problem,
    "debian-sitecustomize": _debian_sitecustomize_problem,
    "slurm": lambda: slurm_problem(),
    "proxy": lambda: None,  # the fault proxy is in-process (tests/support/faultproxy.py)
    "podman": lambda: _tool_problem("podman", "podman"),
    "tool": lambda: None,  # external tools: call need_tool(name)
}


def environment_problem_of(kind: EnvironmentKind) -> str | None:
    """Why the environment ``kind`` is missing here, or ``None`` when it is present."""
    return ENVIRONMENT_PROBES[kind]()


def need(kind: EnvironmentKind) -> None:
    """In a test: return when ``kind`` is present, else :func:`missing_environment`."""
    problem = environment_problem_of(kind)
    if problem:
        missing_environment(problem, kind=kind)


def need_tool(name: str, *, hint: str = "") -> str:
    """In a test: the path of the program ``name`` on ``PATH``, else missing_environment."""
    path = shutil.which(name)
    if path is None:
        missing_environment(f"{name} is not on PATH{f' ({hint})' if hint else ''}", kind="tool")
    return path


# --------------------------------------------------------------------------- the family


@dataclass(frozen=True, kw_only=True)
class Base:
    key: str  # "py311"
    suite: str  # "bookworm"
    python: str  # "3.11"
    image: str  # "rocmenv-test/base:py311" (local engine; also pushed to the open registry)

    @property
    def site_packages(self) -> str:
        return f"/usr/local/lib/python{self.python}/dist-packages"


@dataclass(frozen=True, kw_only=True)
class GpuFamily:
    key: str  # "mi30x"
    gfx: str
    product: str
    device_id: str
    power_cap: str


@dataclass(frozen=True, kw_only=True)
class FamilyImage:
    """One image of ``images/family.toml`` and what it claims to contain."""

    name: str
    registry: str
    repository: str
    tag: str
    also_tags: tuple[str, ...]
    base: Base
    purpose: str
    rocm_version: str
    rocm_build: str
    gpu: GpuFamily
    aiter_dist: str
    aiter_version: str
    layout: Layout
    sglang_version: str | None
    torch_version: str
    extra_dists: Mapping[str, str]
    env: Mapping[str, str]
    files: Mapping[str, str]

    @property
    def ref(self) -> str:
        """Full reference of the main tag: ``127.0.0.1:5000/rocm/sgl-dev:v0.5.8-…``."""
        return f"{self.registry}/{self.repository}:{self.tag}"

    @property
    def refs(self) -> tuple[str, ...]:
        return tuple(f"{self.registry}/{self.repository}:{t}" for t in (self.tag, *self.also_tags))

    @property
    def tags(self) -> tuple[str, ...]:
        return (self.tag, *self.also_tags)

    @property
    def image(self) -> str:
        """Reference without the registry host (``rocm/sgl-dev:tag``)."""
        return f"{self.repository}:{self.tag}"

    @property
    def python(self) -> str:
        return self.base.python

    @property
    def gpu_family(self) -> str:
        return self.gpu.key

    @property
    def gfx_target(self) -> str:
        return self.gpu.gfx

    @property
    def has_shuffle_scale(self) -> bool:
        """Whether ``aiter.ops.shuffle.shuffle_scale`` exists in the image."""
        return self.layout == "new"

    @property
    def shim_expected(self) -> bool:
        """Whether the aiter ``shuffle_scale`` shim should apply (the function is missing)."""
        return not self.has_shuffle_scale

    @property
    def site_packages(self) -> str:
        return self.base.site_packages

    @property
    def distributions(self) -> dict[str, str]:
        """Every stand-in distribution in the image: name → version."""
        dists = {"torch": self.torch_version, self.aiter_dist: self.aiter_version}
        if self.sglang_version:
            dists["sglang"] = self.sglang_version
        dists.update(self.extra_dists)
        return dists


@dataclass(frozen=True, kw_only=True)
class Family:
    registry: str
    bases: Mapping[str, Base]
    gpu_families: Mapping[str, GpuFamily]
    images: tuple[FamilyImage, ...]
    source: Path = FAMILY_FILE

    def __iter__(self) -> Iterator[FamilyImage]:
        return iter(self.images)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, name: str) -> FamilyImage:
        for image in self.images:
            if image.name == name:
                return image
        raise KeyError(f"no image named {name!r} in {self.source} (have: {', '.join(self.names)})")

    @property
    def names(self) -> list[str]:
        return [i.name for i in self.images]

    def by_ref(self, ref: str) -> FamilyImage:
        for image in self.images:
            if ref in image.refs or ref in (f"{image.repository}:{t}" for t in image.tags):
                return image
        raise KeyError(ref)

    def select(self, **fields: object) -> list[FamilyImage]:
        """Images whose attributes equal the values: ``select(layout="old", python="3.9")``."""
        return [i for i in self.images if all(getattr(i, k) == v for k, v in fields.items())]


class FamilyFileError(ValueError):
    pass


def _req(table: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in table:
        raise FamilyFileError(f"{where}: missing key {key!r}")
    return table[key]


_IMAGE_KEYS = frozenset(
    {
        "name",
        "repository",
        "tag",
        "also_tags",
        "base",
        "purpose",
        "rocm",
        "rocm_build",
        "gpu_family",
        "aiter",
        "sglang",
        "torch",
        "extra_dists",
        "env",
        "files",
    }
)


def load_family(path: Path | str | None = None) -> Family:
    """Parse ``images/family.toml`` strictly (unknown keys are errors)."""
    source = Path(path) if path is not None else FAMILY_FILE
    data = tomllib.loads(source.read_text(encoding="utf-8"))
    if data.get("schema") != 1:
        raise FamilyFileError(f"{source}: unsupported schema {data.get('schema')!r} (expected 1)")
    registry = str(_req(data, "registry", str(source)))
    bases = {
        key: Base(key=key, suite=b["suite"], python=b["python"], image=b["image"])
        for key, b in _req(data, "bases", str(source)).items()
    }
    gpus = {
        key: GpuFamily(
            key=key,
            gfx=g["gfx"],
            product=g["product"],
            device_id=g["device_id"],
            power_cap=g["power_cap"],
        )
        for key, g in _req(data, "gpu_families", str(source)).items()
    }
    images: list[FamilyImage] = []
    seen: set[str] = set()
    for n, raw in enumerate(_req(data, "image", str(source))):
        where = f"{source}: image #{n + 1} ({raw.get('name', '?')})"
        unknown = set(raw) - _IMAGE_KEYS
        if unknown:
            raise FamilyFileError(f"{where}: unknown keys {sorted(unknown)}")
        aiter = _req(raw, "aiter", where)
        layout = aiter["layout"]
        if layout not in ("old", "new"):
            raise FamilyFileError(f"{where}: aiter.layout must be 'old' or 'new', not {layout!r}")
        base_key = _req(raw, "base", where)
        gpu_key = _req(raw, "gpu_family", where)
        if base_key not in bases or gpu_key not in gpus:
            raise FamilyFileError(f"{where}: unknown base {base_key!r} or gpu_family {gpu_key!r}")
        image = FamilyImage(
            name=_req(raw, "name", where),
            registry=registry,
            repository=_req(raw, "repository", where),
            tag=_req(raw, "tag", where),
            also_tags=tuple(raw.get("also_tags", ())),
            base=bases[base_key],
            purpose=_req(raw, "purpose", where),
            rocm_version=_req(raw, "rocm", where),
            rocm_build=_req(raw, "rocm_build", where),
            gpu=gpus[gpu_key],
            aiter_dist=aiter["dist"],
            aiter_version=aiter["version"],
            layout=layout,
            sglang_version=raw.get("sglang"),
            torch_version=_req(raw, "torch", where),
            extra_dists=dict(raw.get("extra_dists", {})),
            env=dict(raw.get("env", {})),
            files=dict(raw.get("files", {})),
        )
        for ref in image.refs:
            if ref in seen:
                raise FamilyFileError(f"{where}: {ref} is claimed twice")
            seen.add(ref)
        images.append(image)
    return Family(
        registry=registry, bases=bases, gpu_families=gpus, images=tuple(images), source=source
    )


# --------------------------------------------------------------------------- reachability


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def docker_socket_path(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    host = env.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        return host[len("unix://") :]
    return DOCKER_SOCKET


def engine_ping(socket_path: str | None = None, timeout: float = 3.0) -> str | None:
    """``None`` when the engine answers ``GET /_ping`` with OK, else why not."""
    path = socket_path or docker_socket_path()
    conn = _UnixHTTPConnection(path, timeout)
    try:
        conn.request("GET", "/_ping")
        resp = conn.getresponse()
        body = resp.read()
    except OSError as exc:
        return f"Docker engine socket {path} does not answer: {exc}"
    finally:
        conn.close()
    if resp.status != 200 or body.strip() != b"OK":
        return f"Docker engine at {path} answered /_ping with {resp.status} {body[:80]!r}"
    return None


def registry_status(host: str, timeout: float = 3.0) -> int | None:
    """HTTP status of ``GET http://host/v2/`` (200 open, 401 auth), ``None`` if unreachable."""
    conn = http.client.HTTPConnection(host, timeout=timeout)
    try:
        conn.request("GET", "/v2/")
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except OSError:
        return None
    finally:
        conn.close()


def environment_problem() -> str | None:
    """Why integration tests cannot run here (engine or open registry missing), or ``None``."""
    problem = engine_ping()
    if problem:
        return problem
    status = registry_status(OPEN_REGISTRY)
    if status != 200:
        got = "no answer" if status is None else f"HTTP {status}"
        return f"the open test registry http://{OPEN_REGISTRY}/v2/ is not serving ({got})"
    return None


def slurm_gpu_root(env: Mapping[str, str] | None = None) -> Path:
    """The stand-in 8-GPU host the Slurm test bed's gres.conf points at
    (``scripts/lib/slurm_setup.sh``; :func:`tests.support.fakegpu.build_fake_host` layout)."""
    return state_dir(env) / "slurm-gpus"


def slurm_problem(timeout: float = 20.0) -> str | None:
    """Why the Slurm test bed cannot run a GPU job here, or ``None``."""
    import shutil
    import subprocess

    if shutil.which("srun") is None:
        return "Slurm is not installed (no srun)"
    if not (slurm_gpu_root() / "dev" / "kfd").exists():
        return f"the Slurm stand-in GPU host {slurm_gpu_root()} does not exist"
    try:
        done = subprocess.run(
            ["srun", "--gres=gpu:mi300x:1", "--time=1", "printenv", "SLURM_STEP_GPUS"],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"srun --gres=gpu:mi300x:1 did not finish within {timeout:.0f} s"
    if done.returncode != 0 or not done.stdout.strip():
        return f"srun --gres=gpu:mi300x:1 failed: {done.stderr.strip()[-300:]}"
    return None


# --------------------------------------------------------------------------- registry client


class RegistryHTTPError(RuntimeError):
    def __init__(self, method: str, url: str, status: int, body: bytes) -> None:
        super().__init__(f"{method} {url} -> HTTP {status}: {body[:300]!r}")
        self.method = method
        self.url = url
        self.status = status
        self.body = body


@dataclass(frozen=True, kw_only=True)
class Manifest:
    body: bytes
    media_type: str
    digest: str

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


@dataclass(kw_only=True)
class RegistryClient:
    """A small keep-alive client for one registry on loopback (plain HTTP).

    Handles the bearer-token challenge (anonymous, or Basic credentials at the realm) and
    caches tokens per scope. Counts requests in :attr:`requests` (round trips, tokens too).
    """

    host: str
    username: str | None = None
    password: str | None = None
    timeout: float = 30.0
    requests: int = 0
    _conn: http.client.HTTPConnection | None = field(default=None, repr=False)
    _tokens: dict[str, str] = field(default_factory=dict, repr=False)
    _last_token: str | None = field(default=None, repr=False)

    # -- plumbing

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _raw(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes | None
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, timeout=self.timeout)
            try:
                self.requests += 1
                self._conn.request(method, path, body=body, headers=dict(headers))
                resp = self._conn.getresponse()
                data = resp.read()
                if resp.getheader("Connection", "").lower() == "close":
                    self.close()
                return resp.status, resp.headers, data
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _token(self, challenge: str) -> str:
        params = dict(_CHALLENGE_PARAM.findall(challenge))
        realm = params.get("realm")
        if not realm:
            raise RuntimeError(f"{self.host}: bearer challenge without realm: {challenge!r}")
        scope = params.get("scope", "")
        key = f"{params.get('service', '')}|{scope}"
        if key in self._tokens:
            return self._tokens[key]
        query = [("service", params.get("service", ""))]
        query += [("scope", s) for s in scope.split(" ") if s]
        url = urllib.parse.urlsplit(realm)
        headers = {}
        if self.username is not None:
            cred = f"{self.username}:{self.password or ''}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(cred).decode("ascii")
        conn = http.client.HTTPConnection(url.netloc, timeout=self.timeout)
        try:
            self.requests += 1
            conn.request("GET", f"{url.path}?{urllib.parse.urlencode(query)}", headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        if resp.status != 200:
            raise RegistryHTTPError("GET", realm, resp.status, data)
        doc = json.loads(data)
        token = str(doc.get("token") or doc.get("access_token"))
        self._tokens[key] = token
        return token

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        ok: Sequence[int] = (200,),
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        hdrs = dict(headers or {})
        if self._last_token:
            hdrs.setdefault("Authorization", f"Bearer {self._last_token}")
        status, resp_headers, data = self._raw(method, path, hdrs, body)
        if status == 401:
            challenge = resp_headers.get("WWW-Authenticate", "")
            if challenge.lower().startswith("bearer"):
                self._last_token = self._token(challenge)
                hdrs["Authorization"] = f"Bearer {self._last_token}"
                status, resp_headers, data = self._raw(method, path, hdrs, body)
        if status not in ok:
            raise RegistryHTTPError(method, f"http://{self.host}{path}", status, data)
        return status, resp_headers, data

    # -- API

    def list_tags(self, repo: str, page_size: int | None = None) -> list[str]:
        tags: list[str] = []
        path: str | None = f"/v2/{repo}/tags/list" + (f"?n={page_size}" if page_size else "")
        while path:
            status, headers, data = self.request("GET", path, ok=(200, 404))
            if status == 404:
                return []
            tags.extend(json.loads(data).get("tags") or [])
            link = headers.get("Link")
            match = re.match(r"<([^>]+)>", link or "")
            path = match.group(1) if match else None
        return tags

    def get_manifest(self, repo: str, reference: str) -> Manifest:
        _, headers, data = self.request(
            "GET", f"/v2/{repo}/manifests/{reference}", headers={"Accept": MANIFEST_ACCEPT}
        )
        digest = sha256_digest(data)
        claimed = headers.get("Docker-Content-Digest")
        if claimed and claimed != digest:
            raise RuntimeError(f"{repo}:{reference}: registry says {claimed}, bytes hash {digest}")
        media_type = headers.get("Content-Type", "").split(";")[0].strip()
        return Manifest(
            body=data, media_type=media_type or json.loads(data)["mediaType"], digest=digest
        )

    def head_manifest(self, repo: str, reference: str) -> str | None:
        status, headers, _ = self.request(
            "HEAD",
            f"/v2/{repo}/manifests/{reference}",
            headers={"Accept": MANIFEST_ACCEPT},
            ok=(200, 404),
        )
        return headers.get("Docker-Content-Digest") if status == 200 else None

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        _, headers, _ = self.request(
            "PUT",
            f"/v2/{repo}/manifests/{reference}",
            headers={"Content-Type": media_type},
            body=body,
            ok=(201,),
        )
        return headers.get("Docker-Content-Digest") or sha256_digest(body)

    def delete_manifest(self, repo: str, digest: str) -> None:
        self.request("DELETE", f"/v2/{repo}/manifests/{digest}", ok=(202, 404))

    def blob_exists(self, repo: str, digest: str) -> bool:
        status, _, _ = self.request("HEAD", f"/v2/{repo}/blobs/{digest}", ok=(200, 404))
        return status == 200

    def get_blob(self, repo: str, digest: str) -> bytes:
        status, headers, data = self.request("GET", f"/v2/{repo}/blobs/{digest}", ok=(200, 307))
        if status == 307:  # a redirecting storage backend (not ours, but be correct)
            raise RuntimeError(f"blob {digest} redirected to {headers.get('Location')}")
        if sha256_digest(data) != digest:
            raise RuntimeError(f"blob {digest} of {repo}: bytes do not match the digest")
        return data

    def _upload_path(self, location: str) -> str:
        parts = urllib.parse.urlsplit(location)
        return parts.path + (f"?{parts.query}" if parts.query else "")

    def upload_blob(self, repo: str, data: bytes, digest: str | None = None) -> str:
        digest = digest or sha256_digest(data)
        if self.blob_exists(repo, digest):
            return digest
        _, headers, _ = self.request("POST", f"/v2/{repo}/blobs/uploads/", ok=(202,))
        path = self._upload_path(headers["Location"])
        sep = "&" if "?" in path else "?"
        self.request(
            "PUT",
            f"{path}{sep}digest={urllib.parse.quote(digest)}",
            headers={"Content-Type": "application/octet-stream"},
            body=data,
            ok=(201,),
        )
        return digest

    def mount_blob(self, repo: str, digest: str, from_repo: str) -> bool:
        """Cross-repository mount; ``False`` when the registry opened an upload instead."""
        query = urllib.parse.urlencode({"mount": digest, "from": from_repo})
        status, headers, _ = self.request(
            "POST", f"/v2/{repo}/blobs/uploads/?{query}", ok=(201, 202)
        )
        if status == 202:  # cancel the upload session it opened
            path = self._upload_path(headers["Location"])
            self.request("DELETE", path, ok=(204, 404))
        return status == 201


def _descriptors(manifest: Manifest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(blobs, child manifests) a manifest refers to."""
    doc = manifest.json()
    if manifest.is_index:
        return [], list(doc.get("manifests", []))
    blobs = [doc["config"], *doc.get("layers", [])]
    return [b for b in blobs if not b.get("urls")], []


def copy_image(
    src: RegistryClient,
    src_repo: str,
    src_reference: str,
    dst: RegistryClient,
    dst_repo: str,
    dst_tag: str,
) -> str:
    """Copy a tag (image or index, recursively) between repositories/registries; → digest."""
    same_registry = src.host == dst.host

    def copy(reference: str, tag: str | None) -> str:
        manifest = src.get_manifest(src_repo, reference)
        blobs, children = _descriptors(manifest)
        for child in children:
            copy(child["digest"], None)
        for blob in blobs:
            digest = blob["digest"]
            if dst.blob_exists(dst_repo, digest):
                continue
            if same_registry and dst.mount_blob(dst_repo, digest, src_repo):
                continue
            dst.upload_blob(dst_repo, src.get_blob(src_repo, digest), digest)
        return dst.put_manifest(
            dst_repo, tag or manifest.digest, manifest.body, manifest.media_type
        )

    return copy(src_reference, dst_tag)


def split_ref(ref: str) -> tuple[str, str, str]:
    """``host/repo:tag`` or ``host/repo@sha256:…`` → (host, repo, tag-or-digest). Loopback only."""
    host, _, rest = ref.partition("/")
    if "@" in rest:
        repo, _, reference = rest.partition("@")
    else:
        repo, _, reference = rest.rpartition(":")
    if not host or not repo or not reference:
        raise ValueError(f"not a host/repository:tag reference: {ref!r}")
    return host, repo, reference


def unique_repo(prefix: str) -> str:
    """A repository name nobody else uses: ``rocmenv-test/<prefix>-<8 hex>``."""
    clean = re.sub(r"[^a-z0-9]+", "-", prefix.lower()).strip("-") or "t"
    return f"rocmenv-test/{clean}-{secrets.token_hex(4)}"


def push_manifest_copy(
    src_ref: str,
    dst_repo: str,
    tag: str,
    *,
    registry: str | None = None,
    username: str | None = None,
    password: str | None = None,
) -> str:
    """Point ``registry/dst_repo:tag`` at the image ``src_ref`` names; returns the digest.

    Blobs are mounted when source and destination share a registry, copied otherwise.
    Re-running with another ``src_ref`` moves the tag (what "the tag moved" tests need).
    """
    src_host, src_repo, reference = split_ref(src_ref)
    dst_host = registry or src_host
    with RegistryClient(host=src_host) as src:
        if dst_host == src_host and username is None:
            return copy_image(src, src_repo, reference, src, dst_repo, tag)
        with RegistryClient(host=dst_host, username=username, password=password) as dst:
            return copy_image(src, src_repo, reference, dst, dst_repo, tag)


# --------------------------------------------------------------------------- the tag set push


def _filler_blobs() -> tuple[bytes, bytes]:
    """(config, gzip layer) of the tiny linux/amd64 image behind the stand-in tags."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        content = b"rocmenv test tag set stand-in image (no userland)\n"
        info = tarfile.TarInfo("etc/rocmenv-tagset-filler")
        info.size, info.mode, info.mtime = len(content), 0o644, 0
        tar.addfile(info, io.BytesIO(content))
    layer_tar = raw.getvalue()
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0) as fh:
        fh.write(layer_tar)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": ["/bin/false"], "Labels": {"org.rocmenv.test": "tagset-filler"}},
            "rootfs": {"type": "layers", "diff_ids": [sha256_digest(layer_tar)]},
            "history": [
                {
                    "created_by": "rocmenv tests/support/testenv.py",
                    "created": "2025-01-01T00:00:00Z",
                }
            ],
            "created": "2025-01-01T00:00:00Z",
        },
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    return config, gz.getvalue()


def _attestation_blobs() -> tuple[bytes, bytes]:
    config = b'{"architecture":"unknown","os":"unknown","rootfs":{"type":"layers","diff_ids":[]}}'
    statement = b'{"_type":"https://in-toto.io/Statement/v0.1","predicateType":"https://slsa.dev/provenance/v0.2"}'
    return config, statement


def _descriptor(media_type: str, data: bytes, **extra: Any) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": sha256_digest(data), "size": len(data), **extra}


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True, kw_only=True)
class PlannedTag:
    tag: str
    body: bytes
    media_type: str
    children: tuple[tuple[bytes, str], ...] = ()  # (body, media type) PUT by digest first

    @property
    def digest(self) -> str:
        return sha256_digest(self.body)


def plan_tagset(entries: Sequence[Any]) -> tuple[list[tuple[str, bytes]], list[PlannedTag]]:
    """Blobs to upload and one manifest (or index) per tag, all deterministic.

    ``entries`` are :class:`tests.support.tagset.ExpectedTag`: each tag gets its own manifest
    bytes (annotations name the tag and its date), so each tag has its own digest; the tags
    with ``index=True`` get an OCI index of [linux/amd64 manifest, attestation manifest].
    """
    config, layer = _filler_blobs()
    att_config, att_layer = _attestation_blobs()
    blobs = [(sha256_digest(b), b) for b in (config, layer, att_config, att_layer)]
    att_manifest = _dumps(
        {
            "schemaVersion": 2,
            "mediaType": MT_OCI_MANIFEST,
            "config": _descriptor(MT_OCI_CONFIG, att_config),
            "layers": [
                _descriptor(
                    "application/vnd.in-toto+json",
                    att_layer,
                    annotations={"in-toto.io/predicate-type": "https://slsa.dev/provenance/v0.2"},
                )
            ],
        }
    )
    planned: list[PlannedTag] = []
    for entry in entries:
        annotations = {"org.opencontainers.image.ref.name": entry.tag}
        if entry.date is not None:
            hhmm = entry.time or "0300"
            annotations["org.opencontainers.image.created"] = (
                f"{entry.date.isoformat()}T{hhmm[:2]}:{hhmm[2:]}:00Z"
            )
        if entry.sglang:
            annotations["org.opencontainers.image.version"] = entry.sglang
        manifest = _dumps(
            {
                "schemaVersion": 2,
                "mediaType": MT_OCI_MANIFEST,
                "config": _descriptor(MT_OCI_CONFIG, config),
                "layers": [_descriptor(MT_OCI_LAYER, layer)],
                "annotations": annotations,
            }
        )
        if not entry.index:
            planned.append(PlannedTag(tag=entry.tag, body=manifest, media_type=MT_OCI_MANIFEST))
            continue
        index = _dumps(
            {
                "schemaVersion": 2,
                "mediaType": MT_OCI_INDEX,
                "manifests": [
                    _descriptor(
                        MT_OCI_MANIFEST, manifest, platform={"architecture": "amd64", "os": "linux"}
                    ),
                    _descriptor(
                        MT_OCI_MANIFEST,
                        att_manifest,
                        platform={"architecture": "unknown", "os": "unknown"},
                        annotations={
                            "vnd.docker.reference.digest": sha256_digest(manifest),
                            "vnd.docker.reference.type": "attestation-manifest",
                        },
                    ),
                ],
                "annotations": annotations,
            }
        )
        planned.append(
            PlannedTag(
                tag=entry.tag,
                body=index,
                media_type=MT_OCI_INDEX,
                children=((manifest, MT_OCI_MANIFEST), (att_manifest, MT_OCI_MANIFEST)),
            )
        )
    return blobs, planned


@dataclass(frozen=True, kw_only=True)
class TagsetPushReport:
    wanted: int
    already: int
    pushed: int
    skipped: int
    requests: int
    seconds: float


def push_tagset(
    client: RegistryClient,
    repo: str,
    entries: Sequence[Any],
    *,
    skip: frozenset[str] = frozenset(),
    force: bool = False,
    workers: int = 8,
) -> TagsetPushReport:
    """Make every tag of ``entries`` (minus ``skip``) exist in ``repo``; PUT only what's missing.

    ``force`` re-PUTs every tag (after the plan changed). The PUTs go over ``workers``
    keep-alive connections (the registry, not the network, is the bottleneck on loopback:
    ~7 ms per PUT on one connection, ~3 ms with 8).
    """
    from concurrent.futures import ThreadPoolExecutor

    start = time.monotonic()
    before = client.requests
    blobs, planned = plan_tagset(entries)
    existing = set(client.list_tags(repo))
    todo = [p for p in planned if p.tag not in skip and (force or p.tag not in existing)]
    if todo:
        for digest, data in blobs:
            client.upload_blob(repo, data, digest)
    children: dict[str, tuple[bytes, str]] = {}
    for p in todo:
        for body, media_type in p.children:
            children.setdefault(sha256_digest(body), (body, media_type))
    jobs_by_phase: list[list[tuple[str, bytes, str]]] = [
        [(digest, body, mt) for digest, (body, mt) in children.items()],
        [(p.tag, p.body, p.media_type) for p in todo],
    ]
    extra_requests = 0
    for jobs in jobs_by_phase:
        if not jobs:
            continue
        n = max(1, min(workers, len(jobs)))
        clients = [
            RegistryClient(host=client.host, username=client.username, password=client.password)
            for _ in range(n)
        ]

        def run(
            k: int,
            jobs: list[tuple[str, bytes, str]] = jobs,
            n: int = n,
            clients: list[RegistryClient] = clients,
        ) -> None:
            for reference, body, media_type in jobs[k::n]:
                clients[k].put_manifest(repo, reference, body, media_type)

        try:
            with ThreadPoolExecutor(max_workers=n) as pool:
                for future in [pool.submit(run, k) for k in range(n)]:
                    future.result()
        finally:
            for c in clients:
                extra_requests += c.requests
                c.close()
    wanted = [p for p in planned if p.tag not in skip]
    return TagsetPushReport(
        wanted=len(wanted),
        already=len(wanted) - len(todo),
        pushed=len(todo),
        skipped=len(planned) - len(wanted),
        requests=client.requests - before + extra_requests,
        seconds=time.monotonic() - start,
    )


def tagset_plan_hash(entries: Sequence[Any]) -> str:
    _, planned = plan_tagset(entries)
    h = hashlib.sha256()
    for p in planned:
        h.update(f"{p.tag} {p.digest}\n".encode())
    return h.hexdigest()


# --------------------------------------------------------------------------- docker config


def docker_config_json(auths: Mapping[str, tuple[str, str]]) -> str:
    """A ``config.json`` with ``auths`` entries (base64 ``user:password``) for the hosts."""
    doc = {
        "auths": {
            host: {"auth": base64.b64encode(f"{user}:{pw}".encode()).decode("ascii")}
            for host, (user, pw) in auths.items()
        }
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


@contextlib.contextmanager
def registry_client(
    host: str = OPEN_REGISTRY, *, username: str | None = None, password: str | None = None
) -> Iterator[RegistryClient]:
    client = RegistryClient(host=host, username=username, password=password)
    try:
        yield client
    finally:
        client.close()


# --------------------------------------------------------------------------- fixture handles


@dataclass(frozen=True, kw_only=True)
class OpenRegistry:
    """The open registry (``registry`` fixture): no auth, holds the family and the tag set."""

    host: str = OPEN_REGISTRY

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def ref(self, repo: str, tag: str) -> str:
        return f"{self.host}/{repo}:{tag}"

    def client(self) -> RegistryClient:
        return RegistryClient(host=self.host)

    def unique_repo(self, prefix: str) -> str:
        return unique_repo(prefix)

    def push_manifest_copy(self, src_ref: str, dst_repo: str, tag: str) -> str:
        """Point ``host/dst_repo:tag`` at the image of ``src_ref``; returns the digest."""
        return push_manifest_copy(src_ref, dst_repo, tag, registry=self.host)

    def tags(self, repo: str) -> list[str]:
        with self.client() as c:
            return c.list_tags(repo)

    def digest(self, repo: str, tag: str) -> str | None:
        with self.client() as c:
            return c.head_manifest(repo, tag)


@dataclass(frozen=True, kw_only=True)
class AuthRegistry:
    """The token-auth registry (``auth_registry`` fixture) and its token server."""

    host: str = AUTH_REGISTRY
    username: str = TEST_USERNAME
    password: str = TEST_PASSWORD
    token_server_url: str = TOKEN_SERVER_URL
    realm: str = TOKEN_REALM
    service: str = TOKEN_SERVICE
    issuer: str = TOKEN_ISSUER
    private_repo: str = SGL_DEV_REPO
    public_repo: str = PUBLIC_REPO
    private_tags: tuple[str, ...] = AUTH_PRIVATE_TAGS
    public_tags: tuple[str, ...] = AUTH_PUBLIC_TAGS
    cert_path: Path = field(default_factory=lambda: state_dir() / "token" / "cert.pem")

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def ref(self, repo: str, tag: str) -> str:
        return f"{self.host}/{repo}:{tag}"

    def client(self, *, anonymous: bool = False) -> RegistryClient:
        if anonymous:
            return RegistryClient(host=self.host)
        return RegistryClient(host=self.host, username=self.username, password=self.password)

    def unique_repo(self, prefix: str) -> str:
        return unique_repo(prefix)

    def push_manifest_copy(self, src_ref: str, dst_repo: str, tag: str) -> str:
        """Copy ``src_ref`` (any registry here) to ``host/dst_repo:tag`` with the credentials."""
        return push_manifest_copy(
            src_ref,
            dst_repo,
            tag,
            registry=self.host,
            username=self.username,
            password=self.password,
        )

    def problem(self) -> str | None:
        status = registry_status(self.host)
        if status != 401:
            got = "no answer" if status is None else f"HTTP {status}"
            return f"the auth test registry {self.url}/v2/ should answer 401, got {got}"
        url = urllib.parse.urlsplit(self.realm)
        conn = http.client.HTTPConnection(url.netloc, timeout=3)
        try:
            conn.request("GET", f"{url.path}?service={self.service}")
            resp = conn.getresponse()
            resp.read()
        except OSError as exc:
            return f"the test token server {self.realm} does not answer: {exc}"
        finally:
            conn.close()
        if resp.status != 200:
            return f"the test token server {self.realm} answered HTTP {resp.status}"
        return None


# --------------------------------------------------------------------------- TLS hub + proxy

HUB_LISTEN = "127.0.0.1:5443"
HUB_REGISTRY = "registry.rocmenv.test:5443"  # CA trusted through /etc/docker/certs.d
HUB_REGISTRY_CAFILE = "hub.rocmenv.test:5443"  # no certs.d entry: SSL_CERT_FILE only
FORWARD_PROXY = "127.0.0.1:8888"  # tinyproxy


@dataclass(frozen=True, kw_only=True)
class HubTLS:
    """The TLS registry with Docker Hub's habits (tests/support/hub_server.py) and the forward
    proxy in front of it, both started by scripts/lib/registry_tls.sh."""

    registry: str = HUB_REGISTRY
    registry_cafile: str = HUB_REGISTRY_CAFILE
    proxy: str = FORWARD_PROXY
    ca_file: Path = field(default_factory=lambda: state_dir() / "tls" / "ca.crt")
    proxy_log: Path = field(default_factory=lambda: state_dir() / "logs" / "tinyproxy-access.log")

    def _get(self, path: str) -> tuple[int, bytes]:
        import ssl

        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        host, _, port = self.registry.rpartition(":")
        conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=5)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def problem(self) -> str | None:
        if not self.ca_file.is_file():
            return f"the test CA {self.ca_file} is missing (run scripts/setup.sh)"
        try:
            addr = socket.gethostbyname(self.registry.rsplit(":", 1)[0])
        except OSError:
            return "registry.rocmenv.test does not resolve (/etc/hosts; run scripts/setup.sh)"
        if addr != "127.0.0.1":
            return f"registry.rocmenv.test resolves to {addr}, not 127.0.0.1"
        try:
            status, _ = self._get("/v2/")
        except OSError as err:
            return f"the TLS hub registry https://{self.registry}/v2/ does not answer: {err}"
        if status != 401:
            return f"the TLS hub registry answered /v2/ with HTTP {status}, not 401"
        try:
            with socket.create_connection(tuple(self.proxy.split(":")), timeout=3):  # type: ignore[arg-type]
                pass
        except OSError as err:
            return f"the forward proxy (tinyproxy) at {self.proxy} does not answer: {err}"
        return None

    def log(self, since: int = 0) -> list[dict[str, Any]]:
        """The hub's request log after sequence number ``since``."""
        status, body = self._get(f"/_hub/log?since={since}")
        assert status == 200, status
        entries: list[dict[str, Any]] = json.loads(body)
        return entries

    def last_seq(self) -> int:
        status, body = self._get("/_hub/seq")
        assert status == 200, status
        seq: int = json.loads(body)["seq"]
        return seq
