"""One CLI grammar (issue 33): every command's help reads alike, one spelling per option (an
old spelling is refused naming the new one), choices wherever a value is one of a set,
``rocmenv`` alone and ``rocmenv help CMD``, internal commands hidden but working."""

from __future__ import annotations

import argparse
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocmenv.cli import COMMANDS, RENAMED, build_parser, main
from rocmenv.context import Context

WIDTH = 80
INTERNAL = {("suite", "slurm-exec"), ("suite", "slurm-warm")}
MARKUP = re.compile(r"``|:[a-z]+:`|\.\. [a-z]+::")  # RST literals, roles, directives


def _walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _walk(child, (*path, name))


@pytest.fixture(scope="module")
def parsers(request: pytest.FixtureRequest) -> list[tuple[tuple[str, ...], str, Any]]:
    mp = pytest.MonkeyPatch()
    mp.setenv("COLUMNS", str(WIDTH))
    try:
        parser = build_parser(None, full=True)
        out = [(path, p.format_help(), p) for path, p in _walk(parser)]
    finally:
        mp.undo()
    return out


def _options(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if a.option_strings and a.help != argparse.SUPPRESS]


def test_every_help_is_plain_text_wrapped_with_a_usage_line(parsers: list[Any]) -> None:
    assert len(parsers) > len(COMMANDS)  # the subcommands too
    for path, text, _ in parsers:
        where = " ".join(("rocmenv", *path))
        assert text.startswith(f"usage: {where}"), where
        assert not MARKUP.search(text), (where, MARKUP.findall(text))
        long = [line for line in text.splitlines() if len(line) > WIDTH]
        assert not long, (where, long)


def test_every_option_with_a_set_of_values_shows_it_in_the_help(parsers: list[Any]) -> None:
    for path, text, p in parsers:
        for action in _options(p):
            if action.choices is not None:
                shown = "{" + ",".join(map(str, action.choices)) + "}"
                assert shown in " ".join(text.split()).replace(", ", ","), (path, action.dest)


def test_one_spelling_per_option_across_commands(parsers: list[Any]) -> None:
    """An option is spelled (its short and long forms, its metavar, whether it takes a
    choice) the same in every command that has it: ``--engine`` has choices in ``doctor`` as
    in ``run``, ``--profile`` is ``--profile NAME`` everywhere."""
    forms: dict[str, set[tuple[tuple[str, ...], object]]] = {}
    for _, _, p in parsers:
        for action in _options(p):
            name = max(action.option_strings, key=len)
            kind = "choices" if action.choices is not None else action.metavar
            forms.setdefault(name, set()).add((tuple(sorted(action.option_strings)), kind))
    assert {name: f for name, f in forms.items() if len(f) > 1} == {}
    assert forms["--profile"] == {(("--profile",), "NAME")}
    old = {o for _, _, p in parsers for a in p._actions for o in a.option_strings} & set(RENAMED)
    assert old == set()


def test_internal_commands_are_hidden_from_help_but_work(parsers: list[Any]) -> None:
    texts = {path: text for path, text, _ in parsers}
    for path in INTERNAL:
        assert path[-1] not in texts[path[:-1]], path  # not listed by `rocmenv suite --help`
        assert path in texts  # its own --help still answers
    args = build_parser("suite").parse_args(["suite", "slurm-warm", "--socket-dir", "/x"])
    assert args.func.__name__ == "run_slurm_warm"
    args = build_parser("suite").parse_args(["suite", "slurm-exec", "--", "true"])
    assert args.func.__name__ == "run_slurm_exec"


def test_a_wrong_subcommand_is_not_answered_with_the_internal_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, _ = _run(["suite", "nosuch"], tmp_path)
    err = capsys.readouterr().err
    assert code == 2 and "'run'" in err and "slurm" not in err


def _run(argv: list[str], tmp_path: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    ctx = Context(env={"HOME": str(tmp_path), "COLUMNS": str(WIDTH)}, cwd=tmp_path, stdout=out,
                  stderr=err)  # fmt: skip
    try:
        code = main(argv, ctx=ctx)
    except SystemExit as exit_:  # argparse's own exits (--help, usage errors)
        code = int(exit_.code or 0)
    return code, out.getvalue(), err.getvalue()


def _with_profile(parsers: list[Any]) -> list[tuple[str, ...]]:
    return [path for path, _, p in parsers
            if any("--profile" in a.option_strings for a in p._actions)
            and path not in INTERNAL]  # fmt: skip


def test_the_old_profile_spelling_is_refused_naming_the_new_one(
    parsers: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``-p NAME`` (and ``-pNAME``) was the profile option of some commands: every command
    with ``--profile`` refuses it (exit 2) and the error names ``--profile``; nothing runs."""
    (tmp_path / ".git").mkdir()
    paths = _with_profile(parsers)
    assert {("run",), ("pin",), ("drift",), ("config", "show"), ("suite", "run")} <= set(paths)
    for path in paths:
        for old in (["-p", "cpu"], ["-pcpu"]):
            tail = ["--", "true"] if path in (("run",), ("shell",)) else []
            code, out, _ = _run([*path, *old, *tail], tmp_path)
            err = capsys.readouterr().err
            assert code == 2, (path, old, err)
            assert "'--profile'" in err and "'-p'" in err, (path, err)
            assert out == ""


def test_rocmenv_alone_prints_a_short_usage_and_exits_0(tmp_path: Path) -> None:
    code, out, err = _run([], tmp_path)
    assert code == 0 and err == ""
    assert out.startswith("usage: rocmenv ")
    assert len(out.splitlines()) <= 8  # short: not the whole --help
    assert all(name in out for name in COMMANDS)


def test_help_cmd_prints_that_commands_help(
    parsers: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    texts = {path: text for path, text, _ in parsers}
    for path in [("run",), ("suite", "run"), ("config", "schema"), ("suite", "slurm-exec"), ()]:
        code, out, err = _run(["help", *path], tmp_path)
        assert (code, err) == (0, ""), path
        assert out == texts[path], path
        code = _run([*path, "--help"], tmp_path)[0]
        assert code == 0 and capsys.readouterr().out == texts[path]  # argparse prints itself


@pytest.mark.parametrize("topic", [["nosuch"], ["suite", "nosuch"], ["run", "extra"]])
def test_help_of_an_unknown_command_is_a_usage_error(topic: list[str], tmp_path: Path) -> None:
    code, out, err = _run(["help", *topic], tmp_path)
    assert code == 2 and out == ""
    assert "rocmenv help" in err
