"""Image references and rocm/sgl-dev tags: grammars, constraints, ordering."""

from __future__ import annotations

from rocmenv.lazy import surface

__all__, __getattr__ = surface(
    __name__,
    {
        "Reference": "reference",
        "parse": "reference",
        "parse_repository": "reference",
        "validate_digest": "reference",
        "TagInfo": "tags",
        "Constraints": "tags",
        "parse_tag": "tags",
        "select": "tags",
        "nearest": "tags",
        "sort_key": "tags",
    },
)
