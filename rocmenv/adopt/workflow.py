"""A GitHub Actions workflow's job as ``rocmenv init`` reads it: ``container.image`` and
``container.options`` (when it has a container block), the ``env:`` of the workflow and the
job (the job's wins), and the suite its steps run (``--suite NAME`` in a ``run:`` or a
``with:`` value).

Read with PyYAML's safe loader (the C loader when built) — a runtime dependency of rocmenv,
imported only by ``rocmenv init`` so no other command pays for it. A workflow is a file from
a checkout: over :data:`MAX_WORKFLOW` bytes, not UTF-8, not YAML, nested too deeply or not
shaped like a workflow is a :class:`~rocmenv.errors.UsageError` naming the file, never a
traceback. (Aliases build shared objects, not copies, and only the job's container block is
looked at, so a "billion laughs" file costs nothing.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmenv.errors import UsageError

MAX_WORKFLOW = 1 << 20  # bytes: a workflow, not a data set
_SUITE_ARG = re.compile(r"--suite(?:=|\s+)['\"]?([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass(frozen=True, kw_only=True)
class JobContainer:
    workflow: str  # the file, as given
    job: str
    image: str | None  # None: an expression, or no image
    image_text: str | None  # what the workflow says (an expression included)
    options: str  # "" when the job has none
    runs_on: Any = None
    has_container: bool = True
    env: tuple[tuple[str, str], ...] = ()  # the workflow's and the job's env:, as text
    env_dropped: tuple[str, ...] = ()  # what env: had that is not a NAME: value
    suites_run: tuple[str, ...] = ()  # --suite NAME in its steps, in order


def _load(path: Path) -> Any:
    try:
        import yaml
    except ImportError:  # a broken install: rocmenv depends on PyYAML
        raise UsageError(
            "rocmenv init --from-workflow needs PyYAML, which is not installed",
            hint="pip install pyyaml (it is one of rocmenv's dependencies: reinstall rocmenv)",
        ) from None
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_WORKFLOW + 1)
    except OSError as err:
        raise UsageError(f"cannot read the workflow {path}: {err.strerror}") from None
    if len(raw) > MAX_WORKFLOW:
        raise UsageError(f"{path} is larger than {MAX_WORKFLOW >> 20} MiB: not a workflow")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(raw.decode("utf-8"), Loader=loader)
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text: not a workflow") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise UsageError(
            f"{path}{where}: not valid YAML ({getattr(err, 'problem', None) or err})"
        ) from None
    except RecursionError:
        raise UsageError(f"{path}: nested too deeply to be a workflow") from None


def job_container(path: Path, job: str | None) -> JobContainer:
    """``job`` (default: the only job with a container block, else the only job)."""
    doc = _load(path)
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, dict) or not jobs:
        raise UsageError(f"{path} has no jobs: not a GitHub Actions workflow")
    with_container = [str(name) for name, body in jobs.items()
                      if isinstance(body, dict) and body.get("container")]  # fmt: skip
    if job is None:
        if len(with_container) == 1:
            job = with_container[0]
        elif not with_container and len(jobs) == 1:
            job = str(next(iter(jobs)))
        else:
            raise UsageError(
                f"{path}: {len(with_container)} jobs have a container block"
                + (f" ({', '.join(with_container)})" if with_container else ""),
                hint="name the job with --job",
            )
    body = jobs.get(job)
    if not isinstance(body, dict):
        from rocmenv.settings.keys import did_you_mean

        raise UsageError(
            f"{path} has no job {job!r}" + did_you_mean(job, [str(j) for j in jobs]),
            hint=f"jobs with a container block: {', '.join(with_container) or 'none'}",
        )
    container = body.get("container") or {}
    if isinstance(container, str):
        container = {"image": container}
    if not isinstance(container, dict):
        raise UsageError(f"{path}: job {job!r}: container must be a table", hint="pass --image")
    image_text = container.get("image")
    options = container.get("options") or ""
    if not isinstance(options, str) or (image_text is not None and not isinstance(image_text, str)):
        raise UsageError(f"{path}: job {job!r}: container.image and .options must be strings")
    literal = image_text if image_text and "${{" not in image_text else None
    env, dropped = _env(doc.get("env"), "env")
    job_env, job_dropped = _env(body.get("env"), f"jobs.{job}.env")
    merged = dict(env) | dict(job_env)
    return JobContainer(
        workflow=str(path), job=job, image=literal, image_text=image_text,
        options=options, runs_on=body.get("runs-on"), has_container=bool(container),
        env=tuple(merged.items()), env_dropped=(*dropped, *job_dropped),
        suites_run=tuple(dict.fromkeys(_suites_run(body))),
    )  # fmt: skip


def _env(raw: Any, where: str) -> tuple[list[tuple[str, str]], list[str]]:
    """``env:`` as (name, text) pairs (YAML true/1 as GitHub passes them: "true", "1"), and
    what cannot be carried (a whole-block expression, a value that is a list or table)."""
    if raw is None:
        return [], []
    if not isinstance(raw, dict):
        return [], [f"{where}: {str(raw)[:80]!r} (not NAME: value pairs)"]
    out: list[tuple[str, str]] = []
    dropped: list[str] = []
    for name, value in raw.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, int | float) or value is None:
            value = "" if value is None else str(value)
        if not isinstance(name, str) or not isinstance(value, str):
            dropped.append(f"{where}.{name}: not a text value")
            continue
        out.append((name, value))
    return out, dropped


def _suites_run(body: dict[str, Any]) -> list[str]:
    """Every ``--suite NAME`` in the job's ``run:`` steps and ``with:`` values."""
    texts: list[str] = []
    steps = body.get("steps")
    for step in steps if isinstance(steps, list) else []:
        if isinstance(step, dict):
            texts.append(str(step.get("run") or ""))
            texts += [str(v) for v in (step.get("with") or {}).values()] if isinstance(
                step.get("with"), dict) else []  # fmt: skip
    if isinstance(body.get("with"), dict):
        texts += [str(v) for v in body["with"].values()]
    return [m.group(1) for text in texts for m in _SUITE_ARG.finditer(text)]
