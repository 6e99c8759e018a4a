"""Writing a GGUF v3 file (format: github.com/ggml-org/ggml, file docs/gguf.md; little-endian), laid out as
llama.cpp's gguf-py GGUFWriter lays it out: header, metadata, tensor infos, padding to the
alignment, then each tensor's bytes padded to the alignment. niels-export writes its files (from a
niels model directory and from a Hugging Face directory) through this one writer.

Metadata is a list of (key, value type, value); an array value is (element type, items).
Tensors are a list of Tensor: name, shape (numpy order: the slowest-varying dim first), ggml type
(GGML_F32 or GGML_F16) and load(), which returns the contiguous array (float32 or float16) only when
its bytes are written, so a model never has to be in memory all at once.
"""

import collections
import struct
import sys

import numpy as np

MAGIC = b"GGUF"
VERSION = 3
ALIGNMENT = 32
U8, U32, I32, F32, BOOL, STRING, ARRAY = 0, 4, 5, 6, 7, 8, 9
GGML_F32, GGML_F16 = 0, 1
GGML_ITEMSIZE = {GGML_F32: 4, GGML_F16: 2}
NUMPY_TYPE = {GGML_F32: np.dtype("<f4"), GGML_F16: np.dtype("<f2")}

Tensor = collections.namedtuple("Tensor", "name shape ggml_type load")


def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, value):
    if vtype == U32:
        return struct.pack("<I", value)
    if vtype == I32:
        return struct.pack("<i", value)
    if vtype == F32:
        return struct.pack("<f", value)
    if vtype == BOOL:
        return struct.pack("<?", value)
    if vtype == STRING:
        return _string(value)
    raise AssertionError(vtype)


def kv_bytes(key, vtype, value):
    """One metadata entry as the file stores it."""
    out = _string(key)
    if vtype == ARRAY:
        etype, items = value
        out += struct.pack("<IIQ", ARRAY, etype, len(items))
        if etype == U8:
            out += bytes(items)
        elif etype == F32:
            out += np.asarray(items, dtype="<f4").tobytes()
        elif etype == I32:
            out += np.asarray(items, dtype="<i4").tobytes()
        else:
            out += b"".join(_value(etype, v) for v in items)
        return out
    return out + struct.pack("<I", vtype) + _value(vtype, value)


def tensor_size(t):
    return int(np.prod(t.shape, dtype=np.int64)) * GGML_ITEMSIZE[t.ggml_type]


def write(f, kv, tensors, alignment=ALIGNMENT):
    """Writes the file to the binary file object f; returns the number of bytes written.
    Raises ValueError when a tensor's load() returns another shape or type than declared."""
    if sys.byteorder != "little":
        raise ValueError("this writer stores raw little-endian tensor bytes; run it on a little-endian machine")
    header = MAGIC + struct.pack("<IQQ", VERSION, len(tensors), len(kv))
    header += b"".join(kv_bytes(k, t, v) for k, t, v in kv)
    offset = 0
    for t in tensors:
        header += (_string(t.name) + struct.pack("<I", len(t.shape))
                   + b"".join(struct.pack("<Q", d) for d in reversed(t.shape))  # ggml: ne[0] innermost
                   + struct.pack("<IQ", t.ggml_type, offset))
        size = tensor_size(t)
        offset += size + (-size % alignment)
    header += b"\0" * (-len(header) % alignment)
    f.write(header)
    for t in tensors:
        a = t.load()
        if a.shape != tuple(t.shape) or a.dtype != NUMPY_TYPE[t.ggml_type]:
            raise ValueError(f"tensor '{t.name}': {a.dtype} {list(a.shape)} where {list(t.shape)} was declared")
        f.write(np.ascontiguousarray(a).tobytes())
        f.write(b"\0" * (-a.nbytes % alignment))
    return len(header) + offset
