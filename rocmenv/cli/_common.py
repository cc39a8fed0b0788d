"""Printing helpers shared by the commands: JSON output, errors, GitHub annotations.

Every line they print passes :func:`rocmenv.escape.shown` (:func:`emit`, :func:`warn`,
:func:`report_error`): a string from outside that a command puts into one cannot end the
line, move the cursor or start a workflow command. Workflow commands go through the job
log (:mod:`rocmenv.joblog`), never straight to a stream.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from rocmenv.context import Context
from rocmenv.errors import RocmenvError

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, TextIO

    from rocmenv.registry.client import RegistryClient


def emit_json(ctx: Context, payload: Any) -> None:
    """One JSON document on one line (:func:`rocmenv.escape.json_line`: not indented, as
    ``json`` only uses its C encoder without ``indent`` — a 3000-tag listing takes 10x longer
    through the pure-Python one; pipe to ``jq``)."""
    from rocmenv.escape import json_line

    ctx.stdout.write(json_line(payload) + "\n")


def emit(ctx: Context, line: str = "") -> None:
    """A line (or lines) on stdout, shown (:func:`rocmenv.escape.shown`, newlines kept: the
    parts from outside were shown one-line already)."""
    from rocmenv.escape import shown

    ctx.stdout.write(shown(line, lines=True) + "\n")


def warn(ctx: Context, message: str) -> None:
    from rocmenv.escape import shown
    from rocmenv.redact import redact

    message = shown(redact(message), lines=True)
    if ctx.in_github_actions:
        ctx.joblog.command("warning", message, title="rocmenv")
    else:
        ctx.stderr.write(f"rocmenv: warning: {message}\n")


def notice(ctx: Context, message: str) -> None:
    """Something the user should know that is neither a warning nor an error (inside GitHub
    Actions a ``::notice::`` annotation)."""
    from rocmenv.escape import shown
    from rocmenv.redact import redact

    message = shown(redact(message), lines=True)
    if ctx.in_github_actions:
        ctx.joblog.command("notice", message, title="rocmenv")
    else:
        ctx.stderr.write(f"rocmenv: note: {message}\n")


@contextmanager
def secrets_masked(env: Mapping[str, str], stderr: TextIO, values: Sequence[str]) -> Iterator[None]:
    """Mask ``values`` (secret environment values) in every redacted message until the command
    ends. In GitHub Actions first tell the runner to hide each line of each of them in the
    log, before anything else is printed: ``::add-mask::`` on stderr (stdout may be eval'd
    or be one JSON document; the runner reads both)."""
    from rocmenv.context import in_github_actions
    from rocmenv.joblog import joblog
    from rocmenv.redact import masking, secret_lines

    with masking(values):
        if in_github_actions(env):
            log = joblog(stderr)
            for line in dict.fromkeys(line for value in values for line in secret_lines(value)):
                log.mask(line)
        yield


def gha_output(ctx: Context, values: dict[str, str]) -> None:
    """Inside GitHub Actions (``GITHUB_ACTIONS=true`` and ``$GITHUB_OUTPUT`` set), append
    ``name=value`` lines (a value with a line break in the delimiter form) to
    ``$GITHUB_OUTPUT``: the step's outputs. Elsewhere nothing."""
    import os
    import re

    target = ctx.env.get("GITHUB_OUTPUT", "")
    if not (ctx.in_github_actions and target):
        return
    lines = []
    for name, value in values.items():
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", name), name
        if "\n" in value or "\r" in value:
            delimiter = f"ghadelimiter_{os.urandom(8).hex()}"
            lines.append(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")
        else:
            lines.append(f"{name}={value}\n")
    from rocmenv.errors import UsageError
    from rocmenv.hostfs import append_text

    try:
        append_text(Path(target), "".join(lines), within=ctx.checkout)
    except OSError as err:
        raise UsageError(
            f"cannot write the step outputs to $GITHUB_OUTPUT ({target}): {err.strerror}",
            hint="GitHub Actions sets GITHUB_OUTPUT to a file the step may append to",
        ) from None


def registry_json(ctx: Context, client: RegistryClient) -> dict[str, Any]:
    """What every registry command adds to its output: warnings on stderr (a mirror that failed
    and why, a ``ratelimit-remaining`` under ``[registry] ratelimit-warning``), and for
    ``--json`` the stable ``ratelimit`` list plus the ``stats`` object (round trips by kind:
    for benchmarks and debugging, documented as unstable)."""
    failures = list(dict.fromkeys(client.mirror_failures))
    for line in failures[:5]:
        warn(ctx, line)
    if len(failures) > 5:
        warn(ctx, f"… and {len(failures) - 5} more mirror failures")
    for line in client.ratelimit_warnings():
        warn(ctx, line)
    return {
        "ratelimit": client.ratelimits(),
        "stats": {
            "round_trips": client.stats.requests,
            "by_kind": dict(sorted(client.stats.by_kind.items())),
        },
    }


def report_error(ctx: Context, err: RocmenvError, *, command: str, as_json: bool = False) -> int:
    """Print one clear paragraph (a traceback only with --debug) and return the exit code;
    under ``--json`` also ``{"error": {"code", "what", "hint"}}`` on stdout."""
    from rocmenv.escape import shown
    from rocmenv.redact import redact

    if as_json:
        hint = redact(err.hint) if err.hint else None
        emit_json(ctx, {"error": {"code": err.exit_code, "what": redact(err.what), "hint": hint}})
    if ctx.debug:
        import traceback

        ctx.stderr.write(shown(redact("".join(traceback.format_exception(err))), lines=True))
    text = _error_text(err)
    ctx.stderr.write(f"rocmenv {command}: error: {text}\n")
    if ctx.in_github_actions:
        ctx.joblog.command("error", text, title=f"rocmenv {command}")
    return err.exit_code


def _error_text(err: RocmenvError) -> str:
    """What failed and the hint, redacted and shown: each one line (a newline an outside
    string brought into the message is shown as ``\\u000a``), the hint on a line of its own."""
    from rocmenv.escape import shown
    from rocmenv.redact import redact

    what = shown(redact(err.what))
    return f"{what}\nhint: {shown(redact(err.hint))}" if err.hint else what


def report_internal_error(ctx: Context, err: BaseException, *, command: str) -> int:
    """An exception that is not a RocmenvError: a bug. One paragraph (redacted), the
    traceback (redacted) only with --debug; exit 70."""
    import traceback

    from rocmenv.errors import EXIT_INTERNAL
    from rocmenv.escape import shown
    from rocmenv.redact import redact

    if ctx.debug:
        ctx.stderr.write(shown(redact("".join(traceback.format_exception(err))), lines=True))
    frame = traceback.extract_tb(err.__traceback__)[-1:] if err.__traceback__ else []
    where = f" at {Path(frame[0].filename).name}:{frame[0].lineno}" if frame else ""
    text = shown(redact(f"{type(err).__name__}{where}: {err}"))
    ctx.stderr.write(
        f"rocmenv {command}: internal error: {text}\n"
        "hint: this is a bug in rocmenv; rerun with --debug for the traceback and report it\n"
    )
    if ctx.in_github_actions:
        ctx.joblog.command("error", f"internal error: {text}", title=f"rocmenv {command}")
    return EXIT_INTERNAL


def add_lock_arg(parser: Any) -> None:
    """``--lock FILE`` (pin, validate, drift); read back with :func:`lock_path`."""
    parser.add_argument(
        "--lock",
        type=Path,
        metavar="FILE",
        help="lockfile (default: rocmenv.lock next to the config)",
    )
