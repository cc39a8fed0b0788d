from __future__ import annotations

from rocmenv.redact import redact, register_secret


def test_registered_secret_is_masked_everywhere() -> None:
    register_secret("hunter2-very-secret")
    assert "hunter2" not in redact(
        "login failed for pw=hunter2-very-secret and again hunter2-very-secret"
    )


def test_credential_shapes_are_masked() -> None:
    text = (
        "Authorization: Bearer abc.def.ghi123456 "
        "https://user:p4ss@registry.example.com/v2/ "
        "token=abcdef123456 password: s3cr3t "
        "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"
    )
    out = redact(text)
    for secret in ("abc.def.ghi123456", "p4ss", "abcdef123456", "s3cr3t", "eyJhbGciOiJSUzI1NiJ9"):
        assert secret not in out
    assert "registry.example.com" in out
