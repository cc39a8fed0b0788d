"""A job log read the way GitHub's runner reads it: which lines become workflow commands.

Written from the runner's own source (actions/runner): ``ProcessInvoker`` reads a step's
stdout and stderr with ``StreamReader.ReadLine`` (UTF-8, invalid bytes as U+FFFD; a line
ends at CR, LF or CR LF; the rest at the end of the stream is a last line) on two threads
into two queues, and hands each batch's stderr lines over before its stdout lines — nothing
orders the two pipes against each other. ``OutputManager.OnDataReceived`` passes a line that
holds ``::`` or ``##[`` to ``ActionCommandManager.TryProcessCommand``, which parses it with
``ActionCommand.TryParseV2`` (after ``TrimStart``, the line starts with ``::``; the command
name runs to the first space or the next ``::``; ``k=v`` properties split on ``,``; data
after the second ``::``) or else ``ActionCommand.TryParse`` (``##[`` anywhere in the line;
the name runs to a space or ``]``; properties split on ``;``; data after ``]``), the name
looked up case-insensitively among the registered commands. Then, under one lock:

* while stopped, a command whose name is the stop token resumes processing (and the token
  is no longer a command); every other command is an ordinary log line;
* otherwise ``stop-commands`` stops processing with its data as the token (a token that is
  empty, ``pause-logging`` or a registered command's name fails the step: the newer
  runners' ``ValidateStopToken``), and the token becomes a registered name until resumed;
* otherwise the command's extension acts: ``set-output`` sets an output, ``add-mask`` adds a
  secret, ``error``/``warning``/``notice`` make annotations, ``group``/``endgroup``/``echo``
  change the log's display, and so on.

:func:`read_job_log` reads a step's two streams. Because the runner does not order them, it
takes the worst case for each line of stdout: read as if processing were on (a ``::stop-
commands::`` on stderr does not protect a stdout line). A line of stdout that parses as a
command is therefore counted as one — the test of a fence on stderr cannot pass by luck of
timing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: The runner's command extensions (``internal-set-repo-path`` is registered for plugins only).
REGISTERED = frozenset(
    {
        "set-env", "set-output", "save-state", "add-mask", "add-path", "add-matcher",
        "remove-matcher", "debug", "warning", "error", "notice", "group", "endgroup", "echo",
        "stop-commands",
    }
)  # fmt: skip
#: A shell script (``sh -c``) that prints every workflow command and terminal escape it can,
#: on stdout and on stderr, tagged ``PWNED``, and ends mid-line with a ``stop-commands`` of
#: its own: what an untrusted container does to a job log.
ATTACK = r"""
for fd in 1 2; do
  {
    printf '::set-output name=image::PWNED-image\n'
    printf '::add-mask::passed\n'
    printf '::stop-commands::pwnedtoken\n'
    printf '::error title=PWNED::after its own stop\n'
    printf '::pwnedtoken::\n'
    printf '##[set-output name=digest;]PWNED-v1\n'
    printf 'text ##[add-mask]PWNED-v1-mid-line\n'
    printf '   ::warning::PWNED indented\n'
    printf '\302\240::notice::PWNED after a no-break space\n'
    printf 'x\r::error::PWNED after a CR\r\n'
    printf '::echo::on\n::group::PWNED\n::endgroup::\n::save-state name=s::PWNED\n'
    printf '::add-path::/PWNED\n::set-env name=PWNED::1\n::debug::PWNED\n'
    printf '::add-matcher::/PWNED.json\n::remove-matcher owner=PWNED::\n'
    printf '\033]0;PWNED title\007\033[2J\033[31mred\033[0m\n'
    printf '\342\n::error::PWNED after a broken UTF-8 sequence\n'
  } >&$fd
done
printf '::stop-commands::pwnedlast'
"""
_DATA = (("%0D", "\r"), ("%0A", "\n"), ("%25", "%"))
_PROPERTY = (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%"))
_V1 = (("%3B", ";"), ("%0D", "\r"), ("%0A", "\n"), ("%5D", "]"), ("%25", "%"))


@dataclass(frozen=True)
class Command:
    name: str
    properties: dict[str, str]
    data: str
    line: str
    stream: str


@dataclass
class Runner:
    """The command state of one job step (see the module docstring)."""

    registered: set[str] = field(default_factory=lambda: {n.lower() for n in REGISTERED})
    stop_token: str | None = None
    commands: list[Command] = field(default_factory=list)  # processed, in order
    ignored: list[str] = field(default_factory=list)  # command lines while stopped (shown)
    resumed: list[str] = field(default_factory=list)  # the stop tokens that were resumed
    lines: list[str] = field(default_factory=list)  # what the log shows as text
    failed: list[str] = field(default_factory=list)  # why the step failed, if it did

    def process(self, line: str, stream: str = "stderr") -> None:
        if "::" not in line and "##[" not in line:
            self.lines.append(line)
            return
        command = parse_v2(line, self.registered, stream) or parse_v1(line, self.registered, stream)
        if command is None:
            self.lines.append(line)
            return
        if self.stop_token is not None:
            if command.name.lower() == self.stop_token.lower():
                self.registered.discard(self.stop_token.lower())
                self.resumed.append(self.stop_token)
                self.stop_token = None
            else:
                self.ignored.append(line)
                self.lines.append(line)  # the log shows it as text
            return
        if command.name.lower() == "stop-commands":
            token = command.data
            if not token or token.lower() in self.registered or token.lower() == "pause-logging":
                self.failed.append(f"invalid stop token {token!r}")
                return
            self.stop_token = token
            self.registered.add(token.lower())
            self.commands.append(command)
            return
        self.commands.append(command)

    def outputs(self) -> dict[str, str]:
        return {
            c.properties["name"]: c.data
            for c in self.commands
            if c.name.lower() == "set-output" and "name" in c.properties
        }

    def masks(self) -> list[str]:
        return [c.data for c in self.commands if c.name.lower() == "add-mask"]

    def annotations(self) -> list[Command]:
        return [c for c in self.commands if c.name.lower() in ("error", "warning", "notice")]


def parse_v2(line: str, registered: set[str], stream: str = "stderr") -> Command | None:
    message = line.lstrip()  # .NET TrimStart: Char.IsWhiteSpace, within Python's str.isspace
    if not message.startswith("::"):
        return None
    end = message.find("::", 2)
    if end < 0:
        return None
    info = message[2:end]
    space = info.find(" ")
    name = info if space < 0 else info[:space]
    if name.lower() not in registered:
        return None
    properties: dict[str, str] = {}
    if space > 0:
        for item in info[space + 1 :].strip().split(","):
            pair = [p for p in item.split("=", 1) if p]
            if item and len(pair) == 2:
                properties[pair[0]] = _unescape(pair[1], _PROPERTY)
    return Command(name, properties, _unescape(message[end + 2 :], _DATA), line, stream)


def parse_v1(line: str, registered: set[str], stream: str = "stderr") -> Command | None:
    start = line.find("##[")
    if start < 0:
        return None
    close = line.find("]", start)
    if close < 0:
        return None
    info = line[start + 3 : close]
    space = info.find(" ")
    name = info if space < 0 else info[:space]
    if name.lower() not in registered:
        return None
    properties: dict[str, str] = {}
    if space > 0:
        for item in info[space + 1 :].split(";"):
            pair = [p for p in item.split("=", 1) if p]
            if item and len(pair) == 2:
                properties[pair[0]] = _unescape(pair[1], _V1)
    return Command(name, properties, _unescape(line[close + 1 :], _V1), line, stream)


def _unescape(text: str, mapping: tuple[tuple[str, str], ...]) -> str:
    for escaped, plain in mapping:
        text = text.replace(escaped, plain)
    return text


def read_lines(data: bytes) -> list[str]:
    """``StreamReader.ReadLine`` until the end: UTF-8 with U+FFFD, CR/LF/CR LF."""
    text = data.decode("utf-8", "replace")
    lines = re.split(r"\r\n|\r|\n", text)
    if lines and lines[-1] == "":
        lines.pop()  # a final line end ends the last line; it starts none
    return lines


def read_job_log(stdout: bytes, stderr: bytes) -> tuple[Runner, list[Command]]:
    """The step's stderr read in order by one :class:`Runner`, and the commands any line of
    its stdout would be in the worst ordering of the two pipes (read with processing on)."""
    runner = Runner()
    for line in read_lines(stderr):
        runner.process(line, "stderr")
    worst: list[Command] = []
    for line in read_lines(stdout):
        free = Runner()  # processing on, whatever stderr's state
        free.process(line, "stdout")
        worst += free.commands
    return runner, worst
