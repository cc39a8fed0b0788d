"""The untrusted policy as data: what an untrusted container may have beyond the fixed rules
(docs/security.md "Running untrusted code"), and whether this invocation is untrusted at all.

The policy is the built-in :data:`DEFAULT_POLICY` under the ``[policy]`` tables of the user
and site configuration (:mod:`rocmenv.settings.site`) under the TOML file ``ROCMENV_POLICY``
names (outside the checkout: inside it, it would be the pull request's), key by key. The rules that apply it to
a container are :mod:`rocmenv.container.guard`'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from rocmenv.errors import ConfigError, UsageError
from rocmenv.hostfs import is_under
from rocmenv.record import record, replace
from rocmenv.settings.declared import PERCENT_RE, default, keys, setting
from rocmenv.settings.profiles import Ulimit

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, Final

UNTRUSTED_ENV: Final = setting("profile", "untrusted").env or ""
POLICY_ENV: Final = "ROCMENV_POLICY"  # declared in rocmenv.settings.declared.VARIABLES
TRUE_WORDS: Final = ("1", "true", "yes")
FALSE_WORDS: Final = ("0", "false", "no")
POLICY_KEYS: Final = keys("policy")  # declared, with their defaults, in settings.declared
#: The policy's caps (what an untrusted container gets at most: rocmenv.container.caps).
CAP_KEYS: Final = ("pids-limit", "memory", "shm-size", "ulimits", "output-size")
#: The policy's lists (what an untrusted container may have beyond the fixed rules).
LIST_KEYS: Final = tuple(k for k in POLICY_KEYS if k not in CAP_KEYS)


def untrusted_env(env: Mapping[str, str]) -> bool:
    """``ROCMENV_UNTRUSTED``: ``1/true/yes`` or ``0/false/no`` (any case); unset is false.
    Anything else is a :class:`UsageError`, never "trusted"."""
    if UNTRUSTED_ENV not in env:
        return False
    word = env[UNTRUSTED_ENV].strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise UsageError(
        f"{UNTRUSTED_ENV}={env[UNTRUSTED_ENV]!r} is neither true nor false",
        hint=f"set it to one of {', '.join(TRUE_WORDS)} (untrusted) or "
        f"{', '.join(FALSE_WORDS)} (trusted); rocmenv never guesses trusted",
    )


@record
class Policy:
    """What an untrusted container may have beyond the fixed rules (module docstring)."""

    source: str = "built-in"
    cap_add: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    group_add: tuple[str, ...] = tuple(default("policy", "group-add"))
    devices: tuple[str, ...] = ()  # host device nodes beyond /dev/kfd and the GPUs'
    network: tuple[str, ...] = tuple(default("policy", "network"))
    images: tuple[str, ...] = ()  # empty: the trusted config's repositories, else rocm/sgl-dev
    mount_sources: tuple[str, ...] = ()  # data mounts only under these (empty: the trusted
    # config's profile mounts, e.g. /data/miles_ci: rocmenv.container.guard.guard_for)
    pass_env: tuple[str, ...] = ()  # host variables an untrusted profile may still pass
    # The caps (rocmenv.container.caps; docs/security.md "Caps by default" says why these defaults).
    pids_limit: int = default("policy", "pids-limit")  # processes and threads of the container
    memory: str = default("policy", "memory")  # of this host's memory, or a size; no swap beyond
    shm_size: str = default("policy", "shm-size")  # the private /dev/shm (the reference CI's)
    ulimits: tuple[Ulimit, ...] = tuple(  # the most a profile may ask; set when it asks nothing
        Ulimit(name=name, soft=limit, hard=limit)
        for name, limit in default("policy", "ulimits").items()
    )
    output_size: str = default("policy", "output-size")  # what --output copies out, in all


DEFAULT_POLICY: Final = Policy()


def policy_bytes(text: str, total: int | None) -> int | None:
    """A cap in bytes: a size (``32g``), or a share of ``total`` (``75%``); ``None`` for a
    share when the total is unknown."""
    from rocmenv.settings.keys import parse_size

    if text.endswith("%"):
        return None if total is None else int(total * float(text[:-1]) / 100)
    return parse_size(text)


def load_policy(
    env: Mapping[str, str], checkout: Path | None, base: Policy = DEFAULT_POLICY
) -> Policy:
    """The TOML file ``ROCMENV_POLICY`` names (outside the checkout) over ``base`` (the
    site and user files' ``[policy]`` over the built-in one), key by key; ``base`` when the
    variable is not set."""
    named = policy_file(env, checkout)
    if named is None:
        return base
    table, path = named
    return policy_from_table(table, f"policy file {path}", base, source=str(path))


def policy_file(env: Mapping[str, str], checkout: Path | None) -> tuple[Any, Path] | None:
    """The table of the file ``ROCMENV_POLICY`` names and its path (``None``: not set); an
    error when it is relative or inside the checkout."""
    name = env.get(POLICY_ENV, "").strip()
    if not name:
        return None
    path = Path(name)
    if not path.is_absolute():
        raise ConfigError(
            f"{POLICY_ENV}={name!r} is not an absolute path",
            hint="name the policy file by an absolute path outside the checkout",
        )
    if checkout is not None and is_under(os.path.realpath(path), os.path.realpath(checkout)):
        raise ConfigError(
            f"{POLICY_ENV}={name} is inside the checkout {checkout}: in an untrusted job that "
            "file is the pull request's, not yours",
            hint="keep the policy file outside the checkout (e.g. /etc/rocmenv/policy.toml)",
        )
    from rocmenv.settings.files import load_toml

    return load_toml(path), path


def policy_from_table(
    table: Any, where: str, base: Policy = DEFAULT_POLICY, *, source: str | None = None
) -> Policy:
    """A policy table (a policy file, or ``[policy]`` in the site or user configuration)
    over ``base``: the keys it sets replace the base's."""
    from rocmenv.settings.keys import as_str_list, check_keys

    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    check_keys(table, POLICY_KEYS, where)
    values: dict[str, Any] = {}
    for key in LIST_KEYS:
        if key in table:
            values[key.replace("-", "_")] = as_str_list(table[key], f"{key} in {where}")
    if "images" in values:
        values["images"] = tuple(repository_name(i, f"images in {where}") for i in values["images"])
    values.update(_caps(table, where, base))
    if not values:
        return base
    label = source or where
    return replace(
        base, source=label if base.source == "built-in" else f"{base.source} + {label}", **values
    )


def _caps(table: Any, where: str, base: Policy) -> dict[str, Any]:
    """The caps a policy table sets; ``ulimits`` name by name over the base's (a site that
    allows core dumps does not lift the rtprio cap by saying so)."""
    import re

    from rocmenv.settings.keys import as_int, parse_size
    from rocmenv.settings.profiles import as_size, parse_ulimit

    values: dict[str, Any] = {}
    if "pids-limit" in table:
        values["pids_limit"] = as_int(table["pids-limit"], f"pids-limit in {where}", minimum=1)
    for key in ("memory", "shm-size"):
        if key in table:
            value = table[key]
            if not (isinstance(value, str) and re.fullmatch(PERCENT_RE, value)):
                value = as_size(value, f"{key} in {where}")
                if parse_size(value) == 0:
                    raise ConfigError(f"{key} in {where} = {value!r}: a cap must be above 0",
                                      hint='give a size (e.g. "64g") or a share ("75%")')  # fmt: skip
            values[key.replace("-", "_")] = value
    if "output-size" in table:
        values["output_size"] = as_size(table["output-size"], f"output-size in {where}")
    if "ulimits" in table:
        if not isinstance(table["ulimits"], dict):
            raise ConfigError(f"ulimits in {where} must be a table of name = limit")
        given = {k: parse_ulimit(k, v, f"ulimits in {where}") for k, v in table["ulimits"].items()}
        merged = {u.name: u for u in base.ulimits} | given
        values["ulimits"] = tuple(merged[name] for name in sorted(merged))
    return values


def repository_name(text: str, where: str) -> str:
    from rocmenv.errors import InvalidReference
    from rocmenv.grammar.reference import parse_repository

    try:
        return parse_repository(text).name
    except InvalidReference as err:
        raise ConfigError(f"{where}: {err.what}", hint=err.hint) from None
