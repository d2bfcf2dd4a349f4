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


def tensor_threshold(external_data_bytes: int) -> int:
    """The smallest initializer written to the data file when a graph's weights go there because
    they reach ``external_data_bytes``: ``EXTERNAL_TENSOR_BYTES``, or less under a lower limit (a
    layout forced on a small model, as the tests do, moves its small tensors too)."""
    return min(EXTERNAL_TENSOR_BYTES, max(external_data_bytes, 1024))


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


class DataWriter:
    """Initializers appended to one data file at ``ALIGN``-ed offsets as they come, each held in
    memory only while it is written; a tensor ``shared`` already holds (in this graph or another
    graph's file in the same folder) is pointed at, not written again. ``close`` when done."""

    def __init__(self, data: Path, shared: SharedWeights | None = None):
        self.data, self.shared = Path(data), shared if shared is not None else SharedWeights()
        self._partial = self.data.with_name(self.data.name + ".partial")
        self._out = open(self._partial, "wb")  # noqa: SIM115 - closed by close()
        self.written = 0

    def tensor(self, name: str, array: np.ndarray, data_type: int | None = None) -> TensorProto:
        """An initializer ``name`` with ``array``'s values, in the data file."""
        key = digest(array)
        if key in self.shared.entries:
            location, offset, length = self.shared.entries[key]
        else:
            pad = -self.written % ALIGN
            self._out.write(b"\0" * pad)
            offset, length = self.written + pad, array.nbytes
            self._out.write(memoryview(np.ascontiguousarray(array)).cast("B"))
            self.written = offset + length
            location = self.data.name
            self.shared.entries[key] = (location, offset, length)
        t = TensorProto()
        t.name = name
        t.data_type = data_type if data_type is not None else onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
        t.dims.extend(array.shape)
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
            entry = t.external_data.add()
            entry.key, entry.value = k, v
        return t

    def close(self) -> None:
        """The data file in place (none when nothing was written to it)."""
        self._out.close()
        if self.written:
            os.replace(self._partial, self.data)
        else:
            self._partial.unlink()
            self.data.unlink(missing_ok=True)


def write_graph(model: onnx.ModelProto, path: Path, source: Path | None = None, external: bool = True,
                shared: SharedWeights | None = None, min_bytes: int = EXTERNAL_TENSOR_BYTES) -> Path:
    """Write ``model`` to ``path``; initializers of ``min_bytes`` and up go to ``data_file(path)``
    (``external``), aligned, or point at the same tensor in ``shared``.

    ``source`` is the folder the model's own external references are relative to (where it was
    loaded from). ``shared`` is updated with what this graph wrote, for the next graph of the folder.
    """
    path = Path(path)
    source = Path(source) if source is not None else path.parent
    writer = DataWriter(data_file(path), shared)  # a tensor held twice in one graph is written once
    for t in model.graph.initializer:
        array = tensor_array(t, source)
        if not external or array.nbytes < min_bytes:
            if _external(t) is not None:
                t.CopyFrom(numpy_helper.from_array(np.asarray(array), t.name))
            continue
        t.CopyFrom(writer.tensor(t.name, array, t.data_type))
        del array
    writer.close()
    onnx.save_model(model, str(path))
    return path


def save_arrays(model: onnx.ModelProto, arrays: dict[str, np.ndarray], path: Path, external: bool,
                shared: SharedWeights | None = None, min_bytes: int = EXTERNAL_TENSOR_BYTES) -> Path:
    """Write ``model`` (its initializers not yet in it) to ``path`` with ``arrays`` as its
    initializers, streamed: each array (a view of the weights it comes from, where it can be) is
    made contiguous and written to the data file one at a time (``external``), or, small, kept in
    the graph."""
    path = Path(path)
    writer = DataWriter(data_file(path), shared) if external else None
    inits = model.graph.initializer
    for name, array in arrays.items():
        if writer is not None and array.nbytes >= min_bytes:
            inits.append(writer.tensor(name, array))
        else:
            inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
    if writer is not None:
        writer.close()
    else:
        data_file(path).unlink(missing_ok=True)
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
