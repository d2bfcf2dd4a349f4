"""int8 graphs for the CPU: ONNX Runtime's dynamic quantization of the exported encoder and decoder.

Only the MatMuls whose second input is a weight (an initializer) are quantized, per output
channel, to signed int8 (``MatMulInteger`` with activations quantized per call to uint8);
everything else stays fp32: the embedding tables (``Gather``), LayerNorms, softmax, the
attention products of two activations (``MatMulConstBOnly``), and whatever the caller keeps
(``KEEP_GROUPS``). The graphs' inputs and outputs do not change (fp32 K/V caches, log-probs,
TopK candidates), so the same repository layout, engine and step contract serve them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# Weight MatMuls a user can keep in fp32, by the module path torch.onnx writes into node names.
KEEP_GROUPS: dict[str, str] = {
    "output": "/generator/",  # the decoder's projection onto the vocabulary
    "attention": "_proj",  # q/k/v/out projections, self- and cross-attention (and the memory K/V)
    "ffn": "/ffn/",
}


@dataclass(frozen=True)
class QuantizeResult:
    path: Path
    quantized: int  # weight MatMuls now int8
    kept: list[str]  # weight MatMuls left fp32, by name


def weight_matmuls(model) -> list[str]:
    """Names of the MatMul nodes whose B input is an initializer (the ones dynamic quantization touches)."""
    weights = {init.name for init in model.graph.initializer}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and len(n.input) > 1 and n.input[1] in weights]


def parse_keep(text: str | Iterable[str]) -> tuple[str, ...]:
    """``"output,ffn"`` -> ("ffn", "output"); unknown names raise ValueError naming the choices."""
    items = [t.strip() for t in (text.split(",") if isinstance(text, str) else text) if t.strip()]
    unknown = [t for t in items if t not in KEEP_GROUPS]
    if unknown:
        raise ValueError(f"--int8-keep-fp32: unknown group(s) {', '.join(unknown)}; choose from {', '.join(KEEP_GROUPS)}")
    return tuple(sorted(set(items)))


def quantize_int8(source: Path, destination: Path, keep_fp32: Iterable[str] = ()) -> QuantizeResult:
    """Write ``destination``: ``source`` with its weight MatMuls in int8, except the ``keep_fp32`` groups."""
    import onnx  # noqa: PLC0415 - export-only dependencies
    from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: PLC0415

    model = onnx.load(str(source))
    names = weight_matmuls(model)
    patterns = [KEEP_GROUPS[g] for g in parse_keep(keep_fp32)]
    kept = [n for n in names if any(p in n for p in patterns)]
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer logs a line per node on the root logger
    try:
        quantize_dynamic(
            model, str(destination), op_types_to_quantize=["MatMul"], per_channel=True,
            weight_type=QuantType.QInt8, nodes_to_exclude=kept,
            extra_options={"MatMulConstBOnly": True},
            # a graph with external weights keeps them outside (<destination>.data): over 2 GB it must
            use_external_data_format=Path(f"{source}.data").is_file(),
        )
    finally:
        root.setLevel(level)
    result = QuantizeResult(Path(destination), quantized=len(names) - len(kept), kept=kept)
    log.info("%s: %d weight MatMuls in int8, %d kept in fp32", Path(source).name, result.quantized, len(kept))
    return result
