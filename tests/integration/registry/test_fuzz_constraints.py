"""Property-based fuzzing of tag constraints against the real registry: `resolve` and `tags
list` of the test family's 2849 tags with hostile `--sglang/--rocm/--gpu/--before/--project`
values and the same keys in a profile. The unit fuzz test stops at a closed port, so values
that only break when tags are compared (a 5000-digit version overflowed ``int()``) need the
registry to answer. The property: an exit code from the docs/commands.md table, no traceback, no
internal error."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support import testenv
from tests.support.cli_fuzz import ARG, check

REPO = f"{testenv.OPEN_REGISTRY}/rocm/sgl-dev"
HUGE = "9" * 5000
VALUES = st.one_of(
    ARG,
    st.sampled_from([HUGE, ">=" + HUGE, "==1." + HUGE, "7.²", "gfx" + HUGE, "0", "7", "7.2.4",
                     ">=0.5.8,<0.6", "mi35x", "GFX950", "20261399", "any", "miles"]),
)  # fmt: skip
FLAGS = st.sampled_from(["--sglang", "--rocm", "--gpu", "--before", "--project"])
FUZZ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _env(tmp: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "ROCMENV_REGISTRY_RETRIES": "0"}


@FUZZ
@given(pairs=st.lists(st.tuples(FLAGS, VALUES), min_size=1, max_size=3), command=st.booleans())
@example(pairs=[("--rocm", HUGE)], command=True)
@example(pairs=[("--sglang", ">=" + HUGE)], command=False)
def test_constraint_flags(
    registry: testenv.OpenRegistry, tmp_path: Path, pairs: list[tuple[str, str]], command: bool
) -> None:
    (tmp_path / ".git").mkdir(exist_ok=True)
    flags = [part for pair in pairs for part in pair]
    argv = ["resolve", REPO, *flags] if command else ["tags", "list", REPO, "--json", *flags]
    check(argv, tmp_path, _env(tmp_path))


@FUZZ
@given(
    profile=st.dictionaries(st.sampled_from(["sglang", "rocm", "gpu", "before", "family"]), VALUES,
                            min_size=1, max_size=3),
)  # fmt: skip
@example(profile={"rocm": HUGE})
@example(profile={"gpu": "gfx" + HUGE, "sglang": "==1." + HUGE})
def test_profile_constraints(
    registry: testenv.OpenRegistry, tmp_path: Path, profile: dict[str, str]
) -> None:
    (tmp_path / ".git").mkdir(exist_ok=True)
    body = "".join(f"{key} = {json.dumps(value)}\n" for key, value in profile.items())
    (tmp_path / "rocmenv.toml").write_text(f'[profiles.p]\nimage = "{REPO}"\n{body}')
    check(["resolve", "--profile", "p"], tmp_path, _env(tmp_path))
