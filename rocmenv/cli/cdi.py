"""``rocmenv cdi generate [--output FILE]``: a CDI spec for this host's AMD GPUs, as the AMD
Container Toolkit names them (``amd.com/gpu=<index>``, ``amd.com/gpu=all``), from the KFD
topology (:mod:`rocmenv.container.cdi`). JSON on stdout, or written atomically to ``--output``
(e.g. ``/etc/cdi/amd.json``, where podman and Docker look). A profile's ``gpu-devices =
"cdi"`` then makes ``run`` and ``options`` name the selected GPUs this way.

Exit codes: 0; 1 when the host has no AMD GPU (nothing written); 2 usage or configuration.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rocmenv.context import Context


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    cdisub = parser.add_subparsers(dest="cdi_command", metavar="SUBCOMMAND", required=True)
    p = cdisub.add_parser(
        "generate",
        help="the CDI spec of this host's GPUs (amd.com/gpu=<index>, all; /dev/kfd for each)",
        description="One CDI device per GPU (rocmenv's index: PCI-address order, as --gpus "
        "selects), its render and card nodes; `all`; /dev/kfd as the spec-wide node. "
        "Roots: [host] sysfs-root/dev-root, ROCMENV_SYSFS_ROOT, ROCMENV_DEV_ROOT.",
    )
    p.add_argument(
        "--output",
        "-o",
        type=Path,
        metavar="PATH",
        help="write the spec to this file (e.g. /etc/cdi/amd.json)",
    )
    p.set_defaults(func=run_generate)


def run_generate(args: argparse.Namespace, ctx: Context) -> int:
    import json

    from rocmenv.container.cdi import generate_spec
    from rocmenv.container.gpu import discover
    from rocmenv.hostfs import write_atomic
    from rocmenv.settings.resolve import settings_for

    settings = settings_for(ctx)
    inventory = discover(settings.host.sysfs_root, settings.host.dev_root)
    if not inventory.gpus:
        ctx.stderr.write(
            f"rocmenv cdi: no AMD GPUs under {inventory.sysfs_root}/class/kfd: nothing to write\n"
        )
        return 1
    text = json.dumps(generate_spec(inventory), indent=2) + "\n"
    if args.output is None:
        ctx.stdout.write(text)
        return 0
    output = args.output if args.output.is_absolute() else ctx.cwd / args.output
    output.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(output, text, mode=0o644)
    ctx.stderr.write(f"rocmenv cdi: wrote {output} ({len(inventory.gpus)} GPUs and all)\n")
    return 0
