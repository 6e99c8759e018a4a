"""A GGUF v3 file read back for the tests: metadata {key: (type, value)} in file order and tensors
{name: (ggml type, dims, bytes)} in file order. Standard library only; written from the format's
specification (github.com/ggml-org/ggml, file docs/gguf.md), independently of the writers it checks. Tensor sizes are known for
f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_K, q5_K and q6_K.
"""

import struct

# ggml type -> (block size, bytes per block)
GGML_BLOCKS = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18), 6: (32, 22), 7: (32, 24),
               12: (256, 144), 13: (256, 176), 14: (256, 210)}
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, vtype):
        if vtype == 8:
            return self.string()
        if vtype == 9:
            etype, n = self.take("<I"), self.take("<Q")
            return (etype, [self.value(etype) for _ in range(n)])
        return self.take(SCALAR[vtype])


def read_gguf(path):
    with open(path, "rb") as f:
        data = f.read()
    r = Reader(data)
    assert data[:4] == b"GGUF", f"{path}: not a GGUF file"
    r.pos = 4
    version, n_tensors, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    assert version == 3, f"{path}: GGUF version {version}"
    kv = {}
    for _ in range(n_kv):
        key = r.string()
        vtype = r.take("<I")
        kv[key] = (vtype, r.value(vtype))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("<Q") for _ in range(r.take("<I"))]
        infos.append((name, dims, r.take("<I"), r.take("<Q")))
    alignment = kv.get("general.alignment", (4, 32))[1]
    base = r.pos + (-r.pos % alignment)
    tensors = {}
    for name, dims, ggml_type, offset in infos:
        block, size = GGML_BLOCKS[ggml_type]
        count = 1
        for d in dims:
            count *= d
        nbytes = count // block * size
        tensors[name] = (ggml_type, dims, data[base + offset:base + offset + nbytes])
    return kv, tensors
