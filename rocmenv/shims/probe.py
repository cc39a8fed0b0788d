"""Probing images for shims: run the launcher's ``probe.py`` inside an image and read it.

``rocmenv shims check``, ``rocmenv drift --inspect`` and ``rocmenv bootstrap``'s report use
it: the probe prints the image's Python and ROCm versions, its installed distributions and,
for every shim, whether it would apply and why — without importing torch or aiter there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, TypedDict

from rocmenv.errors import EngineError

if TYPE_CHECKING:
    from rocmenv.shims.catalogue import LauncherBundle


@dataclass(frozen=True, kw_only=True)
class BindMount:
    source: str
    target: str
    read_only: bool = True


class CaptureEngine(Protocol):
    """What :func:`check_image_versions` needs from an engine adapter."""

    def run_capture(
        self,
        image: str,
        argv: Sequence[str],
        *,
        mounts: Sequence[BindMount],
        env: Mapping[str, str],
        timeout: float,
    ) -> tuple[int, str, str]: ...


class ProbeStatic(TypedDict):
    missing: bool | None
    reason: str


class ProbeShim(TypedDict):
    name: str
    target: str
    distributions: list[str]
    specifier: str
    source: str
    package: str | None
    distribution: str | None
    version: str | None
    specifier_match: bool | None
    static_probe: ProbeStatic
    would_apply: bool | None
    reason: str
    error: str | None


class ProbePython(TypedDict):
    version: str
    implementation: str
    executable: str


class ProbeRocm(TypedDict):
    version: str | None
    source: str


class ImageProbe(TypedDict):
    """What ``probe.py`` prints (``probe_version`` 1)."""

    probe_version: int
    python: ProbePython
    rocm: ProbeRocm
    distributions: dict[str, str]
    shims: list[ProbeShim]


PROBE_KEYS = ("probe_version", "python", "rocm", "distributions", "shims")


def parse_probe_output(text: str, *, where: str) -> ImageProbe:
    """Strictly read probe.py's JSON (unknown ``probe_version`` is an error)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise EngineError(
            f"the launcher probe in {where} printed something that is not JSON ({err})",
            hint="run it by hand: python3 /opt/rocmenv/launcher/probe.py",
        ) from None
    if not isinstance(data, dict) or any(k not in data for k in PROBE_KEYS):
        raise EngineError(f"the launcher probe in {where} printed an unexpected shape")
    if data["probe_version"] != 1:
        raise EngineError(
            f"the launcher probe in {where} speaks probe_version {data['probe_version']!r}; "
            "this rocmenv reads version 1",
            hint="use the same rocmenv version for the bundle and the check",
        )
    result: ImageProbe = data  # type: ignore[assignment]
    return result


@dataclass(frozen=True, kw_only=True)
class ProbeRun:
    argv: tuple[str, ...]
    mounts: tuple[BindMount, ...]
    env: Mapping[str, str] = field(default_factory=dict)


def probe_command(bundle: LauncherBundle, *, python: str = "python3") -> ProbeRun:
    """How to run the probe in a container: argv, the read-only bundle mount, environment."""
    return ProbeRun(
        argv=(python, bundle.probe_path),
        mounts=(BindMount(source=str(bundle.host_dir), target=bundle.container_dir),),
        env={"ROCMENV_SHIMS": "0", "PYTHONDONTWRITEBYTECODE": "1"},
    )


def check_image_versions(
    engine: CaptureEngine,
    image: str,
    *,
    bundle: LauncherBundle,
    python: str = "python3",
    timeout: float = 300.0,
) -> ImageProbe:
    """Run ``probe.py`` inside `image` (nothing heavy is imported there) and parse its JSON."""
    run = probe_command(bundle, python=python)
    code, out, err = engine.run_capture(
        image, run.argv, mounts=run.mounts, env=run.env, timeout=timeout
    )
    if code != 0:
        tail = "\n".join(err.strip().splitlines()[-5:])
        raise EngineError(
            f"the launcher probe failed in {image} (exit {code}): {tail or 'no output'}",
            hint=f"does the image have {python}? try --python",
        )
    return parse_probe_output(out, where=image)


ShimVerdict = Literal["would-apply", "would-not-apply", "unknown"]
ShimWhy = Literal[
    "feature-missing",
    "not-installed",
    "version-outside",
    "version-not-pep440",
    "feature-present",
    "probe-failed",
    "unknown",
]


def classify(shim: ProbeShim) -> tuple[ShimVerdict, ShimWhy]:
    """The verdict and its main reason, from one entry of probe.py's ``shims`` list."""
    if shim.get("error"):
        return "unknown", "probe-failed"
    if shim["distribution"] is None:
        return "would-not-apply", "not-installed"
    if shim["specifier_match"] is None:
        return "would-not-apply", "version-not-pep440"
    if shim["specifier_match"] is False:
        return "would-not-apply", "version-outside"
    missing = shim["static_probe"]["missing"]
    if missing is True:
        return "would-apply", "feature-missing"
    if missing is False:
        return "would-not-apply", "feature-present"
    return "unknown", "unknown"
