"""What a test of this example can see: the GPUs it was given, the job's environment, and a
state file that survives a retry (the checkout is mounted into every attempt's container)."""

import os
import pathlib


def visible_gpus():
    names = os.environ.get("HIP_VISIBLE_DEVICES", "")
    return [n for n in names.split(",") if n]


def render_nodes():
    try:
        return sorted(n for n in os.listdir("/dev/dri") if n.startswith("renderD"))
    except OSError:
        return []


def first_attempt(test_file):
    """True the first time a test file asks (a marker beside it remembers)."""
    marker = pathlib.Path(test_file).with_suffix(".attempted")
    if marker.exists():
        return False
    marker.write_text("1\n")
    return True
