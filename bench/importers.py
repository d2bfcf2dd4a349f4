"""`nmtserve export` on base-sized checkpoints saved by other toolkits: time and peak memory.

    python bench/importers.py [--root /tmp/toolkit-base] [--toolkits opennmt_py,eole,...]
                              [--checkpoint NAME=PATH ...] [--tokenizer NAME=FILE ...] [--workdir DIR]

The checkpoints come from scripts/toolkits/base_checkpoints.sh (6+6 layers, d_model 512, 8 heads,
ff 2048, 32,000 vocabulary rows a side; each saved by the toolkit itself, optimizer state
included where the toolkit writes it). Default layout under --root:

    opennmt_py/model_step_2.pt   eole/model/   fairseq/checkpoint_last.pt   torch_tutorial/

(``--checkpoint NAME=PATH`` replaces one; an OpenNMT-py or fairseq folder takes its newest .pt).
Each runs once, one after the other, as ``python -m nmtserve.cli export PATH -r REPO
[--tokenizer FILE]`` in a child process with the export's defaults (CPU, fp32, parity check on
50 sentences), into a fresh repository under --workdir (a temporary folder by default, removed
after each). Reported per toolkit: the checkpoint's size on disk (the file, or every file of the
folder, links followed once), the parameters the import counted, the child's wall time, the
export's own stage times (its "exported to ... (load 1.1s, onnx ...)" line), the child's peak RSS
(``os.wait4``'s ru_maxrss: the high-water mark, loading included) and the stage it was reached in
(VmRSS sampled every 0.1 s against the stages' "done" log lines), peak / checkpoint, the
repository's size, and the CPU share other processes used meanwhile (a row measured beside a
busy process is not comparable). The CPU's model and vector flags (AVX2, AVX-512, VNNI, AMX) are
printed with the table. Writes bench/results/importers-*.json.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, OtherLoad, load_average, machine, write_json  # noqa: E402
from _memory import disk_usage  # noqa: E402

TOOLKITS = ("opennmt_py", "eole", "fairseq", "torch_tutorial")
DEFAULT_LAYOUT = {"opennmt_py": "opennmt_py", "eole": "eole/model", "fairseq": "fairseq",
                  "torch_tutorial": "torch_tutorial"}
STAGE_LINE = re.compile(r"nmtserve\.export\.pipeline: (.+?) done in ([0-9.]+) s")
SUMMARY = re.compile(r"^exported to \S+ \((.*)\)$")
PARAMETERS = re.compile(r"\((\d+) parameters")
FLAGS = (("avx2", "AVX2"), ("avx512f", "AVX-512F"), ("avx512_vnni", "AVX-512 VNNI"), ("avx512_bf16", "AVX-512 BF16"),
         ("avx_vnni", "AVX-VNNI"), ("amx_tile", "AMX"), ("amx_int8", "AMX-INT8"), ("amx_bf16", "AMX-BF16"))


def cpu_flags() -> dict:
    """The CPU's model name and which of the vector extensions that matter here /proc/cpuinfo lists."""
    model, flags = "unknown", set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "unknown":
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return {"model": model, "present": [name for flag, name in FLAGS if flag in flags],
            "absent": [name for flag, name in FLAGS if flag not in flags]}


def resolve(root: Path, name: str, given: dict[str, Path]) -> Path:
    path = given.get(name) or root / DEFAULT_LAYOUT[name]
    if path.is_dir() and name in ("opennmt_py", "fairseq"):
        pts = sorted(path.glob("*.pt"), key=lambda p: p.stat().st_mtime)
        if not pts:
            raise SystemExit(f"{name}: no .pt file in {path} (scripts/toolkits/base_checkpoints.sh makes one)")
        path = pts[-1]
    if not path.exists():
        raise SystemExit(f"{name}: {path} does not exist (scripts/toolkits/base_checkpoints.sh makes it)")
    return path


def checkpoint_bytes(path: Path) -> tuple[int, dict[str, int]]:
    """Bytes of the file, or of every file in the folder (each real file once), and the files."""
    if path.is_file():
        return path.stat().st_size, {path.name: path.stat().st_size}
    files: dict[str, int] = {}
    seen = set()
    for p in sorted(path.rglob("*")):
        real = p.resolve()
        if real.is_file() and real not in seen:
            seen.add(real)
            files[str(p.relative_to(path))] = real.stat().st_size
    return sum(files.values()), files


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_export(name: str, checkpoint: Path, tokenizer: Path | None, repo: Path, log_path: Path) -> dict:
    cmd = [sys.executable, "-m", "nmtserve.cli", "export", str(checkpoint), "-r", str(repo)]
    if tokenizer is not None:
        cmd += ["--tokenizer", str(tokenizer)]
    print(f"--- {name}: {' '.join(cmd)}", flush=True)
    samples: list[tuple[float, int]] = []
    stages: list[tuple[float, str]] = []  # (time the stage ended, its name)
    others = OtherLoad().start()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            samples.append((time.monotonic() - t0, rss_kb(proc.pid)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    lines = []
    with log_path.open("w") as log:
        for line in proc.stdout:
            log.write(line)
            lines.append(line.rstrip("\n"))
            if m := STAGE_LINE.search(line):
                stages.append((time.monotonic() - t0, m.group(1)))
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    stop.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    out = {"command": cmd, "returncode": proc.returncode, "wall_s": round(wall, 2),
           "peak_rss_mb": round(usage.ru_maxrss / 1024), "user_s": round(usage.ru_utime, 1),
           "sys_s": round(usage.ru_stime, 1), "other_processes_cpu_pct": round(others.stop(), 1),
           "others_top": others.top, "load_after": load_average(), "log": str(log_path)}
    summary = next((m.group(1) for line in lines if (m := SUMMARY.match(line))), None)
    if summary:
        out["stages_s"] = {k.strip(): float(v.rstrip("s")) for k, _, v in
                           (part.strip().rpartition(" ") for part in summary.split(","))}
    else:
        out["stages_s"] = {stage: round(b - a, 1) for (a, _), (b, stage) in zip([(0.0, ""), *stages], stages, strict=False)}
    if m := next((PARAMETERS.search(line) for line in lines if "imported" in line and PARAMETERS.search(line)), None):
        out["parameters"] = int(m.group(1))
    if samples:
        at, kb = max(samples, key=lambda s: s[1])
        out["sampled_peak_rss_mb"] = round(kb / 1024)
        out["peak_in_stage"] = next((stage for end, stage in stages if at <= end), "after the last stage")
    if proc.returncode != 0:
        out["error_tail"] = lines[-25:]
    return out


def parse_pairs(items: list[str], what: str) -> dict[str, Path]:
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or name not in TOOLKITS:
            raise SystemExit(f"{what} {item!r}: NAME=PATH with NAME one of {', '.join(TOOLKITS)}")
        out[name] = Path(path).expanduser().resolve()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path("/tmp/toolkit-base"))
    parser.add_argument("--toolkits", default=",".join(TOOLKITS))
    parser.add_argument("--checkpoint", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--tokenizer", action="append", default=[], metavar="NAME=FILE",
                        help="passed to that toolkit's export as --tokenizer")
    parser.add_argument("--workdir", type=Path, help="repositories and logs here (kept); default a temporary folder")
    args = parser.parse_args()
    names = [n for n in args.toolkits.split(",") if n]
    if unknown := set(names) - set(TOOLKITS):
        raise SystemExit(f"unknown toolkits {sorted(unknown)}: {', '.join(TOOLKITS)}")
    given, tokenizers = parse_pairs(args.checkpoint, "--checkpoint"), parse_pairs(args.tokenizer, "--tokenizer")
    paths = {n: resolve(args.root, n, given) for n in names}
    cpu = cpu_flags()
    info = {"machine": machine(), "cpu_flags": cpu, "env": {k: os.environ.get(k) for k in
                                                            ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ}}
    print(f"CPU: {cpu['model']}, {os.cpu_count()} cores; flags: {', '.join(cpu['present']) or 'none'} "
          f"(absent: {', '.join(cpu['absent']) or 'none'}); load before {load_average()}", flush=True)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="nmtserve-bench-importers-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = {}
    try:
        for name in names:
            size, files = checkpoint_bytes(paths[name])
            repo = work / f"repository-{name}"
            shutil.rmtree(repo, ignore_errors=True)
            row = {"checkpoint": str(paths[name]), "checkpoint_bytes": size, "checkpoint_files": files,
                   "load_before": load_average()}
            row.update(run_export(name, paths[name], tokenizers.get(name), repo, work / f"export-{name}.log"))
            if row["returncode"] == 0:
                row["repository_bytes"] = disk_usage(repo)["bytes"]
            else:
                print(f"    FAILED ({row['returncode']}):\n      " + "\n      ".join(row["error_tail"]), flush=True)
            if args.workdir is None:
                shutil.rmtree(repo, ignore_errors=True)
            rows[name] = row
            print(f"    {row['wall_s']:.1f} s, peak RSS {row['peak_rss_mb']} MB, others' CPU "
                  f"{row['other_processes_cpu_pct']}%", flush=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    print_table(rows, cpu)
    print(f"written {write_json('importers', {**info, 'rows': rows})}")


def print_table(rows: dict, cpu: dict) -> None:
    mb = 2**20
    print(f"\nCPU: {cpu['model']}, {os.cpu_count()} cores; {', '.join(cpu['present']) or 'no AVX2'}"
          f"{'; no ' + ', '.join(cpu['absent']) if cpu['absent'] else ''}\n")
    print("| toolkit | checkpoint on disk (MB) | parameters | export wall (s) | load / onnx / parity reference / "
          "parity / other stages (s) | peak RSS MB (stage) | peak / checkpoint | repository (MB) | others' CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        ckpt = r["checkpoint_bytes"] / mb
        if r["returncode"] != 0:
            print(f"| {name} | {ckpt:.0f} | - | FAILED after {r['wall_s']:.1f} | - | {r['peak_rss_mb']} | "
                  f"{r['peak_rss_mb'] / ckpt:.2f}x | - | {r['other_processes_cpu_pct']:.0f}% |")
            continue
        s = dict(r["stages_s"])
        main = [s.pop(k, 0.0) for k in ("load", "onnx", "parity reference", "parity")]
        rest = sum(s.values())
        print(f"| {name} | {ckpt:.0f} | {r.get('parameters', 0) / 1e6:.1f} M | {r['wall_s']:.1f} | "
              f"{' / '.join(f'{v:.1f}' for v in main)} / {rest:.1f} | {r['peak_rss_mb']} "
              f"({r.get('peak_in_stage', '?')}) | {r['peak_rss_mb'] / ckpt:.2f}x | "
              f"{r['repository_bytes'] / mb:.0f} | {r['other_processes_cpu_pct']:.0f}% |")


if __name__ == "__main__":
    main()
