"""Configuration: schema, did-you-mean, precedence, built-in profiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmenv.context import Context
from rocmenv.errors import ConfigError, UsageError
from rocmenv.settings.profiles import BUILTIN_PROFILES
from rocmenv.settings.resolve import settings_for


def ctx_in(path: Path, **env: str) -> Context:
    return Context(cwd=path, env={"HOME": str(path), **env})


def write(path: Path, text: str, name: str = "rocmenv.toml") -> Path:
    (path / name).write_text(text)
    return path / name


def test_no_config_gives_builtins(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    config = settings_for(ctx_in(tmp_path))
    assert config.project.path is None
    assert config.profile.name == "rocm"
    assert {"rocm", "cpu"} <= set(config.project.profile_names)
    assert config.lockfile == tmp_path / "rocmenv.lock"


def test_builtin_rocm_reproduces_reference_options_except_privileged() -> None:
    rocm = BUILTIN_PROFILES["rocm"]
    assert rocm.gpus == "all"
    assert rocm.group_add == ("video", "render")
    assert rocm.cap_add == ("SYS_PTRACE",)
    assert rocm.security_opt == ("seccomp=unconfined",)
    assert (rocm.ipc, rocm.shm_size) == ("host", "32g")
    assert {u.render() for u in rocm.ulimits} == {"memlock=-1", "stack=67108864", "nofile=65535"}
    assert rocm.privileged is False
    assert "HIP_VISIBLE_DEVICES" in rocm.pass_env
    cpu = BUILTIN_PROFILES["cpu"]
    assert (cpu.gpus, cpu.group_add, cpu.cap_add, cpu.security_opt, cpu.ulimits) == (
        "none",
        (),
        (),
        (),
        (),
    )


def test_profile_extends_and_overrides(tmp_path: Path) -> None:
    write(
        tmp_path,
        """
default-profile = "ci"
[profiles.ci]
extends = "rocm"
image = "rocm/sgl-dev"
gpu = "mi35x"
privileged = true
mounts = ["./data:/data:ro", {source = "/nope", target = "/x", optional = true}]
ulimits = { nofile = "1024:2048" }
env = { A = "1" }
[profiles.child]
extends = "ci"
shm-size = "1g"
""",
    )
    config = settings_for(ctx_in(tmp_path))
    ci = config.profile
    assert ci.name == "ci" and ci.privileged and ci.image and ci.image.gpu == "mi35x"
    assert ci.image.repository == "docker.io/rocm/sgl-dev"
    assert ci.mounts[0].source == str(tmp_path / "data") and ci.mounts[0].readonly
    assert ci.mounts[1].optional
    assert [(u.soft, u.hard) for u in ci.ulimits] == [(1024, 2048)]
    child = config.project.profile("child")
    assert child.shm_size == "1g" and child.privileged and child.group_add == ("video", "render")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[profiles.x]\nshm-szie = '1g'", "did you mean 'shm-size'"),
        ("defualt-profile = 'x'", "did you mean 'default-profile'"),
        ("[registry]\nmirors = {}", "did you mean 'mirrors'"),
        ("[profiles.x]\nextends = 'rcom'", "did you mean 'rocm'"),
        ("[profiles.x]\npull = 'sometimes'", "not one of always, missing, never"),
        ("[profiles.x]\nulimits = { nofile = 'lots' }", "is not a ulimit"),
        ("[profiles.x]\nulimits = { nofile = '10:5' }", "must not exceed"),
        ("[profiles.x]\nmounts = ['nocolon']", "is not SRC:DST"),
        ("[profiles.x]\nmounts = ['/a:relative']", "must be an absolute path"),
        ("[profiles.x]\nimage = 'rocm/SGL'", "must be lowercase"),
        (
            "[profiles.x]\nimage = 'rocm/sgl-dev'\ntag = 'rocm/sgl-dev:x'",
            "not a full image reference",
        ),
        (
            "[profiles.x]\nimage = 'rocm/sgl-dev'\ntag = 'x'\ngpu = 'mi30x'",
            "both a tag and tag constraints",
        ),
        ("[profiles.x]\nimage = 'rocm/sgl-dev'\nsglang = '>>1'", "not a PEP 440 specifier"),
        ("[profiles.x]\nextends = 'y'\n[profiles.y]\nextends = 'x'", "extends itself"),
        ("[profiles.x]\npass-env = ['A-B']", "not an environment variable name"),
        ("[profiles.x]\nprivileged = 'yes'", "must be true or false"),
        ("this is = not toml =", "not valid TOML"),
    ],
)
def test_bad_config_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        settings_for(ctx_in(tmp_path))
    assert message in str(info.value)
    assert str(path) in str(info.value) or "TOML" not in message
    assert info.value.exit_code == 2


def test_unknown_profile_did_you_mean(tmp_path: Path) -> None:
    config = settings_for(ctx_in(tmp_path))
    with pytest.raises(UsageError, match="did you mean 'rocm'"):
        config.project.profile("rcom")


def test_pyproject_table_is_found_from_a_subdirectory(tmp_path: Path) -> None:
    write(
        tmp_path, "[project]\nname='x'\n[tool.rocmenv]\ndefault-profile = 'cpu'\n", "pyproject.toml"
    )
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    config = settings_for(ctx_in(sub))
    assert config.project.path == tmp_path / "pyproject.toml"
    assert config.profile.name == "cpu"
    assert config.lockfile == tmp_path / "rocmenv.lock"


def test_environment_overrides_file_and_cli_overrides_environment(tmp_path: Path) -> None:
    write(
        tmp_path,
        "default-profile = 'rocm'\nengine = 'docker-api'\n[registry]\nmirrors = {'docker.io' = ['m1']}\n",
    )
    env = {
        "ROCMENV_PROFILE": "cpu",
        "ROCMENV_ENGINE": "docker-cli",
        "ROCMENV_MIRRORS": "docker.io=127.0.0.1:5000",
    }
    ctx = ctx_in(tmp_path, **env)
    config = settings_for(ctx)
    assert config.profile.name == "cpu"
    assert config.project.engine == "docker-api"  # the file's own value; the environment wins:
    assert config.engine == "docker-cli" and config.origins["engine"] == "env"
    assert config.registry.mirrors_for("docker.io") == ("127.0.0.1:5000",)
    other = tmp_path / "other.toml"
    other.write_text("default-profile = 'rocm'\n")
    cli = Context(cwd=tmp_path, env={"HOME": str(tmp_path)}, config_path=other)
    assert settings_for(cli).project.path == other


def test_pull_from_mirror_from_the_environment_over_the_file(tmp_path: Path) -> None:
    write(tmp_path, "[registry]\npull-from-mirror = false\n")
    assert settings_for(ctx_in(tmp_path, ROCMENV_PULL_FROM_MIRROR="yes")).registry.pull_from_mirror
    write(tmp_path, "[registry]\npull-from-mirror = true\n")
    assert not settings_for(
        ctx_in(tmp_path, ROCMENV_PULL_FROM_MIRROR="0")
    ).registry.pull_from_mirror
    with pytest.raises(ConfigError, match="ROCMENV_PULL_FROM_MIRROR='maybe'"):
        settings_for(ctx_in(tmp_path, ROCMENV_PULL_FROM_MIRROR="maybe"))


def test_bad_environment_values_are_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="ROCMENV_ENGINE"):
        settings_for(ctx_in(tmp_path, ROCMENV_ENGINE="dockr"))
    with pytest.raises(ConfigError, match="ROCMENV_MIRRORS"):
        settings_for(ctx_in(tmp_path, ROCMENV_MIRRORS="nonsense"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[registry]\nlimits = { tgas = 1 }", "did you mean 'tags'"),
        ("[registry]\nlimits = { tags = 0 }", "limits.tags must be a number of bytes"),
        ("[registry]\ncommand-deadline = -1", "command-deadline must be a number of seconds"),
        ("[registry]\nmax-pages = 'many'", "max-pages must be an integer"),
        ("[registry]\nproxy = 3128", "proxy must be a URL string"),
        ("[registry]\npull-from-mirror = 'yes'", "pull-from-mirror must be true or false"),
    ],
)
def test_bad_registry_settings_are_clear_errors(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path, text)
    with pytest.raises(ConfigError, match=message):
        settings_for(ctx_in(tmp_path))


def test_registry_settings_are_read(tmp_path: Path) -> None:
    write(
        tmp_path,
        "[registry]\nlimits = { tags = 1000 }\nrequest-deadline = 5\ncommand-deadline = 9\n"
        "max-pages = 3\nproxy = 'http://p:1'\nno-proxy = ['a']\npull-from-mirror = true\n"
        "ratelimit-warning = 50\n",
    )
    reg = settings_for(ctx_in(tmp_path)).registry
    assert reg.limit("tags") == 1000 and reg.limit("manifest") == 4 * 1024 * 1024
    assert (reg.request_deadline, reg.command_deadline, reg.max_pages) == (5.0, 9.0, 3)
    assert reg.proxy == "http://p:1" and reg.no_proxy == ("a",) and reg.pull_from_mirror
    assert reg.ratelimit_warning == 50


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_registry_deadline_and_timeout_from_the_environment_must_be_finite(
    tmp_path: Path, value: str
) -> None:
    for name in ("ROCMENV_REGISTRY_TIMEOUT", "ROCMENV_REGISTRY_DEADLINE"):
        with pytest.raises(ConfigError, match=name):
            settings_for(ctx_in(tmp_path, **{name: value}))
