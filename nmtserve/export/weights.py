"""Where a graph's weights live on disk: one copy of each, page-aligned, memory-mapped by ONNX Runtime.

ONNX Runtime maps an external-data initializer into memory instead of copying it (measured on
1.32: a session over a 400 MB ``Gather`` table grows by 9 MB, the pages of the rows it read). So:

* every large initializer of a served graph is written to a data file beside it, at an offset
  aligned to ``ALIGN`` (what a mapping needs); a vocabulary table read by a ``Gather`` then costs
  the rows that are read, not the table, and weights a kernel pre-packs are held once, packed;
* a tensor the encoder's file already holds (a shared source/target embedding) is not written
  again: the decoder graph points at the encoder's file, so the repository holds it once on disk and
  the generate process maps it once for both sessions.

Writing reads one initializer at a time (``tensor_array`` maps external data rather than reading
it), so rewriting a graph costs about its largest tensor in memory, not the graph.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

# Offsets of external tensors: a multiple of the largest page granularity in use (64 KiB on Windows).
ALIGN = 1 << 16
# Initializers from this size on are written to the data file; smaller ones stay in the graph.
EXTERNAL_TENSOR_BYTES = 1 << 20


def data_file(graph: Path) -> Path:
    """Where a graph's own external weights live, when it has them."""
    return graph.with_name(graph.name + ".data")


def _external(t: TensorProto) -> dict[str, str] | None:
    if t.data_location != TensorProto.EXTERNAL:
        return None
    return {e.key: e.value for e in t.external_data}


def locations(graph: Path) -> list[str]:
    """The data files a graph reads its external weights from (relative to its folder), in order of first use."""
    model = onnx.load(str(graph), load_external_data=False)
    seen: dict[str, None] = {}
    for t in model.graph.initializer:
        info = _external(t)
        if info is not None:
            seen.setdefault(info["location"], None)
    return list(seen)


def graph_files(graph: Path) -> list[Path]:
    """The files of an exported graph: the ONNX file and every data file it reads (its own, and
    the encoder's when it shares weights with it)."""
    graph = Path(graph)
    return [graph, *(graph.parent / name for name in locations(graph))]


def tensor_array(t: TensorProto, folder: Path) -> np.ndarray:
    """An initializer's values: in the graph, or mapped (not read) from its external data file."""
    info = _external(t)
    if info is None:
        return numpy_helper.to_array(t)
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
    shape = tuple(t.dims)
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return np.zeros(shape, dtype)
    return np.memmap(folder / info["location"], dtype=dtype, mode="r", offset=int(info.get("offset", 0)), shape=shape)


def digest(array: np.ndarray) -> str:
    a = np.ascontiguousarray(array)
    return hashlib.sha256(f"{a.dtype.str}{a.shape}".encode() + memoryview(a).cast("B")).hexdigest()


@dataclass
class SharedWeights:
    """Tensors already written to a data file in the same folder: digest -> (file, offset, bytes)."""

    entries: dict[str, tuple[str, int, int]] = field(default_factory=dict)


def write_graph(model: onnx.ModelProto, path: Path, source: Path | None = None, external: bool = True,
                shared: SharedWeights | None = None, min_bytes: int = EXTERNAL_TENSOR_BYTES) -> Path:
    """Write ``model`` to ``path``; initializers of ``min_bytes`` and up go to ``data_file(path)``
    (``external``), aligned, or point at the same tensor in ``shared``.

    ``source`` is the folder the model's own external references are relative to (where it was
    loaded from). ``shared`` is updated with what this graph wrote, for the next graph of the folder.
    """
    path = Path(path)
    source = Path(source) if source is not None else path.parent
    shared = shared if shared is not None else SharedWeights()  # a tensor held twice in one graph is written once
    data = data_file(path)
    tmp_data = data.with_name(data.name + ".partial")
    written = 0
    with open(tmp_data, "wb") as out:
        for t in model.graph.initializer:
            array = tensor_array(t, source)
            if not external or array.nbytes < min_bytes:
                if _external(t) is not None:
                    t.CopyFrom(numpy_helper.from_array(np.asarray(array), t.name))
                continue
            key = digest(array)
            if key in shared.entries:
                location, offset, length = shared.entries[key]
            else:
                pad = -written % ALIGN
                out.write(b"\0" * pad)
                offset, length = written + pad, array.nbytes
                out.write(memoryview(np.ascontiguousarray(array)).cast("B"))
                written = offset + length
                location = data.name
                shared.entries[key] = (location, offset, length)
            name, dims, dtype = t.name, list(array.shape), t.data_type
            t.Clear()
            t.name, t.data_type = name, dtype
            t.dims.extend(dims)
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
                entry = t.external_data.add()
                entry.key, entry.value = k, v
            del array
    if written:
        os.replace(tmp_data, data)
    else:
        tmp_data.unlink()
        data.unlink(missing_ok=True)
    onnx.save_model(model, str(path))
    return path


def rewrite(graph: Path, destination: Path, shared: SharedWeights | None = None,
            min_bytes: int = EXTERNAL_TENSOR_BYTES) -> Path:
    """``graph`` written again at ``destination`` (another folder) with ``write_graph``'s layout."""
    graph, destination = Path(graph), Path(destination)
    if destination.parent.resolve() == graph.parent.resolve():
        raise ValueError(f"rewrite {graph.name}: write it to another folder (its data file would be overwritten while read)")
    model = onnx.load(str(graph), load_external_data=False)
    return write_graph(model, destination, graph.parent, shared=shared, min_bytes=min_bytes)
