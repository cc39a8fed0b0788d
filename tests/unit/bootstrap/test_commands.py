"""What the report keeps of a command's output: the end of each stream, redacted whole."""

from __future__ import annotations

import sys

import pytest

from rocmenv.bootstrap.commands import TAIL_CHARS, CommandResult, run_command
from rocmenv.redact import masking

SECRET = "hf_QwErTyUiOpAsDfGhJkLzXcVbNm0123456789"


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_the_tail_never_starts_inside_a_secret(stream: str) -> None:
    """The cut falls 12 characters before the end of the secret: cutting before redacting
    left those 12 characters, which no longer look like the secret."""
    text = "x" * 50 + SECRET + "y" * (TAIL_CHARS - 12)
    argv = [sys.executable, "-c", f"import sys; sys.{stream}.write({text!r})"]
    with masking([SECRET]):
        result = run_command(argv, timeout=60)
        tail = result.to_json()[f"{stream}_tail"]  # type: ignore[literal-required]
    assert getattr(result, stream) == text  # the command did print the secret
    assert SECRET[-12:] not in tail
    assert tail.endswith("y" * 100) and len(tail) <= TAIL_CHARS


def test_a_bare_value_after_its_name_was_cut_off_is_still_masked() -> None:
    """``HF_TOKEN=<value>`` is a pattern; the value alone after the cut is not."""
    stdout = "HF_TOKEN=" + SECRET + "\n" + "z" * (TAIL_CHARS - len(SECRET) - 1)
    result = CommandResult(argv=("env",), cwd=None, returncode=1, stdout=stdout, stderr="",
                           duration_s=0.0)  # fmt: skip
    assert SECRET not in result.to_json()["stdout_tail"]
