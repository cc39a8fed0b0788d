"""The job-log reader follows the runner's parsing and its stop-commands state (the cases of
actions/runner's own ``ActionCommandL0``/``ActionCommandManagerL0`` tests, and the order of
the two pipes)."""

from __future__ import annotations

from tests.support.gha_runner import REGISTERED, Runner, parse_v1, parse_v2, read_job_log

NAMES = {n.lower() for n in REGISTERED}


def test_v2_commands_start_a_line_after_white_space_and_unescape_their_parts() -> None:
    c = parse_v2("  ::warning file=a%3Ab.py,line=3::50%25 done%0Anext", NAMES)
    assert c is not None
    assert (c.name, c.properties, c.data) == ("warning", {"file": "a:b.py", "line": "3"},
                                              "50% done\nnext")  # fmt: skip
    assert parse_v2("text ::warning::x", NAMES) is None
    assert parse_v2("::unknown-command::x", NAMES) is None
    assert parse_v2("::ERROR::case does not matter", NAMES) is not None
    assert parse_v2("\u3000::error::ideographic space is white space", NAMES) is not None


def test_v1_commands_are_found_anywhere_in_a_line() -> None:
    c = parse_v1("some text ##[set-output name=x;]value%5D", NAMES)
    assert c is not None
    assert (c.name, c.properties, c.data) == ("set-output", {"name": "x"}, "value]")
    assert parse_v1("##[nope]x", NAMES) is None


def test_while_stopped_only_the_token_resumes() -> None:
    runner = Runner()
    for line in ["::stop-commands::tok123", "::error::hidden", "::stop-commands::other",
                 "::other::", "##[error]hidden too", "::TOK123::", "::error::seen"]:  # fmt: skip
        runner.process(line)
    assert [c.data for c in runner.annotations()] == ["seen"]
    assert runner.resumed == ["tok123"]
    assert runner.stop_token is None


def test_an_invalid_stop_token_fails_the_step_and_stops_nothing() -> None:
    runner = Runner()
    for line in ["::stop-commands::error", "::stop-commands::", "::error::still read"]:
        runner.process(line)
    assert len(runner.failed) == 2
    assert [c.data for c in runner.annotations()] == ["still read"]


def test_stdout_is_read_as_if_processing_were_on() -> None:
    stderr = b"::stop-commands::abcdefgh\n"
    stdout = b"::set-output name=image::evil\r::add-mask::x\r\nplain\n"
    runner, worst = read_job_log(stdout, stderr)
    assert runner.stop_token == "abcdefgh"
    assert [c.name for c in worst] == ["set-output", "add-mask"]
