"""A hostile fork's checkout: the attacks of issue 9 in ``rocmenv.toml``, ``pyproject.toml``
and ``rocmenv.lock``, as an attacker would write them.

:data:`REFUSED` are the profile keys untrusted mode must refuse (exit 2 naming the key),
:data:`NEUTRALISED` those it must defuse while the job still runs, :data:`FILE_ATTACKS` the
attacks on the file level (lockfile outside, a profile name that injects YAML, mirrors).
:func:`write_checkout` writes a checkout carrying the chosen attacks in the chosen file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

SECRETS = {
    "GITHUB_TOKEN": "ghs_hostileTestTokenValue000000000000",
    "ACTIONS_RUNTIME_TOKEN": "runtime-token-value-1234567890",
    "WANDB_API_KEY": "wandb-key-value-0123456789abcdef",
}
DIGEST = "sha256:" + "ab" * 32

# key -> (profile table, what the refusal must name)
REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "devices": ({"devices": ["/dev/sda", "/dev/mem"]}, "/dev/sda"),
    "cap-add": ({"cap-add": ["ALL"]}, "ALL"),
    "security-opt": (
        {"security-opt": ["apparmor=unconfined", "systempaths=unconfined"]},
        "apparmor=unconfined",
    ),
    "network": ({"network": "host"}, "host"),
    "ipc-container": ({"ipc": "container:runner-job-2"}, "container:runner-job-2"),
    "group-add": ({"group-add": ["docker", "0", "disk"]}, "docker"),
    "mount-root": ({"mounts": ["/:/host"]}, "/:/host"),
    "mount-socket": (
        {"mounts": ["/var/run/docker.sock:/var/run/docker.sock"]},
        "/var/run/docker.sock",
    ),
    "mount-etc": ({"mounts": ["/etc:/x"]}, "/etc:/x"),
    "image": ({"image": "attacker/miner", "tag": "latest"}, "attacker/miner"),
}

NEUTRALISED: dict[str, dict[str, Any]] = {
    "pass-env": {"pass-env": sorted(SECRETS)},
    "secret-env": {"secret-env": ["WANDB_API_KEY"]},
    "gpu-isolation": {"gpu-isolation": "env", "gpu-env": ["NOT_HIP_VISIBLE_DEVICES"]},
    "ipc-host": {"ipc": "host"},
    "untrusted-false": {"untrusted": False},
    "keep-proxy-env": {"keep-proxy-env": True, "pass-env": ["HTTPS_PROXY"]},
}

FILE_ATTACKS: dict[str, dict[str, Any]] = {
    "lockfile-outside": {"lockfile": "../outside/rocmenv.lock"},
    "mirrors": {
        "registry": {
            "mirrors": {"docker.io": ["127.0.0.1:9"]},
            "insecure": ["evil.example:5000"],
        }
    },
    "host-roots": {"host": {"dev-root": "fakedev", "sysfs-root": "fakesys"}},
}

INJECTING_NAME = 'evil"\nprivileged: true\nx: "'


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
        )
    raise TypeError(value)


def toml_document(
    top: Mapping[str, Any], profiles: Mapping[str, Mapping[str, Any]], prefix: str = ""
) -> str:
    lines = []
    tables = {k: v for k, v in top.items() if isinstance(v, dict)}
    for key, value in top.items():
        if key not in tables:
            lines.append(f"{key} = {toml_value(value)}")
    for key, table in tables.items():
        lines.append(f"\n[{prefix}{key}]")
        lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in table.items()]
    for name, profile in profiles.items():
        lines.append(f"\n[{prefix}profiles.{json.dumps(name)}]")
        lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in profile.items()]
    return "\n".join(lines) + "\n"


def write_checkout(
    root: Path,
    profile: Mapping[str, Any],
    *,
    top: Mapping[str, Any] | None = None,
    where: Literal["rocmenv.toml", "pyproject.toml"] = "rocmenv.toml",
    name: str = "evil",
    lock_registry: str | None = None,
) -> Path:
    """A git checkout at ``root`` whose config defines profile ``name`` (extends rocm, image
    rocm/sgl-dev) with ``profile``'s keys on top, ``top`` as file-level keys, and a
    ``rocmenv.lock`` pinning it (served by ``lock_registry`` when given). Returns ``root``."""
    (root / ".git" / "hooks").mkdir(parents=True, exist_ok=True)
    table = {
        "extends": "rocm",
        "image": "rocm/sgl-dev",
        "tag": "v0.5.8-rocm700-mi30x-20260215",
        **profile,
    }
    doc_top = {"default-profile": name, **(top or {})}
    if where == "rocmenv.toml":
        (root / "rocmenv.toml").write_text(toml_document(doc_top, {name: table}))
    else:
        (root / "pyproject.toml").write_text(
            '[project]\nname = "fork"\nversion = "0"\n\n[tool.rocmenv]\n'
            + toml_document(doc_top, {name: table}, prefix="tool.rocmenv.")
        )
    image = str(table["image"])
    repository = (
        image
        if "/" in image.split(":")[0] and "." in image.split("/")[0]
        else (f"docker.io/{image}")
    )
    entry = {
        "repository": repository,
        "tag": table.get("tag"),
        "digest": DIGEST,
        "media_type": "application/vnd.oci.image.manifest.v1+json",
        "platform": "linux/amd64",
        "platform_digest": DIGEST,
        "resolved_at": "2026-12-01T00:00:00Z",
    }
    if lock_registry:
        entry["registry"] = lock_registry
    lock = {"lock_version": 1, "generator": "fork", "profiles": {name: entry}, "references": {}}
    (root / "rocmenv.lock").write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    return root
