"""Add ``aiter.ops.shuffle.shuffle_scale`` to aiter builds that only have ``shuffle_scale_a16w4``.

Why: sglang calls ``shuffle_scale(src, experts_cnt=None, is_guinterleave=False, gate_up=False)``
(``quantization/fp8.py``, ``mxfp4.py``, ``quark_w4a8_mxfp4_moe.py``), which ROCm/aiter added
in v0.1.14-rc0 (#2951, 2026-05-09). Images with aiter v0.1.6.post2 ... v0.1.13.post1 (sglang
ROCm releases up to v0.5.11, nightlies dated up to 2026-05-20) only have
``shuffle_scale_a16w4`` and ``aiter.utility.fp4_utils.e8m0_shuffle``. The shim is faithful
to the new function: ``is_guinterleave=False`` is ``e8m0_shuffle(src)``; ``True`` is
``shuffle_scale_a16w4(src, experts_cnt, gate_up)`` (``None`` -> ``None``, float32 unchanged,
``ValueError`` without ``experts_cnt``). It does not add aiter#4130's K padding (v0.1.18):
the old kernels cannot take those shapes anyway.

Versions: ``>=0.1.6.post2.dev0,<0.1.14rc0`` with pre-releases, so editable builds from
``main`` such as ``0.1.12.post2.dev150+ga6bb49937`` match and ``0.1.14rc0`` does not. The
version number does not place a ``main`` commit on the timeline, so the probe decides:
``shuffle_scale`` absent and ``shuffle_scale_a16w4`` present.

Retire: when no supported image carries aiter older than v0.1.14-rc0 (``rocmenv shims check``
reports "would not apply" for every pinned profile).
"""

import sys

NAME = "aiter-shuffle-scale"
TARGET = "aiter.ops.shuffle"
DISTRIBUTIONS = ("amd-aiter", "aiter")
SPECIFIER = ">=0.1.6.post2.dev0,<0.1.14rc0"
MISSING = "aiter.ops.shuffle lacks shuffle_scale"

MYPY = False
if MYPY:  # type checking only
    from types import ModuleType
    from typing import Any, Callable, Optional, Tuple


def probe(module: "ModuleType") -> bool:
    """True when the feature is missing (and the function it is built from is present)."""
    return not hasattr(module, "shuffle_scale") and hasattr(module, "shuffle_scale_a16w4")


def static_probe(
    find_source: "Callable[[str], Optional[str]]",
) -> "Tuple[Optional[bool], str]":
    """The probe without importing anything: read the target's source (for probe.py)."""
    import ast

    source = find_source(TARGET)
    if source is None:
        return None, "no source file found for %s" % TARGET
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        return None, "cannot parse the source of %s: %s" % (TARGET, err)
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    if "shuffle_scale" in names:
        return False, "%s defines shuffle_scale" % TARGET
    if "shuffle_scale_a16w4" not in names:
        return False, "%s has neither shuffle_scale nor shuffle_scale_a16w4" % TARGET
    return True, MISSING + " (has shuffle_scale_a16w4)"


def apply(module: "ModuleType") -> None:
    """Define ``module.shuffle_scale`` (faithful to aiter >= v0.1.14-rc0)."""

    def shuffle_scale(
        src: "Any",
        experts_cnt: "Optional[int]" = None,
        is_guinterleave: bool = False,
        gate_up: bool = False,
    ) -> "Any":
        if not is_guinterleave:
            from aiter.utility.fp4_utils import e8m0_shuffle  # aiter >= v0.1.4

            return e8m0_shuffle(src)
        if src is None:
            return None
        torch = sys.modules.get("torch")
        if torch is None:
            import torch
        if src.dtype == torch.float32:
            return src
        if experts_cnt is None:
            raise ValueError("experts_cnt is required when is_guinterleave=True")
        return module.shuffle_scale_a16w4(src, experts_cnt, gate_up)

    shuffle_scale.__module__ = module.__name__
    shuffle_scale.__qualname__ = "shuffle_scale"
    shuffle_scale.__doc__ = (
        "Shuffle e8m0 scales (added by rocmenv shim %r for aiter without it).\n\n"
        "is_guinterleave=False: aiter.utility.fp4_utils.e8m0_shuffle(src).\n"
        "is_guinterleave=True: shuffle_scale_a16w4(src, experts_cnt, gate_up); None -> None,\n"
        "float32 returned unchanged, ValueError without experts_cnt." % NAME
    )
    # No __wrapped__: this is not a wrapper of one function, and inspect.signature would then
    # report shuffle_scale_a16w4's signature instead of the faithful one above.
    shuffle_scale._rocmenv_shim = NAME  # type: ignore[attr-defined]
    module.shuffle_scale = shuffle_scale  # type: ignore[attr-defined]
    exported = getattr(module, "__all__", None)
    if isinstance(exported, list) and "shuffle_scale" not in exported:
        exported.append("shuffle_scale")
