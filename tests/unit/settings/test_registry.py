"""``[registry] limits``: the content limits of ``inspect`` next to the response caps, their
defaults (room for 40 GB images) and their bounds."""

from __future__ import annotations

import pytest

from rocmenv.errors import ConfigError
from rocmenv.settings.declared import CONTENT_LIMITS
from rocmenv.settings.registry import RegistrySettings, registry_settings


def test_content_limits_default_to_room_for_40_gb_images() -> None:
    defaults = RegistrySettings()
    assert defaults.limit("layer") == 64 << 30 > 40 * 10**9
    assert defaults.limit("image") == 128 << 30 > 3 * 40 * 10**9
    assert defaults.limit("layer-index") == 32 << 20
    assert defaults.limit("tags") == 16 << 20  # the response caps are unchanged


def test_content_limits_are_read_beside_the_response_caps() -> None:
    table = {"limits": {"layer": 1 << 30, "image": 1 << 40, "layer-index": 1 << 20, "tags": 9}}
    reg = registry_settings(table, "[registry]")
    assert [reg.limit(k) for k in (*CONTENT_LIMITS, "tags")] == [1 << 30, 1 << 40, 1 << 20, 9]


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"layers": 1}, "did you mean 'layer'"),
        ({"layer-idx": 1}, "did you mean 'layer-index'"),
        ({"layer": 0}, "limits.layer must be a number of bytes up to 1 TiB"),
        ({"image": (1 << 40) + 1}, "limits.image must be a number of bytes up to 1 TiB"),
        ({"layer-index": "32m"}, "limits.layer-index must be a number of bytes"),
        ({"layer": True}, "limits.layer must be a number of bytes"),
        ({"manifest": 1 << 33}, "limits.manifest must be a number of bytes up to 4 GiB"),
    ],
)
def test_bad_limits_are_clear_errors(limits: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        registry_settings({"limits": limits}, "[registry]")
