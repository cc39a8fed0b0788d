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
        "--gpus INDEX, RANGE, UUID, PCI address or render node path. POOL: whether a GPU is "
        "this runner's (its device node exists here and, on an ARC runner pod, its device "
        "list names it). Roots: [host] sysfs-root/dev-root, ROCMENV_SYSFS_ROOT, "
        "ROCMENV_DEV_ROOT; the pool's list: [host] gpus-from, ROCMENV_GPUS_FROM, else "
        "/etc/podinfo/gha-render-devices ([host] podinfo-devices).",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.cli._common import emit, emit_json
    from rocmenv.container.pool import host_inventory
    from rocmenv.settings.resolve import settings_for

    config = settings_for(ctx)
    inv = host_inventory(config.host)
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
        rows = [("INDEX", "GFX", "PCI", "UUID", "RENDER", "CARD", "KFD-NODE", "POOL")]
        pool = inv.pool
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
                    "yes" if g in pool else "no (no device node)" if not g.present else "no",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            emit(ctx, "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
        if inv.pool_source is not None:
            ctx.stderr.write(
                f"rocmenv gpus: the pool: {len(pool)} of {len(inv.gpus)} GPUs ({inv.pool_source})\n"
            )
        if not inv.kfd_present:
            ctx.stderr.write(f"rocmenv gpus: warning: {inv.kfd_node} does not exist\n")
    for note in inv.notes:
        ctx.stderr.write(f"rocmenv gpus: note: {note}\n")
    return 0
