"""The one escaping function (issue 31): what it shows, and that no string it is given can
end a line, reach a terminal as an escape sequence, start a workflow command (read as GitHub's
runner reads lines), or become markup in GitHub's own markdown renderer (cmark-gfm)."""

from __future__ import annotations

import html
import json
import re

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmenv.escape import (
    control_char,
    json_line,
    markdown_block,
    markdown_code,
    markdown_text,
    shown,
)
from tests.support.gha_runner import Runner

#: Text built from what hurts: line ends, escapes, C1, bidi, surrogates, markup, commands.
HOSTILE = st.lists(
    st.sampled_from(
        list("\n\r\t\x00\x1b\x07\x7f\x85\x9b\u2028\u2029\u202e\u2066\ud800\ufffe\u00a0\u3000 ")
        + list(":#[]!()<>&|`*_~\\-+=.@/") + ["::", "##[", "add-mask", "www.", "http", "1."]
        + list("abcXYZ09é✅")
    ),
    max_size=30,
).map("".join)  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "one_line", "lines"),
    [
        ("plain name", "plain name", "plain name"),
        ("a\nb", "a\\u000ab", "a\nb"),
        ("a\r\nb\rc", "a\\u000d\\u000ab\\u000dc", "a\nb\nc"),
        ("\x1b[31mred\x1b[0m", "\\u001b[31mred\\u001b[0m", "red"),
        ("\x1b]0;title\x07x", "\\u001b]0;title\\u0007x", "x"),
        ("\x9b2J c1", "\\u009b2J c1", "\\u009b2J c1"),
        ("\u202eevil\u202c", "\\u202eevil\\u202c", "\\u202eevil\\u202c"),
        ("name\udcff", "name\\udcff", "name\\udcff"),
        ("::add-mask::x", "\\u003a:add-mask::x", "\\u003a:add-mask::x"),
        (" \u00a0::error::x", " \u00a0\\u003a:error::x", " \u00a0\\u003a:error::x"),
        ("t.py::test_a", "t.py::test_a", "t.py::test_a"),  # a pytest id stays as it is
        ("x ##[set-output]y", "x ##\\u005bset-output]y", "x ##\\u005bset-output]y"),
        ("ok\n::warning::x", "ok\\u000a::warning::x", "ok\n\\u003a:warning::x"),
        ("tab\there", "tab\\u0009here", "tab\there"),
    ],
)
def test_shown(raw: str, one_line: str, lines: str) -> None:
    assert shown(raw) == one_line
    assert shown(raw, lines=True) == lines


def runner_commands(line: str) -> list[object]:
    runner = Runner()
    runner.process(line)
    return list(runner.commands)


@settings(max_examples=300, deadline=None)
@given(HOSTILE, st.sampled_from(["", "  ", "rocmenv: ", "\t"]))
def test_a_shown_string_is_one_inert_line_wherever_it_stands(text: str, prefix: str) -> None:
    out = shown(text)
    assert shown(out) == out  # idempotent: a sink may show a line made of shown parts
    assert out.isprintable() or not control_char(out)
    assert re.split(r"\r\n|\r|\n", prefix + out) == [prefix + out]  # the runner's ReadLine
    assert runner_commands(prefix + out) == []
    out.encode("utf-8")  # no lone surrogate left to fail a write


@settings(max_examples=200, deadline=None)
@given(HOSTILE)
def test_shown_lines_start_no_command_and_hold_only_tabs_and_newlines(text: str) -> None:
    out = shown(text, lines=True)
    assert shown(out, lines=True) == out
    for line in out.split("\n"):
        assert runner_commands(line) == []
        assert control_char(line.replace("\t", " ")) is None


def test_control_char_finds_what_shown_escapes() -> None:
    assert control_char("fine name-1.py") is None
    assert control_char("a\u00a0b") is None  # a no-break space is not a control
    for bad in ("\n", "\x1b", "\x85", "\u2028", "\u202e", "\u2066", "\ud800", "\ufffe"):
        assert control_char(f"a{bad}b") == bad


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | HOSTILE,
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(HOSTILE, inner, max_size=3), max_leaves=8))  # fmt: skip
def test_json_line_is_the_same_document_on_one_inert_line(value: object) -> None:
    line = json_line(value)
    assert json.loads(line) == value
    assert "\n" not in line and "\r" not in line and "##[" not in line
    assert runner_commands(line) == []


def render(markdown: str) -> str:
    """GitHub's renderer, raw HTML let through (GitHub then sanitizes what it allows: <img>)."""
    return str(
        cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)
    )


def cells(rendered: str) -> list[str]:
    return re.findall(r"<td>(.*?)</td>", without_mail_links(rendered), re.S)


def without_mail_links(rendered: str) -> str:
    """cmark-gfm links an e-mail address whatever escapes it holds (a ``mailto:`` link, which
    loads nothing: accepted, see rocmenv.escape)."""
    return re.sub(r'<a href="mailto:[^"]*">(.*?)</a>', r"\1", rendered)


@settings(max_examples=300, deadline=None)
@given(HOSTILE, HOSTILE)
def test_markdown_text_and_code_are_one_table_cell_each_showing_the_string(
    text: str, code: str
) -> None:
    rendered = render(f"| a | b |\n|---|---|\n| {markdown_text(text)} | {markdown_code(code)} |\n")
    assert rendered.count("<tr>") == 2, rendered  # the header and one row: no fake rows
    a, b = cells(rendered)
    for tag in ("<img", "<a ", "<h", "<em", "<strong", "<del", "<script", "<br", "<!--"):
        assert tag not in a and tag not in b.removeprefix("<code>"), rendered
    assert html.unescape(a) == shown(text).strip(" ")
    if code:
        assert b.startswith("<code>") and b.endswith("</code>")
        assert html.unescape(b[6:-7]) == shown(code)  # exactly: a code span keeps spaces


@settings(max_examples=200, deadline=None)
@given(HOSTILE)
def test_markdown_text_as_a_paragraph_is_one_paragraph_of_the_string(text: str) -> None:
    rendered = without_mail_links(render(f"note: {markdown_text(text)}\n"))
    if not shown(text).strip():
        return
    assert rendered.startswith("<p>") and rendered.count("<p>") == 1, rendered
    inner = rendered.removeprefix("<p>").removesuffix("</p>\n")
    assert "<" not in inner.replace("&lt;", ""), rendered
    assert html.unescape(inner) == ("note: " + shown(text)).rstrip(" ")


def test_markdown_block_holds_any_backticks_and_text() -> None:
    text = "a ``` b\n````\nc\n::error::x <img src=y>"
    rendered = render(f"before\n\n{markdown_block(text)}\n\nafter\n")
    assert rendered.count("<pre>") == 1 and "<img" not in rendered
    assert "<p>after</p>" in rendered
    assert "\\u003a:error::x" in html.unescape(rendered)
