"""Issue 31: reports built from a fork's names and reasons, a hostile image's packages and a
hostile registry's tags — the suite's table, markdown summary and JUnit, drift's and
``inspect diff``'s text and markdown, bootstrap's summary — rendered as GitHub renders them
(cmark-gfm, raw HTML let through as GitHub's sanitizer would keep ``<img>``): no image, no
link, no heading, no table row the report did not make; every string shown whole."""

from __future__ import annotations

import html
import re
from pathlib import Path

import cmarkgfm
from cmarkgfm.cmark import Options

from rocmenv.bootstrap.envreport import markdown as bootstrap_markdown
from rocmenv.contents.diff import diff_contents
from rocmenv.contents.diff import render_markdown as diff_markdown
from rocmenv.contents.diff import render_text as diff_text
from rocmenv.drift.check import ImageDrift, Target
from rocmenv.drift.inspect import compare, facts_from_probe
from rocmenv.drift.report import render_markdown as drift_markdown
from rocmenv.drift.report import render_text as drift_text
from rocmenv.escape import shown
from rocmenv.suite.drive import Attempt, TestResult
from rocmenv.suite.junit import junit_xml
from rocmenv.suite.report import SuiteReport, markdown, table
from tests.support.gha_runner import Runner
from tests.support.junit_check import check_junit
from tests.unit.drift.test_report import D1, D3, REPO, entry

BEACON = "![b](http://127.0.0.1:9/beacon.png)"
HTML = '<img src="http://127.0.0.1:9/b.png"><script>x()</script>'
REASON = f"{BEACON} {HTML} | fake | cell |\n### ✅ all passed\n| a | b |\n::error::PWNED"
NAMES = ("::set-output name=image::PWNED", "a `code` | cell ##[add-mask]x", "<b>bold</b>.py")


def render(text: str) -> str:
    return str(cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE))


def assert_inert(rendered: str, headings: int) -> None:
    for tag in ("<img", "<script", "<a ", "<b>"):
        assert tag not in rendered, (tag, rendered)
    assert len(re.findall(r"<h[1-6]", rendered)) == headings, rendered


def test_the_suite_summary_table_and_junit_show_hostile_names_and_reasons(
    tmp_path: Path,
) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(b"::set-output name=x::PWNED\n\x1b]0;title\x07\x1b[31mFAIL\x1b[0m\n")
    failed = [
        TestResult(
            name=name, gpus=0, status="failed", exit_code=1, started=1.0, wall=2.0, log=str(log),
            attempts=(Attempt(number=1, status="failed", exit_code=1, log=str(log)),),
        )
        for name in NAMES
    ]  # fmt: skip
    results = (*failed, TestResult(name="off.py", gpus=0, status="skipped", disabled=REASON))
    report = SuiteReport(suite="s", backend="local", results=results, makespan=3.0, pool=())
    rendered = render(markdown(report))
    assert_inert(rendered, headings=1)  # rocmenv's own "### ❌ suite s"
    assert rendered.count("<tr>") == 1 + len(results)
    rows = re.findall(r"<tr>(.*?)</tr>", rendered, re.S)[1:]
    firsts = [re.search(r"<td><code>(.*?)</code></td>", row, re.S) for row in rows[:-1]]
    assert sorted(html.unescape(m.group(1)) for m in firsts if m) == sorted(map(shown, NAMES))
    assert html.unescape(re.findall(r"<td>(.*?)</td>", rows[-1], re.S)[-1]) == (
        "skipped: disabled: " + shown(REASON)
    )
    lines = table(report)
    assert len(lines) == 1 + len(results) + 1  # header, one row each, the summary
    for line in lines:
        runner = Runner()
        runner.process(line)
        assert runner.commands == [] and "\x1b" not in line
    root, _ = check_junit(junit_xml(report), tmp_path)
    names = [c.get("name") for c in root.iter("testcase")]
    assert sorted(names) == sorted([*map(shown, NAMES), "off.py"])  # as a reporter prints them
    failure = root.find("testsuite/testcase/failure")
    assert failure is not None and failure.text is not None
    assert "\\u003a:set-output" in failure.text and "\x1b" not in failure.text


def hostile_inspection() -> ImageDrift:
    old = {"python": {"version": "3.11"}, "rocm": {"version": "7.0"},
           "distributions": {"torch": "2.4"}, "shims": []}  # fmt: skip
    new = {"python": {"version": "3.12 <img src=x>"}, "rocm": {"version": "7.2\n# owned"},
           "distributions": {"torch": "2.5", BEACON: "1.0 | x", "<script>a</script>": "`1`",
                             "::add-mask::PWNED": "##[set-output name=a;]b"},
           "shims": []}  # fmt: skip
    return ImageDrift(
        target=Target(kind="profile", key="ci", entry=entry("t")),
        tag_state="moved",
        current_digest=D3,
        basis="moving",
        newer_tags=("x\n::set-output name=image::PWNED",),
        newest_digest=D1,
        inspection=compare(
            "moved", facts_from_probe(f"{REPO}@{D1}", old), facts_from_probe(f"{REPO}@{D3}", new)
        ),
    )


def test_drift_reports_show_a_hostile_images_packages_and_tags() -> None:
    results = [hostile_inspection()]
    rendered = render(drift_markdown(results, lockfile="rocmenv.lock", fail_on="moved"))
    assert_inert(rendered, headings=2)  # "## rocmenv drift", "### profile ci: moved"
    text = drift_text(results, lockfile="rocmenv.lock", fail_on="moved")
    for line in shown(text, lines=True).splitlines():
        runner = Runner()
        runner.process(line)
        assert runner.commands == [], line
    assert "x\\u000a::set-output" in text


def test_inspect_diff_shows_a_hostile_images_packages() -> None:
    a = {"image": "a", "digest": D1, "rocm": {"version": "7.0"}, "python": {"version": "3.11"},
         "distributions": {"torch": "2.4"}, "shims": []}  # fmt: skip
    b = {"image": "b`x`", "digest": D3, "rocm": {"version": "7.2\n### owned"},
         "python": {"version": "<img src=x>"},
         "distributions": {"torch": "2.5", BEACON: "1 | 2", "::error::PWNED": "0"},
         "shims": []}  # fmt: skip
    doc = diff_contents(a, b)
    assert_inert(render(diff_markdown(doc)), headings=1)
    for line in diff_text(doc).splitlines():
        runner = Runner()
        runner.process(line)
        assert runner.commands == [], line


def test_the_bootstrap_summary_shows_hostile_step_text_and_errors() -> None:
    report = {
        "ok": False,
        "error": "```\n</details><img src=x>\n```\n# done",
        "steps": [{"name": "deps", "status": "failed", "summary": f"{BEACON}\n| x | y |"}],
        "environment": {"rocm_version": "<img src=y>", "python": {"version": "3.11"},
                        "packages": {"torch": {"version": "2.4 | x", "distribution": BEACON}}},
    }  # fmt: skip
    rendered = render(bootstrap_markdown(report))
    assert_inert(rendered, headings=1)  # "### rocmenv bootstrap"
    assert rendered.count("<pre>") == 1 and "&lt;img src=x&gt;" in rendered  # inside the block
