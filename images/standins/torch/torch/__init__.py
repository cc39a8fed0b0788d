"""Stand-in for ``torch`` in the rocmenv test images (pure Python, no tensors of data).

Just enough for aiter stand-ins and tests: dtype sentinels with torch-like reprs, a
``Tensor`` that has a shape and a dtype, ``torch.tensor``/``empty``/``zeros``/``ones``,
``torch.version`` and a ``torch.cuda`` that finds no device. Python 3.8+, stdlib only.
"""

from torch import cuda, version
from torch.version import __version__

__all__ = [
    "Size",
    "Tensor",
    "__version__",
    "bfloat16",
    "cuda",
    "dtype",
    "empty",
    "float8_e4m3fnuz",
    "float8_e8m0fnu",
    "float16",
    "float32",
    "int32",
    "ones",
    "tensor",
    "uint8",
    "version",
    "zeros",
]


class dtype(object):
    """A dtype sentinel; ``repr`` reads ``torch.float32`` like the real one."""

    __slots__ = ("is_floating_point", "itemsize", "name")

    def __init__(self, name, itemsize, is_floating_point):
        self.name = name
        self.itemsize = itemsize
        self.is_floating_point = is_floating_point

    def __repr__(self):
        return "torch." + self.name

    __str__ = __repr__

    def __reduce__(self):
        return (_dtype_by_name, (self.name,))


float32 = dtype("float32", 4, True)
float16 = dtype("float16", 2, True)
bfloat16 = dtype("bfloat16", 2, True)
float8_e8m0fnu = dtype("float8_e8m0fnu", 1, True)
float8_e4m3fnuz = dtype("float8_e4m3fnuz", 1, True)
uint8 = dtype("uint8", 1, False)
int32 = dtype("int32", 4, False)
float = float32
half = float16

_DTYPES = {
    d.name: d for d in (float32, float16, bfloat16, float8_e8m0fnu, float8_e4m3fnuz, uint8, int32)
}


def _dtype_by_name(name):
    return _DTYPES[name]


class Size(tuple):
    """``torch.Size``: a tuple of ints with a torch-like repr."""

    def __repr__(self):
        return "torch.Size([" + ", ".join(str(d) for d in self) + "])"

    __str__ = __repr__

    def numel(self):
        n = 1
        for d in self:
            n *= d
        return n


def _shape_of(args):
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    for d in args:
        if not isinstance(d, int) or d < 0:
            raise TypeError("shape must be non-negative ints, got %r" % (args,))
    return Size(args)


class Tensor(object):
    """A shape and a dtype, nothing else. Functions of the stand-ins return these."""

    def __init__(self, shape, dtype=float32):
        self.shape = _shape_of((shape,) if isinstance(shape, int) else tuple(shape))
        if not isinstance(dtype, globals()["dtype"]):
            raise TypeError("dtype must be a torch.dtype, got %r" % (dtype,))
        self.dtype = dtype

    @property
    def ndim(self):
        return len(self.shape)

    def dim(self):
        return len(self.shape)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self):
        return self.shape.numel()

    def view(self, *shape):
        new = _shape_of(shape)
        if new.numel() != self.shape.numel():
            raise RuntimeError(
                "shape %r is invalid for input of size %d" % (list(new), self.numel())
            )
        return Tensor(new, self.dtype)

    def contiguous(self):
        return self

    def __repr__(self):
        extra = ""
        produced_by = getattr(self, "produced_by", None)
        if produced_by:
            extra = ", produced_by=%r" % (produced_by,)
        return "tensor(shape=%r, dtype=%r%s)" % (list(self.shape), self.dtype, extra)


def _infer_shape(data):
    shape = []
    while isinstance(data, (list, tuple)):
        shape.append(len(data))
        if not data:
            break
        data = data[0]
    return tuple(shape)


def tensor(data, dtype=None):
    """``torch.tensor(nested_list, dtype=...)``: keeps the shape only."""
    if dtype is None:
        probe = data
        while isinstance(probe, (list, tuple)) and probe:
            probe = probe[0]
        dtype = int32 if isinstance(probe, int) and not isinstance(probe, bool) else float32
    return Tensor(_infer_shape(data), dtype)


def empty(*shape, **kwargs):
    return Tensor(_shape_of(shape), kwargs.get("dtype") or float32)


def zeros(*shape, **kwargs):
    return Tensor(_shape_of(shape), kwargs.get("dtype") or float32)


def ones(*shape, **kwargs):
    return Tensor(_shape_of(shape), kwargs.get("dtype") or float32)
