"""Property-based fuzzing of the engine-free commands: whatever the config file, lockfile,
environment and arguments, rocmenv exits with a code from docs/commands.md's "Exit codes" table and
never prints a traceback.

The CLI runs in-process (``main(argv, ctx=...)``) with its own environment, working directory
and streams. Commands that would ask a registry are pointed at a closed loopback port with no
retries and a short timeout, so they fail fast (exit 3) instead of waiting; a fake 8-GPU sysfs
stands in for the host's GPUs. Example counts are kept moderate so the module runs in seconds;
raise ``ROCMENV_FUZZ_EXAMPLES`` to fuzz longer locally.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rocmenv.settings.profiles import PROFILE_KEYS
from tests.support.cli_fuzz import ARG, CLOSED, EXAMPLES, ODD, TEXT, check
from tests.support.fakegpu import build_fake_host

FAST_REGISTRY = {"ROCMENV_REGISTRY_RETRIES": "0", "ROCMENV_REGISTRY_TIMEOUT": "2"}


@pytest.fixture(scope="module")
def world() -> Iterator[dict[str, Path]]:
    with tempfile.TemporaryDirectory(prefix="rocmenv-fuzz-") as tmp:
        root = Path(tmp)
        host = build_fake_host(root / "host", gpus=8, char_devices=False)
        project = root / "project"
        (project / ".git").mkdir(parents=True)
        yield {"project": project, "sysfs": host.sysfs_root, "dev": host.dev_root}


# ------------------------------------------------------------------ strategies


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        text = repr(value)
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(text, text)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string (BMP, no surrogates)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


SCALAR = st.one_of(
    TEXT,
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
)
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from([*ODD[:12], "x"]), inner,
                                                     max_size=2)
    ),
    max_leaves=6,
)  # fmt: skip
PROFILE = st.dictionaries(st.sampled_from([*PROFILE_KEYS, "imagee", "gpu_env"]), VALUE, max_size=5)
REGISTRY = st.dictionaries(
    st.sampled_from(["mirrors", "insecure", "timeout", "retries", "mirors"]), VALUE, max_size=3
)
CONFIG = st.fixed_dictionaries(
    {},
    optional={
        "default-profile": st.one_of(st.sampled_from(["p", "cpu", "rocm", "nope"]), TEXT),
        "lockfile": TEXT,
        "engine": TEXT,
        "registry": REGISTRY,
        "host": st.dictionaries(st.sampled_from(["sysfs-root", "dev-root", "x"]), VALUE),
        "profiles": st.dictionaries(
            st.sampled_from(["p", "cpu", "rocm", "q"]), PROFILE, max_size=2
        ),
        "unknown": VALUE,
    },
)


def render_config(config: dict[str, Any]) -> str:
    lines = []
    tables = {}
    for key, value in config.items():
        if isinstance(value, dict) and key in ("registry", "host", "profiles"):
            tables[key] = value
        else:
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    for key, table in tables.items():
        if key == "profiles":
            for name, prof in table.items():
                lines.append(f"[profiles.{_toml_key(name)}]")
                lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in prof.items()]
        else:
            lines.append(f"[{key}]")
            lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


CONFIG_FILE = st.one_of(
    CONFIG.map(render_config).map(str.encode),
    st.binary(max_size=60),
    st.sampled_from([b"", b"\xff\xfe", b"[profiles.p\n", b"x = " + b"[" * 3000 + b"]" * 3000]),
)
DIGEST = st.one_of(st.sampled_from(["sha256:" + "a" * 64, "md5:00", "sha256:xyz", ""]), TEXT)
ENTRY = st.fixed_dictionaries(
    {},
    optional={
        "repository": st.one_of(st.just(f"{CLOSED}/x/y"), TEXT),
        "tag": st.one_of(st.none(), TEXT),
        "digest": DIGEST,
        "platform_digest": DIGEST,
        "media_type": TEXT,
        "platform": st.one_of(st.just("linux/amd64"), TEXT),
        "resolved_at": TEXT,
        "registry": st.one_of(st.none(), TEXT),
        "constraints": VALUE,
        "packages": VALUE,
        "bogus": VALUE,
    },
)
LOCK = st.fixed_dictionaries(
    {"lock_version": st.one_of(st.sampled_from([1, 0, 2, -1, 10**30]), SCALAR)},
    optional={
        "profiles": st.one_of(st.dictionaries(st.sampled_from(["p", "rocm", "cpu"]), ENTRY), VALUE),
        "references": st.dictionaries(TEXT, ENTRY, max_size=2),
        "generator": TEXT,
    },
)
LOCK_FILE = st.one_of(
    LOCK.map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=40),
    st.sampled_from([b"", b"null", b"[]", b"\xff", b"[" * 50_000 + b"]" * 50_000]),
)
ENV_NAMES = [
    "ROCMENV_PROFILE", "ROCMENV_LOCKFILE", "ROCMENV_MIRRORS", "ROCMENV_INSECURE_REGISTRIES",
    "ROCMENV_UNTRUSTED", "ROCMENV_ENGINE", "ROCMENV_SHIMS", "ROCMENV_CONFIG",
    "ROCMENV_PR_BODY", "ROCMENV_TIMINGS", "GITHUB_ACTIONS", "HOME", "ROCMENV_DEV_ROOT",
]  # fmt: skip
ENV = st.dictionaries(st.sampled_from(ENV_NAMES), ARG, max_size=3)
REGISTRY_ENV = st.dictionaries(
    st.sampled_from(["ROCMENV_REGISTRY_TIMEOUT", "ROCMENV_REGISTRY_RETRIES",
                     "ROCMENV_REGISTRY_BACKOFF", "ROCMENV_REGISTRY_DEADLINE"]),
    ARG,
    max_size=3,
)  # fmt: skip

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _env(world: dict[str, Path], extra: dict[str, str]) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(world["project"]),
        "ROCMENV_SYSFS_ROOT": str(world["sysfs"]),
        "ROCMENV_DEV_ROOT": str(world["dev"]),
        "DOCKER_HOST": f"unix://{world['project']}/no-engine.sock",
        **{k: v for k, v in extra.items() if k not in FAST_REGISTRY},
        **FAST_REGISTRY,
    }


def _write(world: dict[str, Path], config: bytes | None, lock: bytes | None) -> Path:
    project = world["project"]
    for name, data in (("rocmenv.toml", config), ("rocmenv.lock", lock)):
        path = project / name
        if data is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(data)
    return project


# ------------------------------------------------------------------ the properties


@FUZZ
@given(
    command=st.sampled_from([["ref", "parse"], ["ref", "parse", "--json"], ["tags", "parse"],
                             ["tags", "parse", "--json"]]),
    args=st.lists(ARG, min_size=1, max_size=3),
    env=ENV,
)  # fmt: skip
def test_parse_commands(
    world: dict[str, Path], command: list[str], args: list[str], env: dict[str, str]
) -> None:
    check([*command, "--", *args], _write(world, None, None), _env(world, env))


OPTION_FLAGS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["--gpus", "-e", "-v", "-w", "--image", "--format", "--profile"]), ARG),
        st.tuples(st.sampled_from(["--untrusted", "--host-check", "--no-host-check",
                                   "--group-names"])),
    ),
    max_size=4,
).map(lambda pairs: [part for pair in pairs for part in pair])  # fmt: skip


@FUZZ
@given(
    base=st.sampled_from([["--gpus", "none"], ["--profile", "cpu"], ["--profile", "p"], []]),
    flags=OPTION_FLAGS,
    config=st.one_of(st.none(), CONFIG_FILE),
    lock=st.one_of(st.none(), LOCK_FILE),
    env=ENV,
)
# the attacks of issue 9 first, then whatever hypothesis finds
@example(base=[], flags=["--gpus", "0-99999999999"], config=None, lock=None, env={})
@example(base=["--gpus", "none"], flags=[], config=b'x = "\xff"\n', lock=None, env={})
@example(base=[], flags=[], config=b"x = " + b"[" * 3000 + b"]" * 3000, lock=None, env={})
@example(
    base=["--profile", "p"], flags=[], lock=None, env={},
    config=b'[profiles.p]\nextends = "cpu"\nmounts = ["~nouser/x:/x"]\n',
)  # fmt: skip
@example(base=["--gpus", "none"], flags=[], config=None, lock=b"\xff", env={})
@example(base=["--gpus", "none"], flags=[], config=b'[host]\nsysfs-root = "\\u0000"\n',
         lock=None, env={})  # fmt: skip
@example(base=["--gpus", "none"], flags=[], config=None, lock=None,
         env={"ROCMENV_MIRRORS": "docker.io=127.0.0.1:abc"})  # fmt: skip
def test_options(
    world: dict[str, Path],
    base: list[str],
    flags: list[str],
    config: bytes | None,
    lock: bytes | None,
    env: dict[str, str],
) -> None:
    check(["options", *base, *flags], _write(world, config, lock), _env(world, env))


@FUZZ
@given(
    properties=st.lists(
        st.tuples(st.sampled_from(["simd_count", "gfx_target_version", "drm_render_minor",
                                   "location_id", "domain", "unique_id", "x"]),
                  st.one_of(st.integers(-(2**70), 2**70).map(str), ARG)),
        max_size=6,
    ),
    node_name=st.sampled_from(["9", "10", "٣", "99999999999999999999"]),
    json_flag=st.booleans(),
)  # fmt: skip
def test_gpus_with_a_fake_sysfs(
    world: dict[str, Path], properties: list[tuple[str, str]], node_name: str, json_flag: bool
) -> None:
    node = world["sysfs"] / "class" / "kfd" / "kfd" / "topology" / "nodes" / node_name
    node.mkdir(exist_ok=True)
    try:
        (node / "properties").write_text("".join(f"{k} {v}\n" for k, v in properties))
        argv = ["gpus", "--json"] if json_flag else ["gpus"]
        check(argv, _write(world, None, None), _env(world, {}))
    finally:
        (node / "properties").unlink(missing_ok=True)
        node.rmdir()


@FUZZ
@given(
    argv=st.one_of(
        st.tuples(st.just("validate"), ARG).map(list),
        st.tuples(st.just("validate"), st.just("--profile"), ARG).map(list),
        st.just(["validate"]),
        st.tuples(st.just("pin"), st.just("--profile"), ARG).map(list),
        st.just(["pin"]),
        st.sampled_from([["drift"], ["drift", "--format", "markdown"], ["drift", "--json"]]),
        st.tuples(st.just("drift"), st.sampled_from(["--profile", "--jobs", "--lock"]),
                  ARG).map(list),
        st.tuples(st.just("resolve"), st.sampled_from(["--sglang", "--rocm", "--gpu", "--before",
                                                        "--project"]), ARG).map(list),
        st.tuples(st.just("tags"), st.just("list"), st.just(f"{CLOSED}/x/y"),
                  st.sampled_from(["--sglang", "--rocm", "--gpu", "--before", "--page-size"]),
                  ARG).map(list),
    ),
    config=st.one_of(st.none(), CONFIG_FILE),
    lock=st.one_of(st.none(), LOCK_FILE),
    env=st.one_of(ENV, REGISTRY_ENV),
)  # fmt: skip
@example(argv=["validate"], config=None, lock=b"\xff\xfe", env={})
@example(argv=["validate"], config=None, lock=b"[" * 50_000 + b"]" * 50_000, env={})
@example(argv=["pin"], config=b"[registry]\ntimeout = nan\n", lock=None, env={})
@example(argv=["pin"], config=b"[registry]\nmirrors = {'docker.io' = ['[::1']}\n", lock=None,
         env={})  # fmt: skip
@example(argv=["validate", "rocm/sgl-dev:x"], config=None, lock=None,
         env={"ROCMENV_REGISTRY_TIMEOUT": "inf"})  # fmt: skip
@example(argv=["validate", "rocm/sgl-dev:x"], config=None, lock=None,
         env={"ROCMENV_INSECURE_REGISTRIES": "a" * 64 + ".example"})  # fmt: skip
@example(argv=["validate"], config=None, lock=None, env={"ROCMENV_CONFIG": "a" * 300})
@example(argv=["tags", "list", f"{CLOSED}/x/y"], config=None, lock=None,
         env={"ROCMENV_REGISTRY_BACKOFF": "abc"})  # fmt: skip
@example(argv=["validate"], config=b'lockfile = "a\\u0000b"\n', lock=None, env={})
def test_registry_commands_up_to_the_registry(
    world: dict[str, Path],
    argv: list[str],
    config: bytes | None,
    lock: bytes | None,
    env: dict[str, str],
) -> None:
    full_env = _env(world, env)
    for name, value in env.items():
        if name in FAST_REGISTRY:  # the variable's parsing is fuzzed; a valid one stays fast
            full_env[name] = value if not _fast_enough(name, value) else FAST_REGISTRY[name]
    check(argv, _write(world, config, lock), full_env)


def _fast_enough(name: str, value: str) -> bool:
    """Whether ``value`` is a valid setting (then the fast default is kept instead)."""
    from rocmenv.settings.registry import MAX_TIMEOUT

    try:
        number = float(value) if name.endswith("TIMEOUT") else int(value.strip())
    except ValueError:
        return False
    if name.endswith("TIMEOUT"):
        return 0 < number <= MAX_TIMEOUT
    return str(value).strip().isascii() and 0 <= number <= 20


@FUZZ
@given(
    flags=st.lists(
        st.tuples(st.sampled_from(["--sglang-pr", "--megatron-pr", "--remote", "--patch",
                                   "--gpu-tools", "--expect-gpus", "--gpu-timeout",
                                   "--sglang-subdir", "--export", "--pr-body"]), ARG),
        max_size=3,
    ).map(lambda pairs: [part for pair in pairs for part in pair]),
    body=st.one_of(st.none(), ARG, st.lists(st.sampled_from([*ODD[1:], "ci-sglang-pr:", "\n"]),
                                            max_size=8).map("".join)),
)  # fmt: skip
@example(flags=["--pr-body", "-"], body=None)
@example(flags=["--remote", "https://u:tok@h/x", "--sglang-pr", "#0"], body=None)
def test_bootstrap_argument_checks(
    world: dict[str, Path], flags: list[str], body: str | None
) -> None:
    """Bootstrap's input checks run before any step; `--launcher-dir` under a missing parent
    and no GPU wait keep it from doing anything when the input is accepted."""
    env = {"ROCMENV_PR_BODY": body} if body else {}
    project = _write(world, None, None)
    check(
        ["bootstrap", "--no-gpu-wait", "--no-reap", "--no-shims", "--export", "none",
         "--sglang-path", str(project / "absent"), *flags],
        project,
        _env(world, env),
    )  # fmt: skip


# ------------------------------------------------------------------ suites (list and plan)

SUITE = st.dictionaries(
    st.sampled_from(["profile", "gpus", "est-time", "cmd", "labels", "exclude-labels", "tests",
                     "discover", "slurm", "tset"]),
    st.one_of(
        VALUE,
        st.lists(st.dictionaries(st.sampled_from(["path", "name", "gpus", "est-time", "cmd",
                                                  "labels"]), VALUE, max_size=4), max_size=3),
        st.just({"glob": "t/*.py", "call": "register_rocm_ci", "suite": "s"}),
    ),
    max_size=4,
)  # fmt: skip
CALL_ARG = st.one_of(
    st.sampled_from(["1", "-1", "0", "1e999", "nan", "'s'", "[]", "['a']", "[[1]]", "None",
                     "10**100", "-" * 5000 + "1", "x", "(" * 300 + "1" + ")" * 300]),
    st.integers(-(2**70), 2**70).map(str),
)  # fmt: skip
TEST_FILE = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={k: CALL_ARG for k in ("est_time", "suite", "num_gpus", "gpus", "labels", "x")},
    )
    .map(lambda kw: "register_rocm_ci(" + ", ".join(f"{k}={v}" for k, v in kw.items()) + ")\n")
    .map(str.encode),
    st.binary(max_size=40),
)
HISTORY = st.one_of(
    st.builds(
        lambda v, tests: json.dumps({"history_version": v, "tests": tests}).encode(),
        st.one_of(st.sampled_from([1, 0, 99]), SCALAR),
        st.one_of(st.dictionaries(TEXT, st.fixed_dictionaries({"times": VALUE}), max_size=2),
                  VALUE),
    ),
    st.binary(max_size=30),
)  # fmt: skip


@FUZZ
@given(
    suite=SUITE,
    test_file=st.one_of(st.none(), TEST_FILE),
    history=st.one_of(st.none(), HISTORY),
    argv=st.sampled_from([["suite", "list"], ["suite", "list", "--json", "s"],
                          ["suite", "plan", "s", "--partitions", "2"],
                          ["suite", "plan", "s", "--partitions", "0"],
                          ["suite", "plan", "s", "--json", "--partitions", "99999999999"]]),
)  # fmt: skip
@example(
    suite={"discover": {"glob": "t/*.py", "call": "register_rocm_ci", "suite": "s"}},
    test_file=b"register_rocm_ci(est_time=" + b"-" * 100_000 + b"1)\n",
    history=None, argv=["suite", "list"],
)  # fmt: skip
@example(suite={"tests": [{"path": "t/a.py", "est-time": float("inf")}]}, test_file=None,
         history=None, argv=["suite", "plan", "s"])  # fmt: skip
def test_suite_list_and_plan(
    world: dict[str, Path],
    suite: dict[str, Any],
    test_file: bytes | None,
    history: bytes | None,
    argv: list[str],
) -> None:
    config = (
        render_config({})
        + "[suites.s]\n"
        + "".join(f"{_toml_key(k)} = {_toml_value(v)}\n" for k, v in suite.items())
    )
    project = _write(world, config.encode(), None)
    tests_dir = project / "t"
    tests_dir.mkdir(exist_ok=True)
    for path, data in ((tests_dir / "a.py", test_file),
                       (project / "rocmenv.suite-history.json", history)):  # fmt: skip
        if data is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(data)
    check(argv, project, _env(world, {}))
