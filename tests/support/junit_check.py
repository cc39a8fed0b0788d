"""JUnit XML checked the way its consumers read it: a real XML parser (the standard
library's expat), the schema in ``junit.xsd`` (validated by libxml2 through lxml), and
junitparser (the parser of the EnricoMi/publish-unit-test-result-action)."""

from __future__ import annotations

import functools
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

SCHEMA = Path(__file__).with_name("junit.xsd")


@functools.cache
def _schema() -> Any:
    from lxml import etree

    return etree.XMLSchema(etree.parse(str(SCHEMA)))


def schema_errors(text: str) -> list[str]:
    from lxml import etree

    schema = _schema()
    doc = etree.fromstring(text.encode("utf-8"))
    if schema.validate(doc):
        return []
    return [f"{e.line}: {e.message}" for e in schema.error_log]


def check_junit(text: str, tmp: Path) -> tuple[ET.Element, Any]:
    """Parse with expat, validate against the schema, read with junitparser; returns the
    ElementTree root and junitparser's document. Any failure raises."""
    root = ET.fromstring(text.encode("utf-8"))  # ParseError when not well-formed
    errors = schema_errors(text)
    assert errors == [], "\n".join(errors)
    from junitparser import JUnitXml

    path = tmp / "junit-check.xml"
    path.write_text(text, encoding="utf-8")
    return root, JUnitXml.fromfile(str(path))
