"""``--untrusted`` and ``ROCMENV_UNTRUSTED=1`` are one switch: for the same hostile checkout
they give byte-identical specs, ``options`` output in every format, and Slurm command lines
(``run --backend slurm`` and ``suite run --backend slurm``, recorded by a fake ``srun``)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from rocmenv.cli import main
from rocmenv.container.plan import PlanRequest, plan
from rocmenv.container.runspec import Overrides
from rocmenv.context import Context
from rocmenv.settings.resolve import Flags, settings_for
from tests.support.fakegpu import FakeHost, build_fake_host
from tests.support.hostile import SECRETS, write_checkout

# The fork's own [slurm] and [suites.s.slurm]: a prolog that runs on the submitting host, and a
# partition with a newline that would become a line of its own in an sbatch script.
HOSTILE_TOP = {
    "slurm": {"partition": "gpu", "account": "victim", "extra-args": ["--prolog=./evil.sh"]},
    "suites": {
        "s": {"profile": "evil", "tests": [{"path": "t.py", "gpus": 1}],
              "slurm": {"account": "admin", "extra-args": ["--uid=0"]}},
    },
}  # fmt: skip


@pytest.fixture
def fake(tmp_path: Path) -> FakeHost:
    return build_fake_host(tmp_path / "host", char_devices=False)


@pytest.fixture
def fork(tmp_path: Path) -> Path:
    root = write_checkout(tmp_path / "fork", {"ipc": "host", "pass-env": sorted(SECRETS)},
                          top=HOSTILE_TOP)  # fmt: skip
    (root / "t.py").write_text("")
    return root


@pytest.fixture
def slurm_bin(tmp_path: Path) -> Path:
    """Fake srun/salloc/sinfo/scancel/squeue: srun and salloc record their argv (one file
    per call); salloc grants allocation 4242."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "srun": '#!/bin/sh\nn=$(ls "$ARGV_DIR" | wc -l)\nprintf "%s\\0" "$@" > "$ARGV_DIR/$n"\n',
        "salloc": '#!/bin/sh\nn=$(ls "$ARGV_DIR" | wc -l)\nprintf "%s\\0" salloc "$@" > "$ARGV_DIR/$n"\n'
        "echo 'salloc: Granted job allocation 4242' >&2\n",
        "sinfo": "#!/bin/sh\necho 'gpu:mi300x:8'\n",
        "scancel": "#!/bin/sh\nexit 0\n",
        "squeue": "#!/bin/sh\nexit 0\n",
    }
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def cli(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    cwd: Path,
    env: dict[str, str],
    *argv: str,
) -> tuple[int, str, str]:
    for key in list(os.environ):
        if key.startswith("ROCMENV_") or key in SECRETS:
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(cwd)
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def both(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    cwd: Path,
    env: dict[str, str],
    *argv: str,
) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """The command once with the flag, once with the variable."""
    by_flag = cli(monkeypatch, capsys, cwd, env, *argv, "--untrusted")
    by_env = cli(monkeypatch, capsys, cwd, {**env, "ROCMENV_UNTRUSTED": "1"}, *argv)
    return by_flag, by_env


@pytest.mark.parametrize(
    "options",
    [
        ["--format", "docker"],
        ["--format", "gha"],
        ["--format", "compose"],
        ["--format", "sbatch"],
        ["--format", "docker", "--json"],
        ["--format", "sbatch", "--json"],
    ],
)
def test_options_output_is_byte_identical(
    options: list[str],
    fork: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {**fake.env(), **SECRETS, "PATH": os.environ["PATH"]}
    (code_f, out_f, err_f), (code_e, out_e, err_e) = both(
        monkeypatch, capsys, fork, env, "options", "--gpus", "0-1", *options
    )
    assert (code_f, out_f, err_f) == (code_e, out_e, err_e)
    assert code_f == 0, err_f
    assert "ignored from the checkout's rocmenv.toml: [slurm]" in err_f
    for hostile in ("--prolog", "victim", "admin", "--uid=0", *SECRETS.values()):
        assert hostile not in out_f


def test_the_planned_specs_are_identical(fork: Path, fake: FakeHost) -> None:
    env = {**fake.env(), **SECRETS}
    request = PlanRequest(overrides=Overrides(gpus="0-1"), needs_image=False,
                          resolve_constraints=False)  # fmt: skip
    specs = []
    for flags, extra in ((Flags(untrusted=True), {}), (Flags(), {"ROCMENV_UNTRUSTED": "1"})):
        ctx = Context(env={**env, **extra}, cwd=fork)
        specs.append(plan(ctx, settings_for(ctx, flags), request).spec)
    assert specs[0] == specs[1]
    assert specs[0].untrusted and specs[0].ipc == "private"


def _argvs(directory: Path) -> list[list[str]]:
    out = []
    for path in sorted(directory.iterdir(), key=lambda p: int(p.name)):
        argv = path.read_bytes().split(b"\0")[:-1]
        # job names carry a random session: the only difference allowed
        out.append(
            [re.sub(r"rocmenv-(run-)?[0-9a-f]{8}", "rocmenv-SESSION", a.decode()) for a in argv]
        )
    return out


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--backend", "slurm", "--gpus", "0-1", "--", "true"],
        ["suite", "run", "s", "--backend", "slurm", "--no-learn"],
    ],
    ids=["run", "suite-run"],
)
def test_slurm_command_lines_are_byte_identical_and_carry_nothing_of_the_fork(
    command: list[str],
    fork: Path,
    fake: FakeHost,
    slurm_bin: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    recorded = []
    for how in ("flag", "env"):
        argv_dir = tmp_path / f"argv-{how}"
        argv_dir.mkdir()
        env = {**fake.env(), "PATH": f"{slurm_bin}:{os.environ['PATH']}",
               "ARGV_DIR": str(argv_dir)}  # fmt: skip
        if how == "flag":
            where = command.index("--") if "--" in command else len(command)
            flagged = [*command[:where], "--untrusted", *command[where:]]
            code, _out, err = cli(monkeypatch, capsys, fork, env, *flagged)
        else:
            code, _out, err = cli(monkeypatch, capsys, fork, {**env, "ROCMENV_UNTRUSTED": "1"},
                                  *command)  # fmt: skip
        assert code == 0, err
        recorded.append(_argvs(argv_dir))
    assert recorded[0] == recorded[1]
    assert recorded[0], "srun was never called"
    if command[0] == "suite":  # the suite's one allocation, then its steps
        assert recorded[0][0][0] == "salloc" and "--jobid=4242" in recorded[0][1]
    for argv in recorded[0]:
        line = " ".join(argv)
        assert argv[0] == "salloc" or "--untrusted" in argv  # the node side is untrusted too
        for hostile in ("--prolog", "victim", "admin", "--uid=0", "--partition"):
            assert hostile not in line
