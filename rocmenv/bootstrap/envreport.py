"""Bootstrap step 5: the environment report (what the job container is, after bootstrap).

Facts come from the launcher's ``probe.py`` run with the container's Python
(``ROCMENV_SHIMS=0``, the job's ``PYTHONPATH``): Python version, ROCm version
(``/opt/rocm/.info/version``), installed distributions (``importlib.metadata``, nothing is
imported) and each shim's static verdict. The gfx targets come from ``rocminfo`` when it is
installed, else from the KFD topology (``/sys/class/kfd/kfd/topology/nodes/*/properties``,
``gfx_target_version``).

Output: a JSON document (:class:`BootstrapReportJSON` in :mod:`rocmenv.bootstrap`), a short
human summary, and a markdown section for ``$GITHUB_STEP_SUMMARY``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from rocmenv.bootstrap.commands import CommandResult, Runner, run_command
from rocmenv.escape import markdown_block, markdown_text

#: Package keys of the report, in order, and the distribution names that answer for each.
PACKAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("torch", ("torch",)),
    ("sglang", ("sglang",)),
    ("aiter", ("amd-aiter", "aiter")),
    ("transformer-engine", ("transformer-engine", "transformer-engine-torch")),
    ("megatron-core", ("megatron-core",)),
)


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class PackageJSON(TypedDict):
    distribution: str | None
    version: str | None


class ShimVerdictJSON(TypedDict):
    name: str
    would_apply: bool | None
    reason: str


class EnvironmentJSON(TypedDict):
    python: dict[str, str] | None
    rocm_version: str | None
    gfx_targets: list[str]
    gfx_source: str | None
    packages: dict[str, PackageJSON]
    shims: list[ShimVerdictJSON]
    probe_error: str | None


def pick_packages(distributions: Mapping[str, str]) -> dict[str, PackageJSON]:
    by_norm = {normalise(k): (k, v) for k, v in distributions.items()}
    out: dict[str, PackageJSON] = {}
    for key, names in PACKAGES:
        found: PackageJSON = {"distribution": None, "version": None}
        for name in names:
            hit = by_norm.get(normalise(name))
            if hit is not None:
                found = {"distribution": hit[0], "version": hit[1]}
                break
        out[key] = found
    return out


def kfd_gfx_targets(sysfs_root: Path) -> list[str]:
    """gfx targets of the GPU nodes of the KFD topology (CPU nodes have ``simd_count 0``)."""
    from rocmenv.container.gpu import gfx_target_name

    nodes = sysfs_root / "class" / "kfd" / "kfd" / "topology" / "nodes"
    found: set[str] = set()
    try:
        entries = sorted(nodes.iterdir())
    except OSError:
        return []
    for node in entries:
        props: dict[str, int] = {}
        try:
            text = (node / "properties").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].lstrip("-").isdigit():
                props[parts[0]] = int(parts[1])
        if props.get("simd_count", 0) > 0 and props.get("gfx_target_version", 0) > 0:
            found.add(gfx_target_name(props["gfx_target_version"]))
    return sorted(found)


@dataclass(frozen=True, kw_only=True)
class EnvironmentReport:
    data: EnvironmentJSON
    probe: CommandResult | None

    def summary(self) -> str:
        d = self.data
        if d["probe_error"]:
            return f"environment probe failed: {d['probe_error']}"
        bits = [f"ROCm {d['rocm_version'] or 'unknown'}"]
        if d["gfx_targets"]:
            bits.append(", ".join(d["gfx_targets"]))
        if d["python"]:
            bits.append(f"Python {d['python'].get('version')}")
        for key, pkg in d["packages"].items():
            if pkg["version"]:
                shown = pkg["distribution"] if key == "aiter" else key
                bits.append(f"{shown} {pkg['version']}")
        applying = [s["name"] for s in d["shims"] if s["would_apply"]]
        bits.append(f"shims applying: {', '.join(applying) if applying else 'none'}")
        return "; ".join(bits)


def collect(
    *,
    python: str,
    probe_path: Path,
    env: Mapping[str, str],
    sysfs_root: Path,
    gfx_from_wait: Sequence[str] = (),
    rocminfo: str | None = None,
    run: Runner = run_command,
    timeout: float = 120.0,
) -> EnvironmentReport:
    """Run the probe with the container's Python and assemble the report (never raises for
    a failing probe: the error is part of the report)."""
    from rocmenv.shims.probe import parse_probe_output

    probe_env = dict(env)
    probe_env.update(ROCMENV_SHIMS="0", PYTHONDONTWRITEBYTECODE="1")
    result = run([python, str(probe_path)], timeout=timeout, env=probe_env)
    data: EnvironmentJSON = {
        "python": None,
        "rocm_version": None,
        "gfx_targets": [],
        "gfx_source": None,
        "packages": pick_packages({}),
        "shims": [],
        "probe_error": None,
    }
    if not result.ok:
        data["probe_error"] = f"{result.describe()}: {result.output_tail(5)}"
    else:
        from rocmenv.errors import RocmenvError

        try:
            probe = parse_probe_output(result.stdout, where="this container")
        except RocmenvError as err:
            data["probe_error"] = err.what
        else:
            data["python"] = {k: str(v) for k, v in probe["python"].items()}
            data["rocm_version"] = probe["rocm"]["version"]
            data["packages"] = pick_packages(probe["distributions"])
            data["shims"] = [
                {"name": s["name"], "would_apply": s["would_apply"], "reason": s["reason"]}
                for s in probe["shims"]
            ]
    gfx, source = list(gfx_from_wait), "rocminfo" if gfx_from_wait else None
    if not gfx and rocminfo:
        info = run([rocminfo], timeout=60, env=env)
        if info.ok:
            from rocmenv.bootstrap.gpuwait import parse_rocminfo

            gfx, source = list(parse_rocminfo(info.stdout).gfx_targets), "rocminfo"
    if not gfx:
        gfx = kfd_gfx_targets(sysfs_root)
        source = "kfd-topology" if gfx else None
    data["gfx_targets"] = gfx
    data["gfx_source"] = source
    return EnvironmentReport(data=data, probe=result)


def markdown(report: Mapping[str, Any]) -> str:
    """A ``$GITHUB_STEP_SUMMARY`` section for a bootstrap report (JSON shape)."""
    lines = ["### rocmenv bootstrap", ""]
    lines.append("| step | status | what happened |")
    lines.append("|---|---|---|")
    for step in report.get("steps", []):
        text = markdown_text(str(step.get("summary", "")))
        lines.append(f"| {step.get('name')} | {step.get('status')} | {text} |")
    env = report.get("environment")
    if env:
        lines += ["", "| fact | value |", "|---|---|"]
        python = env.get("python") or {}
        lines.append(f"| ROCm | {markdown_text(str(env.get('rocm_version') or 'unknown'))} |")
        gfx = ", ".join(env.get("gfx_targets") or []) or "unknown"
        lines.append(f"| gfx targets | {markdown_text(gfx)} |")
        lines.append(f"| Python | {markdown_text(str(python.get('version', 'unknown')))} |")
        for key, pkg in (env.get("packages") or {}).items():
            value = f"{pkg['version']} ({pkg['distribution']})" if pkg.get("version") else "—"
            lines.append(f"| {markdown_text(str(key))} | {markdown_text(value)} |")
        for shim in env.get("shims") or []:
            verdict = {True: "applies", False: "not needed", None: "unknown"}[shim["would_apply"]]
            lines.append(f"| shim {shim['name']} | {verdict} |")
    if not report.get("ok", True) and report.get("error"):
        lines += ["", markdown_block(str(report["error"]))]
    return "\n".join(lines) + "\n"
