"""A job's ``container.options`` (``docker create`` flags) as profile keys, and the flags a
profile cannot express.

:func:`parse_options` reads the flags as the Docker CLI does (``--flag=value``, ``--flag
value``, ``-v``/``-e``/``-w``/``-l``/``-m``, boolean ``--privileged``); :func:`profile_keys`
writes the profile as the difference from the built-in it extends (``rocm``), so the
reference CI's options become ``extends = "rocm"`` plus what differs (``privileged = true``)
— except the mounts, which are always the job's own.
:func:`option_set` is the canonical set of options a flag list means — what the round trip
``init`` → ``options --format gha`` is compared by.

A flag a profile cannot express (``--user``, ``--entrypoint``, ``--gpus``, ``--pid``, …) is
collected, never dropped: ``init`` refuses and lists them all.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from rocmenv.errors import UsageError

# flags taking a value -> the profile concern they map to
VALUE_FLAGS = {
    "--device": "device", "--group-add": "group-add", "--cap-add": "cap-add",
    "--cap-drop": "cap-drop", "--security-opt": "security-opt", "--ipc": "ipc",
    "--network": "network", "--net": "network", "--shm-size": "shm-size", "--memory": "memory",
    "-m": "memory", "--memory-swap": "memory-swap", "--ulimit": "ulimit", "--volume": "mount",
    "-v": "mount", "--mount": "mount", "--env": "env", "-e": "env", "--label": "label",
    "-l": "label", "--workdir": "workdir", "-w": "workdir",
}  # fmt: skip
BOOL_FLAGS = {"--privileged": "privileged"}
#: What docker's boolean flags take after ``=`` (Go's ``strconv.ParseBool``); anything else
#: makes docker refuse the whole line, so init refuses it too.
GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


@dataclass
class Options:
    """What the flags say, by concern (in order), and what no profile can say."""

    values: dict[str, list[str]] = field(default_factory=dict)
    privileged: bool = False
    refused: list[str] = field(default_factory=list)


def parse_options(text: str) -> Options:
    if "${{" in text:
        raise UsageError(
            "container.options is a GitHub expression (${{ … }}): init needs the literal flags",
            hint="run init on a workflow whose options are written out, or pass --image and "
            "edit the profile by hand",
        )
    try:
        tokens = shlex.split(text)
    except ValueError as err:
        raise UsageError(f"container.options cannot be split like a shell line: {err}") from None
    out = Options()
    i = 0
    while i < len(tokens):
        token = tokens[i]
        name, eq, inline = token.partition("=") if token.startswith("--") else (token, "", "")
        if name in BOOL_FLAGS and eq and inline not in GO_TRUE + GO_FALSE:
            out.refused.append(token)  # docker: "invalid argument … for --privileged flag"
        elif name in BOOL_FLAGS:
            out.privileged = inline in GO_TRUE if eq else True
        elif name in VALUE_FLAGS:
            if not eq:
                if i + 1 >= len(tokens):
                    raise UsageError(f"container.options: {name} has no value")
                i += 1
                inline = tokens[i]
            out.values.setdefault(VALUE_FLAGS[name], []).append(inline)
        elif token.startswith("-"):
            takes_value = not eq and i + 1 < len(tokens) and not tokens[i + 1].startswith("-")
            shown = token + (f" {tokens[i + 1]}" if takes_value else "")
            out.refused.append(shown)
            i += 1 if takes_value else 0
        else:
            out.refused.append(token)
        i += 1
    return out


def _mount(text: str) -> tuple[str, str, bool]:
    """``-v SRC:DST[:ro]`` or ``--mount type=bind,source=…,target=…[,readonly]``."""
    if "=" in text.split(",", 1)[0]:
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, _, value = part.partition("=")
            fields[key.strip().lower()] = value.strip() or "true"
        if fields.get("type", "bind") != "bind":
            raise UsageError(f"--mount {text}: only bind mounts can be a profile's mounts")
        source = fields.get("source") or fields.get("src") or ""
        target = fields.get("target") or fields.get("dst") or fields.get("destination") or ""
        ro = any(fields.get(k, "false").lower() in ("true", "1") for k in ("readonly", "ro"))
        return source, target, ro
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0].startswith("/"):
        raise UsageError(
            f"-v {text}: only host-path bind mounts (SRC:DST[:ro]) can be a profile's mounts"
        )
    return parts[0], parts[1], len(parts) == 3 and "ro" in parts[2].split(",")


def _ulimit(text: str) -> tuple[str, int, int]:
    name, _, value = text.partition("=")
    soft_text, _, hard_text = value.partition(":")
    try:
        soft = int(soft_text)
        hard = int(hard_text) if hard_text else soft
    except ValueError:
        raise UsageError(f"--ulimit {text}: not NAME=SOFT[:HARD]") from None
    return name, soft, hard


def option_set(text: str) -> frozenset[str]:
    """The options a flag string means, canonical (``--ulimit=nofile=65535`` and
    ``--ulimit nofile=65535:65535`` are one option; a bind mount is one whichever flag)."""
    opts = parse_options(text)
    out: set[str] = {f"refused:{r}" for r in opts.refused}
    if opts.privileged:
        out.add("privileged")
    for concern, values in opts.values.items():
        for value in values:
            if concern == "mount":
                src, dst, ro = _mount(value)
                out.add(f"mount:{src}:{dst}:{'ro' if ro else 'rw'}")
            elif concern == "ulimit":
                name, soft, hard = _ulimit(value)
                out.add(f"ulimit:{name}={soft}:{hard}")
            elif concern in ("cap-add", "cap-drop"):
                out.add(f"{concern}:{value.upper().removeprefix('CAP_')}")
            else:
                out.add(f"{concern}:{value}")
    return frozenset(out)


def profile_keys(opts: Options, base: Any) -> tuple[dict[str, Any], list[str]]:
    """The profile keys (over the built-in profile ``base``) that give these options, and
    notes on what was made explicit. ``base`` is a :class:`rocmenv.settings.profiles.Profile`."""
    keys: dict[str, Any] = {}
    notes: list[str] = []
    v = opts.values
    devices = list(dict.fromkeys(v.get("device", [])))
    gpu_nodes = {"/dev/kfd", "/dev/dri"}
    gpus = "all" if gpu_nodes <= {d.split(":")[0] for d in devices} else "none"
    other = [d for d in devices if d.split(":")[0] not in gpu_nodes or gpus == "none"]
    if gpus != base.gpus:
        keys["gpus"] = gpus
    if list(other) != list(base.devices):
        keys["devices"] = other
    for concern, attr in (("group-add", "group_add"), ("security-opt", "security_opt")):
        if v.get(concern, []) != list(getattr(base, attr)):
            keys[concern] = v.get(concern, [])
    for concern, attr in (("cap-add", "cap_add"), ("cap-drop", "cap_drop")):
        caps = [c.upper().removeprefix("CAP_") for c in v.get(concern, [])]
        if caps != list(getattr(base, attr)):
            keys[concern] = caps
    for concern, attr, default in (
        ("ipc", "ipc", "private"), ("network", "network", None), ("shm-size", "shm_size", "64m"),
        ("memory", "memory", "0"), ("memory-swap", "memory_swap", "0"), ("workdir", "workdir", None),
    ):  # fmt: skip
        given = v.get(concern, [None])[-1]
        if given != getattr(base, attr):
            if given is None and default is not None:
                notes.append(
                    f"{concern} = {default!r}: docker's default, stated (the base sets it)"
                )
                given = default
            if given is not None:
                keys[concern] = given
    _ulimits(keys, v.get("ulimit", []), base)
    if opts.privileged != base.privileged:
        keys["privileged"] = opts.privileged
    _mounts(keys, v.get("mount", []), base)
    _env(keys, v.get("env", []), base)
    labels = dict(item.partition("=")[::2] for item in v.get("label", []))
    if labels:
        keys["labels"] = labels
    return keys, notes


def _ulimits(keys: dict[str, Any], values: list[str], base: Any) -> None:
    given = {}
    for text in values:
        name, soft, hard = _ulimit(text)
        given[name] = (soft, hard)
    if given != {u.name: (u.soft, u.hard) for u in base.ulimits}:
        keys["ulimits"] = {n: (s if s == h else f"{s}:{h}") for n, (s, h) in given.items()}


def _mounts(keys: dict[str, Any], values: list[str], base: Any) -> None:
    """The job's own mounts, always written (none: ``[]``), so a project never carries the
    built-in profile's data mounts (the reference CI's /data/miles_ci) by inheritance."""
    keys["mounts"] = job_mounts(values)


def job_mounts(values: list[str]) -> list[dict[str, Any]]:
    """``-v``/``--mount`` values as profile mounts, each optional: skipped where the source
    is absent, as the runner's ``-v`` would have made an empty directory."""
    return [
        {"source": s, "target": t, **({"readonly": True} if ro else {}), "optional": True}
        for s, t, ro in (_mount(text) for text in values)
    ]


def _env(keys: dict[str, Any], values: list[str], base: Any) -> None:
    fixed = {}
    passed: list[str] = []
    secret: list[str] = []
    for item in values:
        name, eq, value = item.partition("=")
        if eq:
            fixed[name] = value
        elif any(word in name.upper() for word in SECRET_WORDS):
            secret.append(name)
        else:
            passed.append(name)
    if fixed != dict(base.env):
        keys["env"] = fixed
    if passed != list(base.pass_env):
        keys["pass-env"] = passed
    if secret != list(base.secret_env):
        keys["secret-env"] = secret
