"""How a string from outside looks wherever rocmenv shows it: the one escaping function.

Test names and file names from a checkout, tags from a registry, package names from an
image, reasons from a registration, messages that quote them: every such string passes
:func:`shown` before it reaches a terminal, a log line, a workflow command, JUnit or markdown
(:func:`markdown_text`, :func:`markdown_code` and :func:`markdown_block` build on it for
markdown; :func:`json_line` is the JSON counterpart). What it does:

* **control characters become visible** ``\\uXXXX`` escapes: C0 (newline, CR, ESC — so no
  CSI/OSC sequence reaches a terminal — and the rest), DEL, C1 (also a one-byte CSI), the
  line and paragraph separators U+2028/U+2029, the bidirectional controls that reorder what
  a reader sees (U+061C, U+200E/U+200F, U+202A–U+202E, U+2066–U+2069: "Trojan Source"),
  lone surrogates (an undecodable byte of a file name) and the non-characters U+FFFE/U+FFFF.
  With ``lines=True`` (a log's text: JUnit) newlines and tabs stay, CR and CR LF become
  newlines and complete ANSI sequences (colours) are dropped; everything else is escaped.
* **no workflow command can start**: GitHub's runner takes a line as a command when it
  begins, after leading white space, with ``::`` (its ``TryParseV2``), or when ``##[`` appears
  anywhere in it (the older ``TryParse``). A ``::`` that begins the text (or one of its
  lines) is shown as ``\\u003a:``, and ``##[`` as ``##\\u005b``; a rocmenv line that starts
  with a shown string therefore cannot become a command either.

A backslash is left as it is: a name that holds the six characters ``\\u000a`` looks like an
escaped newline, which is harmless. The function is idempotent (``shown(shown(s)) ==
shown(s)``), so a sink may apply it to a whole line made of parts that were shown already.

Standard library only, no regular expression compiled before first use: ``rocmenv.context``
imports this (through :mod:`rocmenv.joblog`) on every command's start.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any

#: Shown as ``\uXXXX`` (see the module docstring): C0, then what both modes escape.
_ALSO = (
    r"\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff"
)
_ONE_LINE = rf"[\x00-\x1f{_ALSO}]"
_LINES = rf"[\x00-\x08\x0b-\x1f{_ALSO}]"  # tab and newline kept (CR is made a newline first)
_ANSI = (
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor movement
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: titles, hyperlinks
    r"|\x1b[PX^_][^\x1b]*\x1b\\"  # DCS, SOS, PM, APC strings
    r"|\x1b[@-Z\\-_]"  # two-character escapes
)
#: A ``::`` at the start of a line, after white space (.NET's ``TrimStart`` set is a subset
#: of Python's ``\s``; a newline in ``[^\S\n]`` is excluded so one line is looked at a time).
_OPENER = r"(?m)^([^\S\n]*):(?=:)"
_compiled: dict[str, re.Pattern[str]] = {}


def _re(source: str) -> re.Pattern[str]:
    pattern = _compiled.get(source)
    if pattern is None:
        pattern = _compiled[source] = re.compile(source)
    return pattern


def _visible(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def shown(text: str, *, lines: bool = False) -> str:
    """``text`` as rocmenv shows it anywhere (see the module docstring); ``lines``: a
    multi-line text whose newlines and tabs are kept."""
    if not text.isprintable():  # (every character escaped below is not printable)
        if lines and text.replace("\t", " ").replace("\n", " ").isprintable():
            pass  # a table row, a multi-line text: nothing to escape (the common case)
        elif lines:
            if "\x1b" in text:
                text = _re(_ANSI).sub("", text)
            text = text.replace("\r\n", "\n").replace("\r", "\n")
            text = _re(_LINES).sub(_visible, text)
        else:
            text = _re(_ONE_LINE).sub(_visible, text)
    if "##[" in text:
        text = text.replace("##[", "##\\u005b")
    if "::" in text:
        text = _re(_OPENER).sub(r"\1\\u003a", text)
    return text


def control_char(text: str) -> str | None:
    """The first character of ``text`` that :func:`shown` would escape (a control character,
    a line separator, a bidirectional control, a lone surrogate), else ``None``: what a
    name must not hold (it is refused where it is read) and no line of a script may hold."""
    if text.isprintable():
        return None
    found = _re(_ONE_LINE).search(text)
    return found.group() if found else None


# -- markdown (GitHub's renderer: cmark-gfm) ---------------------------------------------------

#: Backslash-escaped anywhere in markdown text: what opens or closes emphasis, strikethrough,
#: code, links and images, table cells (and the backslash itself), and ``:`` (no ``http://``
#: autolink forms; ``www.`` gets its dot escaped); ``<``, ``>`` and ``&`` become entities (raw
#: HTML is what GitHub renders as HTML). At the start of the text also what would open a
#: heading, a list, a setext underline or a block quote there. (An e-mail address still
#: becomes a ``mailto:`` link: cmark-gfm finds those after every escape; it loads nothing.)
_MARKDOWN_PUNCTUATION = frozenset("\\`*_[]|~:")
_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
_BLOCK_START = r"[#+=-]|\d{1,9}(?=[.)](?:\s|$))"


def markdown_text(text: str) -> str:
    """``text`` in markdown (a paragraph or a table cell) showing exactly its characters:
    :func:`shown`, then every markup character escaped — no image, link, HTML, heading,
    list, emphasis or table cell can come from it."""
    out = []
    for char in shown(text):
        if char in _MARKDOWN_PUNCTUATION:
            out.append("\\" + char)
        else:
            out.append(_ENTITIES.get(char, char))
    escaped = "".join(out)
    if "." in escaped:
        escaped = _re(r"(?i)(www)\.").sub(r"\1\\.", escaped)
    start = _re(_BLOCK_START).match(escaped)
    if start is None:
        return escaped
    if start.group()[0].isdigit():  # "1." or "1)": the delimiter escaped
        end = start.end()
        return escaped[:end] + "\\" + escaped[end:]
    return "\\" + escaped


def markdown_code(text: str) -> str:
    """``text`` as an inline code span that is also a safe table cell: :func:`shown`, pipes
    escaped (GitHub splits table cells before code spans), fenced by one backtick more than
    the longest run of backticks it holds (CommonMark)."""
    content = shown(text).replace("|", "\\|")
    fence = "`" * (_longest_backtick_run(content) + 1)
    edges = content.startswith(("`", " ")) or content.endswith(("`", " "))
    pad = " " if edges and content.strip(" ") else ""  # (CommonMark strips one of each)
    return f"{fence}{pad}{content}{pad}{fence}"


def markdown_block(text: str) -> str:
    """``text`` (several lines) as a fenced code block, the fence longer than any run of
    backticks in it, every line :func:`shown`."""
    content = shown(text, lines=True).strip("\n")
    fence = "`" * max(3, _longest_backtick_run(content) + 1)
    return f"{fence}\n{content}\n{fence}"


def _longest_backtick_run(text: str) -> int:
    if "`" not in text:
        return 0
    return max(len(run) for run in _re("`+").findall(text))


# -- JSON --------------------------------------------------------------------------------------


def json_line(payload: Any) -> str:
    """One JSON document on one line, keys sorted, that no runner reads as a workflow
    command: ``json`` escapes every control and non-ASCII character already, and ``[`` after
    ``##`` (only ever inside a string) is written ``\\u005b`` — the same document to any JSON
    parser. Not indented: ``json`` uses its C encoder only without ``indent``."""
    import json

    text = json.dumps(payload, sort_keys=True)
    return text.replace("##[", "##\\u005b") if "##[" in text else text
