"""``[images]`` and ``ROCMENV_IMAGE_CACHE``: the site's and the environment's, never a project's."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmenv.context import Context
from rocmenv.errors import ConfigError
from rocmenv.settings.resolve import settings_for


def settings(tmp_path: Path, site: str = "", project: str = "", **env: str):
    site_file = tmp_path / "site.toml"
    site_file.write_text(site)
    if project:
        (tmp_path / "rocmenv.toml").write_text(project)
    base = {"ROCMENV_SITE_CONFIG": str(site_file), "HOME": str(tmp_path / "home")}
    return settings_for(Context(env={**base, **env}, cwd=tmp_path))


def test_no_cache_unless_configured(tmp_path: Path) -> None:
    assert settings(tmp_path).images.cache is None


def test_the_site_file_names_the_cache_and_its_bounds(tmp_path: Path) -> None:
    got = settings(tmp_path, '[images]\ncache = "/cache/img"\nmax-size = "300g"\n'
                   'source-floor = "2m"\nsource-window = 30\n').images  # fmt: skip
    assert got.cache == Path("/cache/img") and got.max_size == 300 << 30
    assert got.source_floor == 2 << 20 and got.source_window == 30.0


def test_the_environment_overrides_the_site_file(tmp_path: Path) -> None:
    got = settings(tmp_path, '[images]\ncache = "/cache/img"\n',
                   ROCMENV_IMAGE_CACHE="/other", ROCMENV_SOURCE_WINDOW="5").images  # fmt: skip
    assert got.cache == Path("/other") and got.source_window == 5.0


def test_a_project_file_cannot_name_the_cache(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        settings(tmp_path, project='[images]\ncache = "/tmp/x"\n')


@pytest.mark.parametrize("bad", ['cache = ""', "source-window = 0", 'max-size = "lots"',
                                 "cahce = '/x'"])  # fmt: skip
def test_a_bad_images_table_is_a_config_error(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError):
        settings(tmp_path, f"[images]\n{bad}\n")
