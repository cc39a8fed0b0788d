"""Printing helpers shared by the commands: JSON output, errors, GitHub annotations."""

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
    """One JSON document. Not indented: ``json`` only uses its C encoder without ``indent``,
    and a 3000-tag listing takes 10x longer through the pure-Python one (pipe to ``jq``)."""
    import json

    ctx.stdout.write(json.dumps(payload, sort_keys=True) + "\n")


def emit(ctx: Context, line: str = "") -> None:
    ctx.stdout.write(line + "\n")


def warn(ctx: Context, message: str) -> None:
    from rocmenv.redact import redact

    message = redact(message)
    if ctx.in_github_actions:
        ctx.stderr.write(f"::warning::{_annotation(message)}\n")
    else:
        ctx.stderr.write(f"rocmenv: warning: {message}\n")


def notice(ctx: Context, message: str) -> None:
    """Something the user should know that is neither a warning nor an error (inside GitHub
    Actions a ``::notice::`` annotation)."""
    from rocmenv.redact import redact

    message = redact(message)
    if ctx.in_github_actions:
        ctx.stderr.write(f"::notice::{_annotation(message)}\n")
    else:
        ctx.stderr.write(f"rocmenv: note: {message}\n")


@contextmanager
def secrets_masked(env: Mapping[str, str], stderr: TextIO, values: Sequence[str]) -> Iterator[None]:
    """Mask ``values`` (secret environment values) in every redacted message until the command
    ends. In GitHub Actions first tell the runner to hide each line of each of them in the
    log, before anything else is printed: ``::add-mask::`` on stderr (stdout may be eval'd
    or be one JSON document; the runner reads both)."""
    from rocmenv.context import in_github_actions
    from rocmenv.redact import masking, secret_lines

    with masking(values):
        if in_github_actions(env):
            lines = dict.fromkeys(line for value in values for line in secret_lines(value))
            stderr.write("".join(f"::add-mask::{_annotation(line)}\n" for line in lines))
            stderr.flush()
        yield


def _annotation(message: str) -> str:
    # GitHub workflow commands: %, CR and LF must be escaped in the message.
    return message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


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
    from rocmenv.redact import redact

    if as_json:
        hint = redact(err.hint) if err.hint else None
        emit_json(ctx, {"error": {"code": err.exit_code, "what": redact(err.what), "hint": hint}})
    if ctx.debug:
        import traceback

        ctx.stderr.write(redact("".join(traceback.format_exception(err))))
    text = redact(str(err))
    ctx.stderr.write(f"rocmenv {command}: error: {text}\n")
    if ctx.in_github_actions:
        ctx.stderr.write(f"::error title=rocmenv {command}::{_annotation(text)}\n")
    return err.exit_code


def report_internal_error(ctx: Context, err: BaseException, *, command: str) -> int:
    """An exception that is not a RocmenvError: a bug. One paragraph (redacted), the
    traceback (redacted) only with --debug; exit 70."""
    import traceback

    from rocmenv.errors import EXIT_INTERNAL
    from rocmenv.redact import redact

    if ctx.debug:
        ctx.stderr.write(redact("".join(traceback.format_exception(err))))
    frame = traceback.extract_tb(err.__traceback__)[-1:] if err.__traceback__ else []
    where = f" at {Path(frame[0].filename).name}:{frame[0].lineno}" if frame else ""
    text = redact(f"{type(err).__name__}{where}: {err}")
    ctx.stderr.write(
        f"rocmenv {command}: internal error: {text}\n"
        "hint: this is a bug in rocmenv; rerun with --debug for the traceback and report it\n"
    )
    if ctx.in_github_actions:
        ctx.stderr.write(
            f"::error title=rocmenv {command}::{_annotation('internal error: ' + text)}\n"
        )
    return EXIT_INTERNAL


def add_lock_arg(parser: Any) -> None:
    """``--lock FILE`` (pin, validate, drift); read back with :func:`lock_path`."""
    parser.add_argument(
        "--lock",
        type=Path,
        metavar="FILE",
        help="lockfile (default: rocmenv.lock next to the config)",
    )
