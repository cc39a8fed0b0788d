"""A GitHub Actions workflow's job container: ``container.image`` and ``container.options``.

Read with PyYAML's safe loader (the C loader when built) — a runtime dependency of rocmenv,
imported only by ``rocmenv init`` so no other command pays for it. A workflow is a file from
a checkout: over :data:`MAX_WORKFLOW` bytes, not UTF-8, not YAML, nested too deeply or not
shaped like a workflow is a :class:`~rocmenv.errors.UsageError` naming the file, never a
traceback. (Aliases build shared objects, not copies, and only the job's container block is
looked at, so a "billion laughs" file costs nothing.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmenv.errors import UsageError

MAX_WORKFLOW = 1 << 20  # bytes: a workflow, not a data set


@dataclass(frozen=True, kw_only=True)
class JobContainer:
    workflow: str  # the file, as given
    job: str
    image: str | None  # None: an expression, or no image
    image_text: str | None  # what the workflow says (an expression included)
    options: str  # "" when the job has none
    runs_on: Any = None


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
    """The container block of ``job`` (default: the only job that has one)."""
    doc = _load(path)
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, dict) or not jobs:
        raise UsageError(f"{path} has no jobs: not a GitHub Actions workflow")
    with_container = [str(name) for name, body in jobs.items()
                      if isinstance(body, dict) and body.get("container")]  # fmt: skip
    if job is None:
        if len(with_container) != 1:
            raise UsageError(
                f"{path}: {len(with_container)} jobs have a container block"
                + (f" ({', '.join(with_container)})" if with_container else ""),
                hint="name the job with --job" if with_container else "pass --image instead",
            )
        job = with_container[0]
    body = jobs.get(job)
    if not isinstance(body, dict):
        from rocmenv.settings.keys import did_you_mean

        raise UsageError(
            f"{path} has no job {job!r}" + did_you_mean(job, [str(j) for j in jobs]),
            hint=f"jobs with a container block: {', '.join(with_container) or 'none'}",
        )
    container = body.get("container")
    if isinstance(container, str):
        container = {"image": container}
    if not isinstance(container, dict):
        raise UsageError(f"{path}: job {job!r} has no container block", hint="pass --image")
    image_text = container.get("image")
    options = container.get("options") or ""
    if not isinstance(options, str) or (image_text is not None and not isinstance(image_text, str)):
        raise UsageError(f"{path}: job {job!r}: container.image and .options must be strings")
    literal = image_text if image_text and "${{" not in image_text else None
    return JobContainer(
        workflow=str(path), job=job, image=literal, image_text=image_text,
        options=options, runs_on=body.get("runs-on"),
    )  # fmt: skip
