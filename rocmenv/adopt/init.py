"""``rocmenv init``: the project file in one step, from what the repository already has.

The profile (default name ``ci``) comes from a workflow job's ``container.options`` — every
docker flag a profile can express, as the built-in ``rocm`` profile plus what differs; the
flags it cannot express are listed and refused — and its image from ``container.image``
when that is a literal (else ``--image``). One ``[suites.NAME]`` per distinct suite of the
``register_rocm_ci``/``register_amd_ci`` calls under the project (:mod:`rocmenv.adopt.scan`).
The text is loaded by rocmenv's own loaders (the project, the profile, every suite with its
discovery) from the temp file before it replaces anything: ``init`` never writes a file
rocmenv then refuses. An existing project file is kept unless ``force``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rocmenv.adopt.dockerflags import parse_options, profile_keys
from rocmenv.adopt.scan import FoundSuite, scan
from rocmenv.adopt.workflow import JobContainer, job_container
from rocmenv.adopt.write import project_text, steps_text
from rocmenv.context import Context
from rocmenv.errors import ConfigError, UsageError

PROJECT_FILE = "rocmenv.toml"


@dataclass(frozen=True, kw_only=True)
class InitRequest:
    root: Path  # where rocmenv.toml goes (the checkout's top level)
    workflow: Path | None = None
    job: str | None = None
    image: str | None = None
    profile: str = "ci"
    force: bool = False


@dataclass(frozen=True, kw_only=True)
class InitResult:
    path: Path
    text: str
    suites: tuple[FoundSuite, ...]
    steps: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    container: JobContainer | None = None


def init_project(ctx: Context, request: InitRequest) -> InitResult:
    from rocmenv.settings.profile_set import PROFILE_NAME_RE
    from rocmenv.settings.profiles import BUILTIN_PROFILES

    target = request.root / PROJECT_FILE
    if not PROFILE_NAME_RE.fullmatch(request.profile):
        raise UsageError(f"--profile {request.profile!r} is not a profile name")
    if (target.exists() or target.is_symlink()) and not request.force:
        raise UsageError(
            f"{target} exists: init does not overwrite a project file",
            hint="pass --force to replace it, or edit it",
        )
    container = job_container(request.workflow, request.job) if request.workflow else None
    image = request.image or (container.image if container else None)
    if image is None:
        said = f" (the workflow says {container.image_text!r})" if container else ""
        raise UsageError(
            f"no image to write: give --image{said}",
            hint="e.g. --image rocm/sgl-dev:miles-rocm720-mi35x",
        )
    keys: dict[str, object] = {"extends": "rocm", "image": image}
    notes: list[str] = []
    if container is not None and container.options.strip():
        options = parse_options(container.options)
        if options.refused:
            raise UsageError(
                f"{container.workflow}: job {container.job!r}: container.options has flags a "
                f"profile cannot express: {'; '.join(options.refused)}",
                hint="remove them from the workflow (or run init with --image and write the "
                'profile by hand); see README "Running containers" for what a profile holds',
            )
        more, notes = profile_keys(options, BUILTIN_PROFILES["rocm"])
        keys |= more
    suites = tuple(sorted(scan(request.root), key=lambda s: (s.nightly >= len(s.files), s.name)))
    source = f"(--image {image})"
    if container is not None and request.workflow is not None:
        shown = request.workflow
        if shown.is_relative_to(request.root):
            shown = shown.relative_to(request.root)
        source = f"from {shown} (job {container.job})"
    text = project_text(source=source, profile=request.profile, profile_keys=keys, suites=suites)
    from rocmenv.hostfs import write_atomic

    write_atomic(target, text, within=ctx.checkout,
                 check=lambda tmp: _check(ctx, tmp, request.root, suites))  # fmt: skip
    return InitResult(
        path=target, text=text, suites=suites, container=container, notes=tuple(notes),
        steps=steps_text(job=container.job if container else None, suites=suites,
                         profile=request.profile),
    )  # fmt: skip


def _check(ctx: Context, tmp: Path, root: Path, suites: tuple[FoundSuite, ...]) -> None:
    """Load the written file as every command would: settings, profile, each suite."""
    from dataclasses import replace

    from rocmenv.settings.resolve import settings_for
    from rocmenv.suite.model import load_suite

    check_ctx = replace(ctx, cwd=root, config_path=tmp, env={})
    try:
        settings = settings_for(check_ctx)
        for suite in suites:
            load_suite(settings.project.suites, suite.name, root=root,
                       where=PROJECT_FILE, slurm=settings.slurm_for(suite.name))  # fmt: skip
    except ConfigError as err:
        raise ConfigError(
            f"the project file init made is refused by rocmenv: {err.what}",
            hint="this is a bug in rocmenv init; please report it with the workflow",
        ) from err
