"""``rocmenv init``: the project file in one step, from what the repository already has.

The profile (default name ``ci``) comes from a workflow job's ``container.options`` — every
docker flag a profile can express, as the built-in ``rocm`` profile plus what differs (the
mounts always the job's own, none for a job without them); the flags it cannot express are
listed and refused — its image from ``container.image`` when that is a literal (else
``--image``), and the job's ``env:``: literals as ``env``, ``${{ … }}`` expressions as
``pass-env`` (the printed step sets them), ``secrets.*`` as ``secret-env``; what cannot be
carried is listed. One ``[suites.NAME]`` per distinct suite of the
``register_rocm_ci``/``register_amd_ci`` calls under the project (:mod:`rocmenv.adopt.scan`),
and the client's ``[labels]`` policy when the tree has its layout. The text is loaded by
rocmenv's own loaders (the project, the profile, every suite with its discovery and the
label policy) from the temp file before it replaces anything: ``init`` never writes a file
rocmenv then refuses. An existing project file is kept unless ``force``. Whether untrusted
mode would refuse the profile is the guard's answer (:mod:`rocmenv.container.guard`), as a note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmenv.adopt.clients import DEFAULT_LABELS
from rocmenv.adopt.dockerflags import parse_options, profile_keys
from rocmenv.adopt.scan import FoundSuite, scan
from rocmenv.adopt.workflow import JobContainer, job_container
from rocmenv.adopt.write import project_text, steps_text
from rocmenv.context import Context
from rocmenv.errors import ConfigError, RocmenvError, UsageError

PROJECT_FILE = "rocmenv.toml"
_SECRET_EXPR = re.compile(r"\$\{\{[^}]*\bsecrets\.")


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
    suite: str | None = None  # the suite the printed steps run
    labels: str | None = None  # which label policy was written
    untrusted: str | None = None  # why untrusted mode would refuse the profile


@dataclass(frozen=True, kw_only=True)
class JobEnv:
    fixed: dict[str, str]
    passed: list[str]
    secret: list[str]
    step: dict[str, str]  # what the printed step sets: the expressions
    dropped: list[str]


def job_env(container: JobContainer) -> JobEnv:
    """The job's ``env:`` as profile keys: literals fixed, expressions passed from the step
    (``secrets.*``: as secrets), names no environment can carry dropped."""
    from rocmenv.settings.profiles import check_env_name

    out = JobEnv(fixed={}, passed=[], secret=[], step={}, dropped=list(container.env_dropped))
    for name, value in container.env:
        try:
            check_env_name(name, "env")
        except ConfigError:
            out.dropped.append(f"{name}: not an environment variable name")
            continue
        if "${{" not in value:
            out.fixed[name] = value
            continue
        (out.secret if _SECRET_EXPR.search(value) else out.passed).append(name)
        out.step[name] = value
    return out


def _with_env(keys: dict[str, Any], env: JobEnv, base: Any) -> None:
    fixed = {**dict(keys.get("env", dict(base.env))), **env.fixed}
    secret = list(dict.fromkeys([*keys.get("secret-env", base.secret_env), *env.secret]))
    passed = [n for n in dict.fromkeys([*keys.get("pass-env", base.pass_env), *env.passed])
              if n not in secret]  # fmt: skip
    for key, value, given in (("env", fixed, dict(base.env)),
                              ("pass-env", passed, list(base.pass_env)),
                              ("secret-env", secret, list(base.secret_env))):  # fmt: skip
        if value != given:
            keys[key] = value


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
    base = BUILTIN_PROFILES["rocm"]
    keys: dict[str, Any] = {"extends": "rocm", "image": image}
    comments: dict[str, str] = {}
    notes: list[str] = []
    step_env: dict[str, str] = {}
    if container is not None and container.options.strip():
        options = parse_options(container.options)
        if options.refused:
            raise UsageError(
                f"{container.workflow}: job {container.job!r}: container.options has flags a "
                f"profile cannot express: {'; '.join(options.refused)}",
                hint="remove them from the workflow (or run init with --image and write the "
                "profile by hand); see docs/running.md for what a profile holds",
            )
        more, notes = profile_keys(options, base)
        keys |= more
    elif container is not None:
        keys["mounts"] = []
        comments["mounts"] = "the job mounts nothing (no built-in data mounts)"
    if container is not None:
        env = job_env(container)
        _with_env(keys, env, base)
        step_env = env.step
        if env.step:
            notes.append(
                "the job's env: " + ", ".join(env.step) + " are passed from the printed step "
                "(pass-env/secret-env); literals are the profile's env"
            )
        if env.dropped:
            notes.append("not carried from the job's env: " + "; ".join(env.dropped))
    scanned = scan(request.root)
    suites = tuple(sorted(scanned.suites, key=lambda s: (s.nightly >= len(s.files), s.name)))
    notes += scanned.notes
    labels, labels_said = None, None
    if scanned.client is not None and scanned.client.labels:
        labels, labels_said = scanned.client.labels, scanned.client.labels_summary
    elif scanned.labelled:
        labels = DEFAULT_LABELS
        labels_said = "rocmenv's default policy: a PR asks for label X with run-ci-X"
    source = f"(--image {image})"
    if container is not None and request.workflow is not None:
        shown = request.workflow
        if shown.is_relative_to(request.root):
            shown = shown.relative_to(request.root)
        source = f"from {shown} (job {container.job})"
    text = project_text(source=source, profile=request.profile, profile_keys=keys,
                        suites=suites, comments=comments, labels=labels)  # fmt: skip
    from rocmenv.hostfs import write_atomic

    refused: list[str] = []
    write_atomic(
        target, text, within=ctx.checkout,
        check=lambda tmp: refused.extend(_check(ctx, tmp, request.root, suites, request.profile)),
    )  # fmt: skip
    names = [s.name for s in suites]
    ran = [n for n in (container.suites_run if container else ()) if n in names]
    if container is not None and container.suites_run and not ran:
        notes.append(f"the job runs {', '.join(container.suites_run)}, which no test registers")
    suite = ran[0] if ran else (names[0] if names else "SUITE")
    untrusted = refused[0] if refused else None
    steps = steps_text(
        job=container.job if container else None, suite=suite, suites=names,
        runs_on=container.runs_on if container else None, step_env=step_env,
        notes=[f"untrusted mode (a fork's PR) would refuse profile {request.profile!r}: "
               f"{untrusted}"] if untrusted else [],
    )  # fmt: skip
    return InitResult(
        path=target, text=text, suites=suites, container=container, notes=tuple(notes),
        steps=steps, suite=suite, labels=labels_said, untrusted=untrusted,
    )  # fmt: skip


def _check(
    ctx: Context, tmp: Path, root: Path, suites: tuple[FoundSuite, ...], profile: str
) -> list[str]:
    """Load the written file as every command would: settings, profile, label policy, each
    suite. Returns why untrusted mode would refuse the profile (the guard's words), if it
    would."""
    from dataclasses import replace

    from rocmenv.settings.resolve import settings_for
    from rocmenv.suite.labels import parse_label_policy
    from rocmenv.suite.model import load_suite

    check_ctx = replace(ctx, cwd=root, config_path=tmp, env={})
    try:
        settings = settings_for(check_ctx)
        policy = parse_label_policy(settings.project.labels, PROJECT_FILE)
        for suite in suites:
            load_suite(settings.project.suites, suite.name, root=root, where=PROJECT_FILE,
                       slurm=settings.slurm_for(suite.name), labels=policy)  # fmt: skip
    except ConfigError as err:
        raise ConfigError(
            f"the project file init made is refused by rocmenv: {err.what}",
            hint="this is a bug in rocmenv init; please report it with the workflow",
        ) from err
    return [why] if (why := _untrusted_refusal(check_ctx, profile)) else []


def _untrusted_refusal(ctx: Context, profile: str) -> str | None:
    """What the guard says of the profile in untrusted mode, rendered for a CI runner (as
    ``options --format gha --untrusted``), if it refuses it."""
    from rocmenv.container.plan import PlanRequest, plan
    from rocmenv.errors import PolicyViolation
    from rocmenv.settings.resolve import Flags, settings_for

    request = PlanRequest(for_this_host=False, group_names=True, needs_image=False,
                          resolve_constraints=False)  # fmt: skip
    try:
        plan(ctx, settings_for(ctx, Flags(profile=profile, untrusted=True)), request)
    except (PolicyViolation, UsageError) as err:
        return err.what
    except RocmenvError:
        return None  # not a refusal of the policy (e.g. the host): nothing to say
    return None
