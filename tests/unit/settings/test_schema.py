"""The JSON Schema (``rocmenv config schema``) is generated from the readers' own key tables:
every example and every TOML snippet of the README and docs validates against it with a real
validator (``jsonschema``), and an unknown key fails both rocmenv and the schema, table by
table."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from rocmenv.cli import main
from rocmenv.cli.config import schema_for
from rocmenv.context import Context
from rocmenv.settings.host import HOST_KEYS
from rocmenv.settings.policy import POLICY_KEYS
from rocmenv.settings.profiles import MOUNT_KEYS, PROFILE_KEYS
from rocmenv.settings.project import TOP_KEYS
from rocmenv.settings.registry import REGISTRY_KEYS, RESPONSE_LIMITS
from rocmenv.settings.site import SITE_KEYS
from rocmenv.settings.slurm import SLURM_KEYS
from rocmenv.suite.labels import CADENCES, LABELS_KEYS
from rocmenv.suite.model import SUITE_KEYS, TEST_KEYS
from rocmenv.suite.registered import DISCOVER_KEYS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def validator(kind: str) -> jsonschema.protocols.Validator:
    schema = schema_for(kind)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def snippets() -> list[tuple[str, str, str]]:
    """(id, schema kind, TOML) of every ```toml block in the README and docs. The kind: a
    block whose first line names ROCMENV_POLICY is a policy file, one naming
    /etc/rocmenv/config.toml or config.toml under XDG_CONFIG_HOME a site file."""
    out = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for match in re.finditer(r"^( *)```toml\n(.*?)^\1```", text, re.S | re.M):
            body = "\n".join(line[len(match.group(1)) :] for line in match.group(2).splitlines())
            first = body.lstrip().splitlines()[0] if body.strip() else ""
            kind = ("policy" if "ROCMENV_POLICY" in first
                    else "site" if "rocmenv/config.toml" in first else "project")  # fmt: skip
            line = text[: match.start()].count("\n") + 1
            out.append((f"{doc.relative_to(ROOT)}:{line}", kind, body))
    return out


SNIPPETS = snippets()


def test_the_docs_have_snippets_of_every_kind() -> None:
    assert {kind for _, kind, _ in SNIPPETS} == {"project", "site", "policy"}


@pytest.mark.parametrize(("where", "kind", "text"), SNIPPETS, ids=[s[0] for s in SNIPPETS])
def test_every_toml_snippet_in_the_readme_and_docs_validates(
    where: str, kind: str, text: str
) -> None:
    errors = [e.message for e in validator(kind).iter_errors(tomllib.loads(text))]
    assert errors == [], where


def test_the_example_project_validates_against_the_schema_and_rocmenv() -> None:
    example = ROOT / "examples" / "rocmenv.toml"
    assert list(validator("project").iter_errors(tomllib.loads(example.read_text()))) == []
    out, err = io.StringIO(), io.StringIO()
    ctx = Context(env={"HOME": str(example.parent)}, cwd=example.parent, stdout=out, stderr=err)
    assert main(["config", "show"], ctx=ctx) == 0, err.getvalue()


def test_a_pyproject_tool_rocmenv_table_validates_as_the_project_file() -> None:
    doc = tomllib.loads(
        '[tool.rocmenv]\ndefault-profile = "ci"\n[tool.rocmenv.profiles.ci]\nextends = "rocm"\n'
    )
    assert list(validator("project").iter_errors(doc["tool"]["rocmenv"])) == []


def properties(schema: dict[str, Any], *path: str) -> set[str]:
    node = schema
    for step in path:
        node = node["properties"][step] if step != "*" else node["additionalProperties"]
        if "items" in node and step in ("tests",):
            node = node["items"]
    return set(node["properties"])


def test_the_schema_holds_exactly_the_keys_of_the_readers_tables() -> None:
    project, site = schema_for("project"), schema_for("site")
    assert properties(project) == set(TOP_KEYS)
    assert properties(project, "profiles", "*") == set(PROFILE_KEYS)
    assert properties(project, "registry") == set(REGISTRY_KEYS)
    assert properties(project, "registry", "limits") == set(RESPONSE_LIMITS)
    assert properties(project, "slurm") == set(SLURM_KEYS)
    assert properties(project, "host") == set(HOST_KEYS)
    assert properties(project, "labels") == set(LABELS_KEYS)
    assert properties(project, "labels", "cadence") == set(CADENCES)
    assert properties(project, "suites", "*") == set(SUITE_KEYS)
    assert properties(project, "suites", "*", "tests") == set(TEST_KEYS)
    assert properties(project, "suites", "*", "discover") == set(DISCOVER_KEYS)
    assert properties(project, "suites", "*", "slurm") == set(SLURM_KEYS)
    assert properties(site) == set(SITE_KEYS)
    assert properties(site, "policy") == set(POLICY_KEYS) == properties(schema_for("policy"))
    mount = project["properties"]["profiles"]["additionalProperties"]["properties"]["mounts"]
    assert set(mount["items"]["anyOf"][1]["properties"]) == set(MOUNT_KEYS)


# (id, schema kind, file text with one unknown key, the key rocmenv names)
UNKNOWN = [
    ("top", "project", 'lokfile = "x.lock"\n', "lokfile"),
    ("profile", "project", '[profiles.ci]\nextend = "rocm"\n', "extend"),
    ("mount", "project", '[profiles.ci]\nmounts = [{ source = "/d", target = "/d", ro = true }]\n', "ro"),
    ("registry", "project", "[registry]\ntimout = 3\n", "timout"),
    ("limits", "project", "[registry]\nlimits = { tag = 5 }\n", "tag"),
    ("host", "project", '[host]\nsysfs = "/sys"\n', "sysfs"),
    ("slurm", "project", '[slurm]\npartitions = "gpu"\n', "partitions"),
    ("suite", "project", '[suites.s]\ngpu = 1\ntests = [{ path = "t.py" }]\n', "gpu"),
    ("test", "project", '[suites.s]\ntests = [{ path = "t.py", timout = 5 }]\n', "timout"),
    ("discover", "project", '[suites.s]\ndiscover = { glob = "*.py", call = "f", suit = "x" }\n', "suit"),
    ("suite-labels", "project", '[labels]\nprefx = "x"\n[suites.s]\ntests = [{ path = "t.py" }]\n', "prefx"),
    ("suite-labels-cadence", "project", '[labels]\ncadence = { nigthly = "all" }\n[suites.s]\ntests = [{ path = "t.py" }]\n', "nigthly"),
    ("suite-slurm", "project", '[suites.s]\ntests = [{ path = "t.py" }]\n[suites.s.slurm]\nacount = "x"\n', "acount"),
    ("site-top", "site", 'mirrors = ["m:5000"]\n', "mirrors"),
    ("site-policy", "site", '[policy]\ncap-adds = ["X"]\n', "cap-adds"),
    ("site-profile", "site", '[profiles.runner]\nshm = "8g"\n', "shm"),
    ("policy-file", "policy", 'image = ["docker.io/rocm/sgl-dev"]\n', "image"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "kind", "text", "key"), UNKNOWN, ids=[u[0] for u in UNKNOWN])
def test_an_unknown_key_fails_both_rocmenv_and_the_schema(
    tmp_path: Path, case: str, kind: str, text: str, key: str
) -> None:
    errors = list(validator(kind).iter_errors(tomllib.loads(text)))
    assert errors and any(key in e.message for e in errors), errors
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "t.py").write_text("")
    env = {"HOME": str(tmp_path)}
    argv = ["config", "show"]
    if kind == "project":
        (repo / "rocmenv.toml").write_text(text)
        if case.startswith(("suite", "test", "discover")):
            argv = ["suite", "list", "s"]
    elif kind == "site":
        (tmp_path / "site.toml").write_text(text)
        env["ROCMENV_SITE_CONFIG"] = str(tmp_path / "site.toml")
    else:
        (tmp_path / "policy.toml").write_text(text)
        env["ROCMENV_POLICY"] = str(tmp_path / "policy.toml")
        argv = ["config", "show", "--untrusted"]
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, ctx=Context(env=env, cwd=repo, stdout=out, stderr=err))
    assert code == 2, err.getvalue()
    assert f"unknown key {key!r}" in err.getvalue()


def test_config_schema_prints_the_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == schema_for("project")
    assert printed["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert main(["config", "schema", "--file", "site"]) == 0
    assert json.loads(capsys.readouterr().out) == schema_for("site")
