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


def test_url_userinfo_is_masked_with_or_without_a_password() -> None:
    from rocmenv.redact import redact_argv, redact_json, redact_url

    assert redact_url("https://user:tok3n@h/x.git") == "https://***@h/x.git"
    assert redact_url("https://ghp_tok3nonly@github.com/o/r") == "https://***@github.com/o/r"
    assert redact_url("https://u:p@ss@h:1/x") == "https://***@h:1/x"
    assert redact_url("http://host/path@v1") == "http://host/path@v1"  # no userinfo
    assert redact_argv(["git", "fetch", "https://a:b1234@h/x"]) == [
        "git", "fetch", "https://***@h/x",
    ]  # fmt: skip
    doc = redact_json({"argv": ["https://tok3n@h"], "n": 1, "k": {"https://u:tok3n@h": None}})
    assert "tok3n" not in repr(doc) and doc["n"] == 1


def test_redaction_does_not_hang_on_long_hostile_text() -> None:
    """Only catches a hang: an unbounded URL scheme and adjacent \\s* runs were quadratic
    (4 s for 50,000 characters of "a.a.a…"; these would take minutes). Timing:
    benchmarks/bench_hostile.py."""
    import threading

    from rocmenv.redact import redact

    texts = ["a." * 200_000, "a-" * 200_000, "authorization:" + " " * 400_000,
             "a" * 400_000 + "://u:tok3n@h"]  # fmt: skip
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.extend(redact(t) for t in texts), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert len(done) == len(texts), "redact() did not finish within 60 s"
    assert "tok3n" not in done[-1]
