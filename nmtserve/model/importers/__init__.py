"""One import pipeline for every checkpoint format ``nmtserve export`` reads.

``FORMATS`` is the registry: each entry says how to recognise its format from what a path holds
(a Hugging Face ``model_type``, an OpenNMT-py ``.pt``, an eole directory, a fairseq checkpoint,
a declared ``torch.nn.Transformer`` state dict) and which module loads it. Every importer is a
thin table over the shared steps of ``base``; ``load_any`` picks one, and the formats named in
errors and in ``--help`` come from here.
"""

from __future__ import annotations

import importlib
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported by the importers, not by the registry (the CLI's --help reads it)
    from ..checkpoint import Checkpoint


class UnknownFormat(ValueError):
    """A path holds no checkpoint format nmtserve reads; the message lists the formats."""

DECLARATION = "declaration.json"  # a torch.nn.Transformer state dict's declaration (importers.torch_module)
FAIRSEQ_CHECKPOINTS = ("checkpoint_best.pt", "checkpoint_last.pt", "model.pt")


@dataclass(frozen=True)
class Format:
    name: str
    title: str  # how --help and errors name it
    module: str  # nmtserve.model.importers.<module>.load(path, options) -> Checkpoint
    detect: Callable[[Path, Any], bool]  # (the path, what it holds: see _holding) -> is it this format

    def load(self, path: Path, options) -> Checkpoint:
        return importlib.import_module(f"{__name__}.{self.module}").load(path, options)


def _config(path: Path) -> dict:
    try:
        data = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _hf(types: tuple[str, ...]) -> Callable[[Path, Any], bool]:
    return lambda path, held: path.is_dir() and _config(path).get("model_type") in types


def _is_nmtserve(path: Path, held: Any) -> bool:
    return path.is_dir() and (path / "model.safetensors").is_file() and \
        _config(path).get("model_type", "nmtserve-transformer") == "nmtserve-transformer" and "model" not in _config(path)


def _is_eole(path: Path, held: Any) -> bool:
    return path.is_dir() and isinstance(_config(path).get("model"), dict) and any(path.glob("model.*.safetensors"))


def _is_opennmt(path: Path, held: Any) -> bool:
    return isinstance(held, dict) and "opt" in held and "model" in held and "vocab" in held


def _is_fairseq(path: Path, held: Any) -> bool:
    return isinstance(held, dict) and "model" in held and ("cfg" in held or "args" in held) and "opt" not in held


def _is_declared(path: Path, held: Any) -> bool:
    return isinstance(held, dict) and held.get("format") == "torch.nn.Transformer"


FORMATS: tuple[Format, ...] = (
    Format("nmtserve", "nmtserve checkpoint directory (config.json + model.safetensors)", "native", _is_nmtserve),
    Format("marian", "Hugging Face Marian / opus-mt directory (model_type marian)", "marian", _hf(("marian",))),
    Format("hf-multilingual", "Hugging Face NLLB-200 / M2M100 / mBART-50 directory (model_type m2m_100, mbart)",
           "hf_multilingual", _hf(("m2m_100", "mbart"))),
    Format("opennmt-py", "OpenNMT-py 3.x transformer checkpoint (.pt with model, generator, vocab, opt)",
           "opennmt", _is_opennmt),
    Format("eole", "eole model directory (config.json + model.00.safetensors + vocab.json)", "eole", _is_eole),
    Format("fairseq", "fairseq transformer checkpoint (.pt with cfg/args, dict.<lang>.txt beside it)",
           "fairseq", _is_fairseq),
    Format("torch.nn.Transformer", f"a torch.nn.Transformer state dict with a {DECLARATION} declaring it "
           "(docs/importers.md)", "torch_module", _is_declared),
)


def formats_help() -> str:
    """One line per format, for ``--help`` and errors."""
    return "; ".join(f.title for f in FORMATS)


def _pickle_file(path: Path) -> Path | None:
    """The .pt file a path names: itself, or in a directory the one .pt (fairseq's best first)."""
    if path.is_file():
        return path if zipfile.is_zipfile(path) or path.suffix in (".pt", ".pth", ".bin") else None
    if not path.is_dir():
        return None
    if any(path.glob("dict.*.txt")):  # a fairseq folder: its best checkpoint first
        for name in FAIRSEQ_CHECKPOINTS:
            if (path / name).is_file():
                return path / name
    found = sorted(path.glob("*.pt"))  # else the one .pt it holds: of several, none is guessed
    return found[0] if len(found) == 1 else None


def _holding(path: Path) -> tuple[Path, Any]:
    """(the file a format reads, what it holds) for the detectors: a declaration's JSON, a .pt
    file's contents (loaded once, safely), or nothing for a directory the others read by name."""
    declaration = path / DECLARATION if path.is_dir() else path
    if declaration.suffix == ".json" and declaration.is_file():
        try:
            return declaration, json.loads(declaration.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise UnknownFormat(f"{declaration}: not JSON ({exc})") from exc
    if path.is_dir() and (path / "config.json").is_file():
        return path, None
    pickled = _pickle_file(path)
    if pickled is None:
        return path, None
    from .base import ImportFailure, load_pickled

    try:
        return pickled, load_pickled(pickled)
    except ImportFailure as exc:
        raise UnknownFormat(f"{exc}\nFormats nmtserve reads: {formats_help()}") from exc


def detect(path: Path) -> tuple[Format, Path, Any]:
    """The format of ``path`` (a file or a directory), the file it is read from and what it holds."""
    path = Path(path)
    if not path.exists():
        raise UnknownFormat(f"{path}: no such file or directory")
    target, held = _holding(path)
    for fmt in FORMATS:
        if fmt.detect(target, held):
            return fmt, target, held
    what = "a directory" if path.is_dir() else "a file"
    several = sorted(p.name for p in path.glob("*.pt")) if path.is_dir() else []
    if len(several) > 1:
        raise UnknownFormat(f"{path}: holds several checkpoints ({', '.join(several)}): give the file to export")
    hint = ""
    if isinstance(held, dict):
        hint = f" (it holds {', '.join(sorted(map(str, held))[:8])})"
    elif path.is_dir() and (path / "config.json").is_file():
        hint = f" (its config.json's model_type {_config(path).get('model_type')!r} is not supported)"
    raise UnknownFormat(f"{path}: {what} of no format nmtserve reads{hint}. Formats: {formats_help()}")


def load_any(path: Path, options=None) -> Checkpoint:
    """Detect ``path``'s format and import it (``options``: ``base.ImportOptions``)."""
    from .base import ImportOptions

    fmt, target, held = detect(Path(path))
    options = options or ImportOptions()
    if isinstance(held, dict) and fmt.name in ("opennmt-py", "fairseq"):
        return importlib.import_module(f"{__name__}.{fmt.module}").load(target, options, held=held)
    return fmt.load(target, options)
