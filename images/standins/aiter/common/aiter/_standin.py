"""Call recording shared by the stand-in aiter functions (not part of the real aiter).

When ``ROCMENV_STANDIN_LOG`` names a file, every call appends one JSON line::

    {"fn": "aiter.ops.shuffle.shuffle_scale", "args": ["tensor(...)", "4"],
     "kwargs": {"gate_up": "True"}, "pid": 123, "layout": "old", "version": "0.1.9.post1"}

The file is opened in append mode and each line is written with a single ``os.write``,
so lines from concurrent processes do not interleave. The recorded function returns a
``torch.Tensor`` of the input's shape whose ``produced_by`` names the function (the
outermost recorded function when one calls another; ``via`` lists the whole chain).
"""

import functools
import json
import os

import torch

from aiter._standin_info import DIST, LAYOUT
from aiter._version import __version__

_depth = []


def _record(fn_name, args, kwargs):
    path = os.environ.get("ROCMENV_STANDIN_LOG")
    if not path:
        return
    line = json.dumps(
        {
            "fn": fn_name,
            "args": [repr(a) for a in args],
            "kwargs": dict((k, repr(v)) for k, v in kwargs.items()),
            "pid": os.getpid(),
            "layout": LAYOUT,
            "version": __version__,
            "dist": DIST,
        },
        sort_keys=True,
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, (line + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def recorded(fn_name):
    """Decorator: log the call, run the body, tag a returned tensor with ``fn_name``."""

    def wrap(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            _record(fn_name, args, kwargs)
            _depth.append(fn_name)
            try:
                result = func(*args, **kwargs)
            finally:
                _depth.pop()
            return result

        wrapper.__rocmenv_standin__ = fn_name
        return wrapper

    return wrap


def produce(fn_name, src, inner=None):
    """The recognisable result of a stand-in kernel: same shape, named producer."""
    out = torch.Tensor(src.shape, src.dtype)
    out.produced_by = fn_name
    out.via = (fn_name, *tuple(getattr(inner, "via", ())))
    return out
