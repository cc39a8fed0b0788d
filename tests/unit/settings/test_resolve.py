"""Every setting by every source (docs/configuration.md "Precedence"): the cascade flag >
ROCMENV_* > profile > site > project file > default, proved level by level; untrusted mode on from any source,
with the checkout's [registry], [host], [slurm], [suites.*.slurm] and lockfile rules applied
identically whichever source switched it on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rocmenv.context import Context
from rocmenv.errors import ConfigError
from rocmenv.settings.resolve import CASCADE, Flags, Settings, settings_for
from rocmenv.settings.slurm import SlurmSettings

# Every level of every setting says something different (the profile "p" is the default).
PROJECT = """
default-profile = "p"
engine = "docker-cli"
lockfile = "from-file.lock"

[registry]
mirrors = { "docker.io" = ["file-mirror.example:5000"] }
insecure = ["file-insecure.example:5000"]
timeout = 11
retries = 7
command-deadline = 111

[host]
sysfs-root = "file-sys"
dev-root = "file-dev"

[slurm]
partition = "file-partition"
extra-args = ["--prolog=./evil.sh"]

[profiles.p]
extends = "cpu"
engine = "podman"
pull = "always"
shims = false

[profiles.q]
extends = "cpu"

[profiles.u]
extends = "cpu"
untrusted = true

[suites.s]
tests = [{ path = "t.py" }]
[suites.s.slurm]
account = "file-account"
"""

ENV = {
    "ROCMENV_PROFILE": "q",
    "ROCMENV_ENGINE": "docker-api",
    "ROCMENV_LOCKFILE": "env.lock",
    "ROCMENV_DISK_RESERVE": "3g",
    "ROCMENV_MIRRORS": "docker.io=env-mirror.example:5000",
    "ROCMENV_INSECURE_REGISTRIES": "env-insecure.example:5000",
    "ROCMENV_REGISTRY_TIMEOUT": "22",
    "ROCMENV_REGISTRY_RETRIES": "3",
    "ROCMENV_REGISTRY_DEADLINE": "222",
    "ROCMENV_SYSFS_ROOT": "/env-sys",
    "ROCMENV_DEV_ROOT": "/env-dev",
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "rocmenv.toml").write_text(PROJECT)
    (root / "t.py").write_text("")
    return root


@pytest.fixture
def bare(tmp_path: Path) -> Path:
    root = tmp_path / "bare"
    (root / ".git").mkdir(parents=True)
    return root


def resolved(root: Path, flags: Flags | None = None, /, **env: str) -> Settings:
    return settings_for(Context(env={"HOME": str(root), **env}, cwd=root), flags)


# -- the table: one row per (setting, level); each row removes the levels above it ---------

# (setting, level, flags, env, expected value (a function of the project root), origin)
ROWS: list[tuple[str, str, dict[str, Any], dict[str, str], Any, str]] = [
    ("profile", "flag", {"profile": "u"}, ENV, lambda r: "u", "flag"),
    ("profile", "env", {}, ENV, lambda r: "q", "env"),
    ("profile", "project", {}, {}, lambda r: "p", "project"),
    ("engine", "flag", {"engine": "docker-cli"}, ENV, lambda r: "docker-cli", "flag"),
    ("engine", "flag auto defers", {"engine": "auto"}, ENV, lambda r: "docker-api", "env"),
    ("engine", "env", {}, ENV, lambda r: "docker-api", "env"),
    ("engine", "profile", {}, {}, lambda r: "podman", "profile"),
    ("engine", "project", {"profile": "q"}, {}, lambda r: "docker-cli", "project"),
    ("pull", "flag", {"pull": "never"}, {}, lambda r: "never", "flag"),
    ("pull", "profile", {}, {}, lambda r: "always", "profile"),
    ("pull", "default", {"profile": "q"}, {}, lambda r: "missing", "default"),
    ("shims", "flag", {"profile": "q", "shims": False}, {}, lambda r: False, "flag"),
    ("shims", "profile", {}, {}, lambda r: False, "profile"),
    ("shims", "default", {"profile": "q"}, {}, lambda r: True, "default"),
    ("lockfile", "flag", {"lockfile": Path("flag.lock")}, ENV, lambda r: r / "flag.lock", "flag"),
    ("lockfile", "env", {}, ENV, lambda r: r / "env.lock", "env"),
    ("lockfile", "project", {}, {}, lambda r: r / "from-file.lock", "project"),
    ("disk-reserve", "flag", {"reserve": "5g"}, ENV, lambda r: 5 << 30, "flag"),
    ("disk-reserve", "env", {}, ENV, lambda r: 3 << 30, "env"),
    ("disk-reserve", "default", {}, {}, lambda r: 2 << 30, "default"),
]


def value_of(settings: Settings, setting: str) -> Any:
    return {
        "profile": settings.profile.name,
        "engine": settings.engine,
        "pull": settings.pull,
        "shims": settings.shims,
        "lockfile": settings.lockfile,
        "disk-reserve": settings.disk_reserve,
    }[setting]


@pytest.mark.parametrize(
    ("setting", "level", "flags", "env", "expected", "origin"),
    ROWS,
    ids=[f"{r[0]}-{r[1]}" for r in ROWS],
)
def test_each_setting_comes_from_the_highest_level_that_says_something(
    project: Path,
    setting: str,
    level: str,
    flags: dict[str, Any],
    env: dict[str, str],
    expected: Any,
    origin: str,
) -> None:
    settings = resolved(project, Flags(**flags), **env)
    assert value_of(settings, setting) == expected(project)
    assert settings.origins[setting] == origin


def test_the_defaults_without_any_file(bare: Path) -> None:
    settings = resolved(bare)
    assert (settings.profile.name, settings.engine, settings.pull, settings.shims) == (
        "rocm", "auto", "missing", True,
    )  # fmt: skip
    assert settings.lockfile == bare / "rocmenv.lock"
    assert settings.disk_reserve == 2 << 30
    assert settings.slurm == SlurmSettings() and settings.policy is None
    assert all(
        settings.origins[name] == "default"
        for name in ("profile", "engine", "pull", "shims", "lockfile", "registry", "host")
    )


# registry fields: ROCMENV_* > [registry] > default, field by field
REGISTRY_FIELDS = [
    ("mirrors", "ROCMENV_MIRRORS", (("docker.io", ("env-mirror.example:5000",)),),
     (("docker.io", ("file-mirror.example:5000",)),), ()),
    ("insecure", "ROCMENV_INSECURE_REGISTRIES", ("env-insecure.example:5000",),
     ("file-insecure.example:5000",), ()),
    ("timeout", "ROCMENV_REGISTRY_TIMEOUT", 22.0, 11.0, 30.0),
    ("retries", "ROCMENV_REGISTRY_RETRIES", 3, 7, 4),
    ("command_deadline", "ROCMENV_REGISTRY_DEADLINE", 222.0, 111.0, 600.0),
]  # fmt: skip


@pytest.mark.parametrize(("field", "variable", "from_env", "from_file", "default"), REGISTRY_FIELDS)
def test_each_registry_setting_env_over_file_over_default(
    project: Path,
    bare: Path,
    field: str,
    variable: str,
    from_env: Any,
    from_file: Any,
    default: Any,
) -> None:
    assert getattr(resolved(project, **{variable: ENV[variable]}).registry, field) == from_env
    assert getattr(resolved(project).registry, field) == from_file
    assert getattr(resolved(bare).registry, field) == default
    # one variable changes its own field only
    others = resolved(project, **{variable: ENV[variable]}).registry
    for name, *_rest in REGISTRY_FIELDS:
        if name != field:
            assert getattr(others, name) == getattr(resolved(project).registry, name)


def test_host_roots_env_over_file_over_default(project: Path, bare: Path) -> None:
    env = {"ROCMENV_SYSFS_ROOT": "/env-sys", "ROCMENV_DEV_ROOT": "/env-dev"}
    assert (resolved(project, **env).host.sysfs_root, resolved(project, **env).host.dev_root) == (
        Path("/env-sys"), Path("/env-dev"),
    )  # fmt: skip
    host = resolved(project).host
    assert (host.sysfs_root, host.dev_root) == (project / "file-sys", project / "file-dev")
    assert resolved(bare).host.sysfs_root == Path("/sys")
    assert resolved(project, **env).origins["host"] == "env"
    assert resolved(project).origins["host"] == "project"


def test_slurm_from_the_file_and_per_suite_over_it(project: Path, bare: Path) -> None:
    settings = resolved(project)
    assert settings.slurm.partition == "file-partition"
    assert settings.slurm_for("s").account == "file-account"
    assert settings.slurm_for("s").partition == "file-partition"  # key by key
    assert resolved(bare).slurm == SlurmSettings()


# -- untrusted mode --------------------------------------------------------------------------

UNTRUSTED_SOURCES = {
    "flag": (Flags(untrusted=True), {}),
    "env": (Flags(), {"ROCMENV_UNTRUSTED": "1"}),
    "profile": (Flags(profile="u"), {}),
}


@pytest.mark.parametrize("source", sorted(UNTRUSTED_SOURCES))
def test_any_source_turns_untrusted_mode_on_and_distrusts_the_checkouts_file(
    project: Path, source: str
) -> None:
    flags, env = UNTRUSTED_SOURCES[source]
    settings = resolved(project, flags, **env)
    assert settings.untrusted and settings.distrusted
    assert settings.origins["untrusted"] == source
    assert settings.registry.mirrors == () and settings.registry.insecure == ()
    assert settings.registry.timeout == 30.0 and settings.registry.retries == 4
    assert settings.host.sysfs_root == Path("/sys") and settings.host.dev_root == Path("/dev")
    assert settings.slurm == SlurmSettings() and settings.slurm_for("s") == SlurmSettings()
    assert settings.policy is not None
    notes = " ".join(settings.notes)
    assert "[registry] and [host]" in notes and "[slurm], [suites.s.slurm]" in notes
    # trusted input (the environment) still counts
    trusted_env = resolved(project, flags, **env, ROCMENV_MIRRORS="docker.io=m.example:1")
    assert trusted_env.registry.mirrors == (("docker.io", ("m.example:1",)),)


def test_the_flag_the_variable_and_the_profile_resolve_identically(project: Path) -> None:
    """Apart from where untrusted mode came from, the three give the same settings."""
    results = []
    for flags, env in UNTRUSTED_SOURCES.values():
        settings = resolved(project, replace(flags, profile="u"), **env)
        results.append(replace(settings, origins={}))
    assert results[0] == results[1] == results[2]


def test_nothing_turns_untrusted_mode_off(project: Path) -> None:
    for env in ({"ROCMENV_UNTRUSTED": "0"}, {}):
        assert resolved(project, Flags(profile="u"), **env).untrusted
    assert resolved(project, Flags(untrusted=True), ROCMENV_UNTRUSTED="no").untrusted


def test_untrusted_lockfile_of_the_checkout_must_stay_inside(project: Path) -> None:
    text = (project / "rocmenv.toml").read_text()
    (project / "rocmenv.toml").write_text(text.replace('"from-file.lock"', '"../out.lock"'))
    for flags, env in UNTRUSTED_SOURCES.values():
        with pytest.raises(ConfigError, match="outside the project"):
            resolved(project, flags, **env)
    # a lockfile from trusted input (the variable, the flag) may be anywhere
    outside = str(project.parent / "out.lock")
    assert resolved(project, Flags(untrusted=True), ROCMENV_LOCKFILE=outside).lockfile == Path(
        outside
    )
    flags = Flags(untrusted=True, lockfile=Path(outside))
    assert resolved(project, flags).lockfile == Path(outside)
    assert (
        resolved(project).lockfile.resolve() == project.parent / "out.lock"
    )  # trusted: as written


def test_a_trusted_file_outside_the_checkout_keeps_its_settings_in_untrusted_mode(
    project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "base.toml"
    outside.write_text(PROJECT)
    settings = resolved(project, Flags(untrusted=True), ROCMENV_CONFIG=str(outside))
    assert settings.untrusted and not settings.distrusted
    assert settings.slurm.partition == "file-partition"
    assert settings.registry.timeout == 11.0


def test_the_cascade_table_names_every_setting_resolved() -> None:
    assert set(CASCADE) >= {
        "profile", "engine", "pull", "shims", "lockfile", "disk-reserve", "untrusted",
        "registry", "host", "slurm", "policy",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("partition", '"gpu\\n#SBATCH --wrap=\\"id\\""'),
        ("account", '"ml\\r"'),
        ("extra-args", '["--qos=ci\\n--prolog=./evil.sh"]'),
        ("gres-conf", '"/etc/slurm/gres.conf\\u0007"'),
    ],
)
def test_a_control_character_in_a_slurm_setting_is_refused_in_every_mode(
    bare: Path, key: str, value: str
) -> None:
    """A newline in a [slurm] value would be a line of its own in an sbatch script."""
    (bare / "rocmenv.toml").write_text(f"[slurm]\n{key} = {value}\n")
    with pytest.raises(ConfigError, match="control character") as info:
        resolved(bare)
    assert key in str(info.value)


# -- what each decision says (origins, notes, errors): what `config show --origin` relies on --


def test_the_origin_of_slurm_policy_registry_and_host(project: Path, bare: Path) -> None:
    assert resolved(project).origins["slurm"] == "project"
    assert resolved(bare).origins["slurm"] == "default"
    assert resolved(project, Flags(untrusted=True)).origins["slurm"] == "default"
    assert resolved(bare).origins["policy"] == "default"
    assert resolved(bare, Flags(untrusted=True)).origins["policy"] == "default"
    policy = bare.parent / "policy.toml"
    policy.write_text('cap-add = ["SYS_PTRACE"]\n')
    env = {"ROCMENV_POLICY": str(policy)}
    assert resolved(bare, Flags(untrusted=True), **env).origins["policy"] == "env"
    assert resolved(bare, **env).origins["policy"] == "default"  # read only when untrusted
    for variable in ("ROCMENV_MIRRORS", "ROCMENV_INSECURE_REGISTRIES", "ROCMENV_REGISTRY_TIMEOUT",
                     "ROCMENV_REGISTRY_RETRIES", "ROCMENV_REGISTRY_DEADLINE"):  # fmt: skip
        assert resolved(bare, **{variable: ENV[variable]}).origins["registry"] == "env"
    assert resolved(project).origins["registry"] == "project"
    assert resolved(bare).origins["registry"] == "default"
    assert resolved(bare).origins["host"] == "default"


def test_one_host_root_from_the_environment_keeps_the_other(project: Path) -> None:
    sysfs_only = resolved(project, ROCMENV_SYSFS_ROOT="/env-sys").host
    assert (sysfs_only.sysfs_root, sysfs_only.dev_root) == (Path("/env-sys"), project / "file-dev")
    dev_only = resolved(project, ROCMENV_DEV_ROOT="/env-dev").host
    assert (dev_only.sysfs_root, dev_only.dev_root) == (project / "file-sys", Path("/env-dev"))


def test_the_notes_say_exactly_what_was_ignored(project: Path, bare: Path) -> None:
    assert resolved(project).notes == ()
    assert resolved(bare, Flags(untrusted=True)).notes == ()  # nothing of a checkout was read
    assert resolved(project, Flags(untrusted=True)).notes == (
        "ignored from the checkout's rocmenv.toml: [registry] and [host] (mirrors, insecure "
        "registries and host roots come only from trusted input)",
        "ignored from the checkout's rocmenv.toml: [slurm], [suites.s.slurm] (partition, account "
        "and srun/sbatch arguments come only from trusted input)",
    )


def test_a_suite_that_is_not_a_table_has_the_top_level_slurm_settings(bare: Path) -> None:
    from rocmenv.settings.project import Project

    project = Project(path=None, root=bare, suites={"s": "slurm", "t": {"tests": []}},
                      slurm={"partition": "p"})  # fmt: skip
    settings = settings_for(Context(env={}, cwd=bare), project=project)
    assert settings.slurm_for("s") == settings.slurm_for("t") == settings.slurm
    assert settings.slurm.partition == "p"


def test_a_bad_default_profile_is_named_even_when_a_flag_or_variable_picks_another(
    project: Path,
) -> None:
    from rocmenv.errors import UsageError

    text = (
        (project / "rocmenv.toml")
        .read_text()
        .replace('default-profile = "p"', 'default-profile = "pp"')
    )
    (project / "rocmenv.toml").write_text(text)
    with pytest.raises(UsageError, match=r"unknown profile 'pp'.*did you mean 'p'"):
        resolved(project, Flags(profile="q"))
    assert resolved(project, ROCMENV_PROFILE="q").profile.name == "q"  # the variable replaces it
    with pytest.raises(UsageError, match="unknown profile 'qq'"):
        resolved(project, Flags(profile="q"), ROCMENV_PROFILE="qq")


def test_errors_say_what_to_do(project: Path) -> None:
    from rocmenv.errors import UsageError

    with pytest.raises(UsageError) as info:
        resolved(project, ROCMENV_ENGINE="dockr")
    assert info.value.hint == "use one of: auto, docker-api, docker-cli, podman"
    text = (project / "rocmenv.toml").read_text()
    (project / "rocmenv.toml").write_text(text.replace('"from-file.lock"', '"/elsewhere.lock"'))
    with pytest.raises(ConfigError) as refused:
        resolved(project, Flags(untrusted=True))
    assert str(refused.value) == (
        f"lockfile in {project / 'rocmenv.toml'} points outside the project (/elsewhere.lock): "
        "refused in untrusted mode\nhint: keep rocmenv.lock inside the project, or name a "
        "lockfile from trusted input (ROCMENV_LOCKFILE)"
    )


def test_a_policy_file_inside_the_checkout_is_refused(project: Path) -> None:
    (project / "policy.toml").write_text('cap-add = ["ALL"]\n')
    env = {"ROCMENV_POLICY": str(project / "policy.toml")}
    with pytest.raises(ConfigError, match="inside the checkout"):
        resolved(project, Flags(untrusted=True), **env)
    with pytest.raises(ConfigError, match="inside the checkout"):
        (project / "sub").mkdir()
        resolved(project / "sub", Flags(untrusted=True), **env)


def test_a_relative_lockfile_from_the_flag_or_the_variable_is_the_working_directorys(
    project: Path,
) -> None:
    sub = project / "sub"
    sub.mkdir()
    ctx = Context(env={"HOME": str(project)}, cwd=sub)
    assert settings_for(ctx, Flags(lockfile=Path("x.lock"))).lockfile == sub / "x.lock"
    ctx = Context(env={"HOME": str(project), "ROCMENV_LOCKFILE": "y.lock"}, cwd=sub)
    assert settings_for(ctx).lockfile == sub / "y.lock"
    assert settings_for(Context(env={}, cwd=sub)).lockfile == project / "from-file.lock"


def test_trusted_mode_says_so_in_the_origins(bare: Path) -> None:
    assert resolved(bare).origins["untrusted"] == "default"


def test_a_distrusted_file_with_only_a_registry_table_gets_one_note(bare: Path) -> None:
    (bare / "rocmenv.toml").write_text(
        '[registry]\nmirrors = { "docker.io" = ["m.example:1"] }\n[suites.s]\ntests = []\n'
    )
    notes = resolved(bare, Flags(untrusted=True)).notes
    assert len(notes) == 1 and "[registry]" in notes[0] and "[host]" not in notes[0]


@pytest.mark.parametrize(
    ("table", "where"),
    [
        ('[slurm]\ngpu-request = "gress"\n', "[slurm] in "),
        ('[suites.s]\ntests = []\n[suites.s.slurm]\ngpu-request = "gress"\n',
         "[suites.s.slurm] in "),
        ("[host]\nsysfs = 1\n", "[host] in "),
    ],
)  # fmt: skip
def test_a_bad_table_is_named_with_its_file(bare: Path, table: str, where: str) -> None:
    (bare / "rocmenv.toml").write_text(table)
    with pytest.raises(ConfigError) as info:
        resolved(bare).slurm_for("s")
    assert f"{where}{bare / 'rocmenv.toml'}" in str(info.value)


def test_only_suite_tables_with_a_slurm_table_are_named_as_ignored(bare: Path) -> None:
    (bare / "rocmenv.toml").write_text('[suites]\ns = "slurm"\n[suites.t.slurm]\naccount = "x"\n')
    (note,) = resolved(bare, Flags(untrusted=True)).notes
    assert "[suites.t.slurm]" in note and "[suites.s.slurm]" not in note and "[slurm]," not in note


# -- the site and user files: env > site > user > project > default, key by key -------------

SITE = """
engine = "podman"
[registry]
mirrors = { "docker.io" = ["site-mirror.example:5000"] }
insecure = ["site-insecure.example:5000"]
timeout = 33
retries = 9
command-deadline = 333
[host]
sysfs-root = "/site-sys"
dev-root = "/site-dev"
[slurm]
partition = "site-partition"
account = "site-account"
[policy]
cap-add = ["SYS_NICE"]
mount-sources = ["/site-data"]
[profiles.sitewide]
extends = "cpu"
image = "site.example/rocm/sgl-dev"
"""

USER = """
engine = "docker-api"
[registry]
mirrors = { "docker.io" = ["user-mirror.example:5000"] }
insecure = ["user-insecure.example:5000"]
timeout = 44
retries = 10
command-deadline = 444
[host]
sysfs-root = "/user-sys"
dev-root = "/user-dev"
[slurm]
partition = "user-partition"
account = "user-account"
[policy]
cap-add = ["SYS_ADMIN"]
mount-sources = ["/user-data"]
"""


@pytest.fixture
def site_env(tmp_path: Path) -> dict[str, dict[str, str]]:
    """Environments naming both files, the site file only, the user file only."""
    site = tmp_path / "etc" / "config.toml"
    user = tmp_path / "xdg" / "rocmenv" / "config.toml"
    for path, text in ((site, SITE), (user, USER)):
        path.parent.mkdir(parents=True)
        path.write_text(text)
    both = {"ROCMENV_SITE_CONFIG": str(site), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    return {
        "both": both,
        "user": {**both, "ROCMENV_SITE_CONFIG": ""},
        "site": {**both, "XDG_CONFIG_HOME": str(tmp_path / "no-xdg")},
    }


# (field, env variable, env value, site value, user value, project value, default)
SITE_REGISTRY_FIELDS = [
    ("mirrors", (("docker.io", ("env-mirror.example:5000",)),),
     (("docker.io", ("site-mirror.example:5000",)),),
     (("docker.io", ("user-mirror.example:5000",)),),
     (("docker.io", ("file-mirror.example:5000",)),), ()),
    ("insecure", ("env-insecure.example:5000",), ("site-insecure.example:5000",),
     ("user-insecure.example:5000",), ("file-insecure.example:5000",), ()),
    ("timeout", 22.0, 33.0, 44.0, 11.0, 30.0),
    ("retries", 3, 9, 10, 7, 4),
    ("command-deadline", 222.0, 333.0, 444.0, 111.0, 600.0),
]  # fmt: skip
VARIABLE_OF = {"mirrors": "ROCMENV_MIRRORS", "insecure": "ROCMENV_INSECURE_REGISTRIES",
               "timeout": "ROCMENV_REGISTRY_TIMEOUT", "retries": "ROCMENV_REGISTRY_RETRIES",
               "command-deadline": "ROCMENV_REGISTRY_DEADLINE"}  # fmt: skip


@pytest.mark.parametrize("row", SITE_REGISTRY_FIELDS, ids=[r[0] for r in SITE_REGISTRY_FIELDS])
def test_each_registry_key_env_over_site_over_user_over_project_over_default(
    project: Path, bare: Path, site_env: dict[str, dict[str, str]], row: tuple[Any, ...]
) -> None:
    key, from_env, from_site, from_user, from_file, default = row
    attr = key.replace("-", "_")
    variable = VARIABLE_OF[key]
    levels = [
        (resolved(project, **site_env["both"], **{variable: ENV[variable]}), from_env, "env"),
        (resolved(project, **site_env["both"]), from_site, "site"),
        (resolved(project, **site_env["user"]), from_user, "user"),
        (resolved(project), from_file, "project"),
        (resolved(bare), default, "default"),
    ]
    for settings, expected, origin in levels:
        assert getattr(settings.registry, attr) == expected, origin
        assert settings.origins.get(f"registry.{key}", "default") == origin


def test_a_site_file_fills_in_what_the_user_file_does_not_say(bare: Path, tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text('[registry]\ntimeout = 55\n[slurm]\npartition = "site-p"\n')
    user = tmp_path / "xdg" / "rocmenv" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[registry]\nretries = 2\ntimeout = 66\n[slurm]\naccount = "user-a"\n')
    settings = resolved(bare, ROCMENV_SITE_CONFIG=str(site), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    assert (settings.registry.timeout, settings.registry.retries) == (55.0, 2)
    assert (settings.slurm.partition, settings.slurm.account) == ("site-p", "user-a")
    assert settings.origins["registry.timeout"] == "site"
    assert settings.origins["registry.retries"] == "user"
    assert settings.origins["registry"] == "site"  # a table: its highest level


def test_engine_env_over_profile_over_site_over_user_over_project(
    project: Path, site_env: dict[str, dict[str, str]]
) -> None:
    q = Flags(profile="q")  # a profile without an engine of its own
    assert (
        resolved(project, q, **site_env["both"], ROCMENV_ENGINE="docker-cli").engine == "docker-cli"
    )
    assert resolved(project, Flags(profile="p"), **site_env["both"]).engine == "podman"
    settings = resolved(project, q, **site_env["both"])
    assert (settings.engine, settings.origins["engine"]) == ("podman", "site")
    settings = resolved(project, q, **site_env["user"])
    assert (settings.engine, settings.origins["engine"]) == ("docker-api", "user")
    settings = resolved(project, q)
    assert (settings.engine, settings.origins["engine"]) == ("docker-cli", "project")


def test_host_roots_env_over_site_over_user_over_project(
    project: Path, site_env: dict[str, dict[str, str]]
) -> None:
    def roots(settings: Settings) -> tuple[Path, Path]:
        return settings.host.sysfs_root, settings.host.dev_root

    env = {"ROCMENV_SYSFS_ROOT": "/env-sys", "ROCMENV_DEV_ROOT": "/env-dev"}
    assert roots(resolved(project, **site_env["both"], **env)) == (
        Path("/env-sys"),
        Path("/env-dev"),
    )
    assert roots(resolved(project, **site_env["both"])) == (Path("/site-sys"), Path("/site-dev"))
    assert roots(resolved(project, **site_env["user"])) == (Path("/user-sys"), Path("/user-dev"))
    settings = resolved(project, **site_env["user"])
    assert settings.origins["host.sysfs-root"] == settings.origins["host"] == "user"


def test_slurm_site_over_user_over_the_suite_over_the_project(
    project: Path, site_env: dict[str, dict[str, str]]
) -> None:
    settings = resolved(project, **site_env["both"])
    assert (settings.slurm.partition, settings.slurm.account) == ("site-partition", "site-account")
    assert settings.slurm_for("s").account == "site-account"  # over [suites.s.slurm]
    assert settings.slurm.extra_args == ("--prolog=./evil.sh",)  # the project's, not said above
    user = resolved(project, **site_env["user"])
    assert (user.slurm.partition, user.slurm_for("s").account) == ("user-partition", "user-account")
    assert user.origins["slurm.partition"] == "user"
    assert user.origins["slurm.extra-args"] == "project"


def test_policy_file_over_site_over_user_over_the_built_in(
    project: Path, site_env: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    untrusted = Flags(untrusted=True)
    policy = resolved(project, untrusted, **site_env["both"]).policy
    assert policy is not None
    assert (policy.cap_add, policy.mount_sources) == (("SYS_NICE",), ("/site-data",))
    assert policy.group_add == ("video", "render")  # not said: the built-in's
    user_policy = resolved(project, untrusted, **site_env["user"]).policy
    assert user_policy is not None and user_policy.cap_add == ("SYS_ADMIN",)
    named = tmp_path / "policy.toml"
    named.write_text('cap-add = ["SYS_PTRACE"]\n')
    settings = resolved(project, untrusted, **site_env["both"], ROCMENV_POLICY=str(named))
    assert settings.policy is not None
    assert settings.policy.cap_add == ("SYS_PTRACE",)
    assert settings.policy.mount_sources == ("/site-data",)  # key by key
    assert settings.origins["policy.cap-add"] == "env"
    assert settings.origins["policy.mount-sources"] == "site"
    assert str(named) in settings.policy.source


@pytest.mark.parametrize("source", sorted(UNTRUSTED_SOURCES))
def test_untrusted_mode_still_reads_the_site_and_user_files(
    project: Path, site_env: dict[str, dict[str, str]], source: str
) -> None:
    """They are the administrator's (outside the checkout): only the checkout's file is
    distrusted."""
    flags, env = UNTRUSTED_SOURCES[source]
    settings = resolved(project, flags, **env, **site_env["both"])
    assert settings.distrusted
    assert settings.registry.mirrors == (("docker.io", ("site-mirror.example:5000",)),)
    assert settings.slurm.partition == "site-partition"
    assert settings.slurm.extra_args == ()  # the checkout's [slurm] is not read
    assert settings.host.sysfs_root == Path("/site-sys")


def test_site_profiles_are_defaults_a_project_profile_refines(
    project: Path, site_env: dict[str, dict[str, str]]
) -> None:
    text = (project / "rocmenv.toml").read_text()
    (project / "rocmenv.toml").write_text(text + '\n[profiles.sitewide]\nshm-size = "8g"\n')
    settings = resolved(project, Flags(profile="sitewide"), **site_env["both"])
    assert settings.profile.image is not None
    assert settings.profile.image.repository == "site.example/rocm/sgl-dev"  # from the site
    assert settings.profile.shm_size == "8g"  # the project's refinement
    assert settings.profile.source == str(project / "rocmenv.toml")
    site_only = resolved(project, Flags(profile="sitewide"), **site_env["site"])
    site_file = site_env["site"]["ROCMENV_SITE_CONFIG"]
    assert site_only.project.profile("sitewide").source == str(project / "rocmenv.toml")
    assert site_file in site_only.project.trusted_sources


def test_a_site_file_inside_the_checkout_is_refused_in_untrusted_mode(project: Path) -> None:
    inside = project / "evil.toml"
    inside.write_text('[registry]\nmirrors = { "docker.io" = ["evil.example:5000"] }\n')
    assert resolved(project, ROCMENV_SITE_CONFIG=str(inside)).registry.mirrors != ()
    with pytest.raises(ConfigError, match="inside the checkout"):
        resolved(project, Flags(untrusted=True), ROCMENV_SITE_CONFIG=str(inside))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "registy = {}\n",
            "unknown key 'registy' in site configuration .*did you mean 'registry'",
        ),
        ("[registry]\ntimeout = -1\n", r"\[registry\] in site configuration .*timeout"),
        ('[slurm]\npartiton = "x"\n', "did you mean 'partition'"),
        ('[policy]\nmount-source = ["/d"]\n', "did you mean 'mount-sources'"),
        ('default-profile = "x"\n', "unknown key 'default-profile'"),
    ],
)
def test_a_mistake_in_the_site_file_is_an_error_naming_it(
    bare: Path, tmp_path: Path, text: str, message: str
) -> None:
    site = tmp_path / "site.toml"
    site.write_text(text)
    with pytest.raises(ConfigError, match=message):
        resolved(bare, ROCMENV_SITE_CONFIG=str(site))


def test_no_site_file_is_read_from_the_real_etc_in_tests(bare: Path) -> None:
    from rocmenv.settings.site import site_paths

    paths = dict(site_paths({"HOME": str(bare)}))
    assert not str(paths["site"]).startswith("/etc/")
    assert site_paths({"ROCMENV_SITE_CONFIG": ""}) == ()
