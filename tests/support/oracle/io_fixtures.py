#!/usr/bin/python3
"""File-format fixtures for kiln's I/O parity test (tests/parity/test_io_python.cpp).

    io_fixtures.py write DIR   numpy writes .npy files (np.save, format versions 1.0/2.0/3.0, plus a
                               Fortran-ordered and a big-endian file that kiln must reject) and a
                               safetensors file written with plain struct + json, as the reference
                               implementation lays it out (header padded to 8, data sorted by dtype
                               size then name, "__metadata__" first).
    io_fixtures.py check DIR   reads DIR/kiln_*.npy and DIR/kiln.safetensors written by kiln and checks
                               every value; exits 1 with a message on the first mismatch.

Values follow one formula shared with the C++ test, so neither side needs the other's files to
know what to expect:  element i of a float array = ((i*37) % 101 - 50) / 8  (exact in f16/bf16),
of a signed int array = (i*37) % 101 - 50, of a u8 array = (i*37) % 256.
This script is a test oracle only; kiln never imports or runs it at run time.
"""
import json
import struct
import sys

# Use Debian's numpy (the one python3-torch 1.13 is built against): a pip-installed numpy 2 under
# /usr/local shadows it and breaks torch's numpy bridge ("Numpy is not available").
sys.path[:] = [p for p in sys.path if not p.startswith("/usr/local/lib/python3")]

import numpy as np
import torch

SHAPE = (3, 5, 7)  # 105 elements, odd sizes catch stride/order mistakes


def values(kind, n):
    i = np.arange(n, dtype=np.int64)
    if kind == "float":
        return ((i * 37) % 101 - 50).astype(np.float64) / 8.0
    if kind == "int":
        return (i * 37) % 101 - 50
    return (i * 37) % 256


# (kiln/npy name, numpy dtype, value kind, safetensors dtype)
TYPES = [
    ("f32", np.float32, "float", "F32"),
    ("f64", np.float64, "float", "F64"),
    ("f16", np.float16, "float", "F16"),
    ("i32", np.int32, "int", "I32"),
    ("i64", np.int64, "int", "I64"),
    ("u8", np.uint8, "uint", "U8"),
]


def array(np_dtype, kind, shape=SHAPE):
    n = int(np.prod(shape))
    return values(kind, n).astype(np_dtype).reshape(shape)


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, st_dtype, shape, raw little-endian bytes)."""
    itemsize = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "U8": 1}
    # Reference layout: data ordered by dtype size (largest first), then name.
    order = sorted(tensors, key=lambda t: (-itemsize[t[1]], t[0]))
    header = {"__metadata__": metadata}
    offset = 0
    for name, dt, shape, raw in order:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in order:
            f.write(raw)


def write(folder):
    tensors = []
    for name, np_dtype, kind, st in TYPES:
        a = array(np_dtype, kind)
        np.save(f"{folder}/py_{name}.npy", a)
        tensors.append((f"t.{name}", st, a.shape, a.astype(a.dtype.newbyteorder("<")).tobytes()))
    # bf16 has no numpy dtype: torch makes it, its bit patterns go out as int16.
    bf = torch.tensor(values("float", 105).reshape(SHAPE), dtype=torch.bfloat16)
    tensors.append(("t.bf16", "BF16", SHAPE, bf.view(torch.int16).numpy().astype("<i2").tobytes()))
    tensors.append(("bn.num_batches_tracked", "I64", (), np.array(7, dtype="<i8").tobytes()))
    tensors.append(("empty", "F32", (0, 3), b""))
    write_safetensors(f"{folder}/py.safetensors", tensors, {"format": "pt", "source": "io_fixtures.py"})

    np.save(f"{folder}/py_scalar.npy", np.array(2.5, dtype=np.float32))
    np.save(f"{folder}/py_empty.npy", np.zeros((0, 4), dtype=np.float64))
    for v in [(2, 0), (3, 0)]:
        with open(f"{folder}/py_v{v[0]}.npy", "wb") as f:
            np.lib.format.write_array(f, array(np.float32, "float"), version=v)
    np.save(f"{folder}/py_fortran.npy", np.asfortranarray(array(np.float32, "float")))
    np.save(f"{folder}/py_bigendian.npy", array(np.dtype(">f4"), "float"))
    np.save(f"{folder}/py_bool.npy", np.array([True, False]))


def fail(msg):
    print("io_fixtures check FAILED:", msg)
    sys.exit(1)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    if (8 + n) % 8 != 0:
        fail(f"{path}: header length {n} leaves the data block unaligned")
    header = json.loads(data[8:8 + n].decode())
    return header, data[8 + n:]


def check(folder):
    for name, np_dtype, kind, _ in TYPES:
        path = f"{folder}/kiln_{name}.npy"
        a = np.load(path)
        want = array(np_dtype, kind)
        if a.dtype != want.dtype or a.shape != want.shape or not np.array_equal(a, want):
            fail(f"{path}: got {a.dtype} {a.shape}, want {want.dtype} {want.shape} (or values differ)")
        if not a.flags.c_contiguous:
            fail(f"{path}: not C order")
    header, block = read_safetensors(f"{folder}/kiln.safetensors")
    if header.get("__metadata__") != {"writer": "kiln"}:
        fail(f"metadata {header.get('__metadata__')}")
    keys = [k for k in header if k != "__metadata__"]
    want_keys = [f"t.{n}" for n, *_ in TYPES] + ["t.bf16"]
    if keys != want_keys:
        fail(f"header order {keys}, want {want_keys}")
    end = 0
    for name, np_dtype, kind, st in TYPES:
        e = header[f"t.{name}"]
        b, en = e["data_offsets"]
        if e["dtype"] != st or tuple(e["shape"]) != SHAPE or b != end:
            fail(f"entry t.{name}: {e}")
        got = np.frombuffer(block[b:en], dtype=np.dtype(np_dtype).newbyteorder("<")).reshape(SHAPE)
        if not np.array_equal(got, array(np_dtype, kind)):
            fail(f"values of t.{name}")
        end = en
    e = header["t.bf16"]
    raw = np.frombuffer(block[e["data_offsets"][0]:e["data_offsets"][1]], dtype="<i2").copy()
    got = torch.from_numpy(raw).view(torch.bfloat16).to(torch.float64).numpy().reshape(SHAPE)
    if e["dtype"] != "BF16" or not np.array_equal(got, values("float", 105).reshape(SHAPE)):
        fail("values of t.bf16")
    if e["data_offsets"][1] != len(block):
        fail("data block has trailing bytes")
    print("io_fixtures check OK")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        print(__doc__)
        sys.exit(2)
    (write if sys.argv[1] == "write" else check)(sys.argv[2])
