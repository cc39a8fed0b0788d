"""``rocmenv gpus [--json]``: the host's AMD GPUs, as ``--gpus`` sees them."""

from __future__ import annotations

import argparse
from typing import Any

from rocmenv.context import Context


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(
        name,
        help=help_text,
        description=help_text + ". Index = position in PCI-address order; select with "
        "--gpus INDEX, RANGE, UUID or PCI address. Roots: [host] sysfs-root/dev-root, "
        "ROCMENV_SYSFS_ROOT, ROCMENV_DEV_ROOT.",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.cli._common import emit, emit_json
    from rocmenv.settings.resolve import settings_for
    from rocmenv.spec.gpu import discover

    config = settings_for(ctx)
    inv = discover(config.host.sysfs_root, config.host.dev_root)
    if args.json:
        emit_json(ctx, inv.to_json())
        return 0
    if not inv.gpus:
        where = inv.sysfs_root / "class/kfd/kfd/topology/nodes"
        ctx.stderr.write(
            f"rocmenv gpus: no AMD GPUs found ({where} "
            + ("has no GPU nodes" if inv.topology_present else "does not exist: amdgpu not loaded?")
            + ")\n"
        )
    else:
        rows = [("INDEX", "GFX", "PCI", "UUID", "RENDER", "CARD", "KFD-NODE")]
        for g in inv.gpus:
            rows.append(
                (
                    str(g.index),
                    g.gfx,
                    g.pci_address,
                    g.uuid or "-",
                    str(g.render_node),
                    str(g.card_node) if g.card_node else "-",
                    str(g.node),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            emit(ctx, "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
        if not inv.kfd_present:
            ctx.stderr.write(f"rocmenv gpus: warning: {inv.kfd_node} does not exist\n")
    for note in inv.notes:
        ctx.stderr.write(f"rocmenv gpus: note: {note}\n")
    return 0
