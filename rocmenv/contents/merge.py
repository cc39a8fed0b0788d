"""An image's layer indexes stacked into one view, as the OCI image spec applies layers.

For each layer from the bottom: its whiteouts delete the named path and everything under it
from the layers below, an opaque marker empties its directory of the layers below' content,
a file or symlink replaces a directory of the layers below (with what was under it), then
its own entries are added.

Linear in the entries: the view keeps its paths as a tree of components beside the flat
tables, so "everything under ``d/``" is the subtree at ``d`` rather than a scan of every path
(which made two layers of 20,000 ``METADATA`` files take 47 s). Each path enters the tree
once per layer that adds it and leaves it at most once; the tables keep the order a scan of
the old kind produced.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from rocmenv.contents.layer import LayerIndexJson


@dataclass(frozen=True, kw_only=True)
class Merged:
    files: dict[str, str] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)


_Node = dict[str, "_Node"]


class _Stack:
    """The tables of the view, and their paths as a tree (``{component: subtree}``)."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}
        self.links: dict[str, str] = {}
        self.tree: _Node = {}

    def add(self, path: str) -> None:
        node = self.tree
        for part in path.split("/"):
            node = node.setdefault(part, {})

    def remove(self, path: str, *, keep_top: bool) -> None:
        """Remove everything under ``path`` (and ``path`` itself unless ``keep_top``)."""
        *parents, last = path.split("/")
        node: _Node | None = self.tree
        for part in parents:
            node = node.get(part) if node is not None else None
        if node is None or last not in node:
            return
        top = node[last]
        for below in _paths(top, path):
            self.files.pop(below, None)
            self.links.pop(below, None)
        if keep_top:
            top.clear()
        else:
            del node[last]
            self.files.pop(path, None)
            self.links.pop(path, None)

    def clear(self) -> None:
        self.files.clear()
        self.links.clear()
        self.tree.clear()


def _paths(node: _Node, prefix: str) -> Iterator[str]:
    """Every path strictly under ``node`` (whose path is ``prefix``)."""
    stack = [(node, prefix)]
    while stack:
        current, base = stack.pop()
        for part, child in current.items():
            path = f"{base}/{part}"
            yield path
            if child:
                stack.append((child, path))


def merge(layers: Sequence[LayerIndexJson]) -> Merged:
    """Stack layer indexes bottom to top, applying whiteouts and opaque directories."""
    view = _Stack()
    for layer in layers:
        for gone in layer["whiteouts"]:
            view.remove(gone, keep_top=False)
        for directory in layer["opaque"]:
            if directory:
                view.remove(directory, keep_top=True)
            else:
                view.clear()
        # a file or symlink replaces a directory of the layers below (the tar applier
        # removes it first), so what was under it is gone
        for path in [*layer["files"], *layer["links"]]:
            view.remove(path, keep_top=True)
        for path, text in layer["files"].items():
            view.links.pop(path, None)
            view.files[path] = text
            view.add(path)
        for path, target in layer["links"].items():
            view.files.pop(path, None)
            view.links[path] = target
            view.add(path)
    return Merged(files=view.files, links=view.links)


def resolve(merged: Merged, path: str) -> str:
    """``path`` with every symlink among its components followed (as far as the index knows
    them: python binaries, os-release, /opt entries, site and lib directories)."""
    for _ in range(40):
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            target = merged.links.get(prefix)
            if target is not None:
                base = posixpath.dirname(prefix)
                head = (
                    target.lstrip("/") if target.startswith("/") else posixpath.join(base, target)
                )
                path = posixpath.normpath("/".join([head, *parts[i:]]))
                break
        else:
            return path
    return path
