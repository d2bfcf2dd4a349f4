#!/usr/bin/env bash
# Base-sized checkpoints (6+6 layers, d_model 512, 8 heads, ff 2048, about 32,000 vocabulary
# entries a side) saved by each toolkit itself, for timing `nmtserve export` on them
# (bench/importers.py). The weights do not matter: OpenNMT-py, eole and fairseq train 2 steps on
# the first 2,000 sentences of the toolkit data; torch.nn.Transformer is the tutorial's model
# untrained (scripts/toolkits/torch_tutorial.py --base).
#
#     bash scripts/toolkits/base_checkpoints.sh [OUT] [TOOLKIT ...]   # OUT default /tmp/toolkit-base
#
# TOOLKIT: opennmt_py eole fairseq torch_tutorial (default: all). Uses the throwaway venvs the
# per-toolkit scripts make (ONMT_VENV, EOLE_VENV, FAIRSEQ_VENV; defaults
# ${TMPDIR:-/tmp}/nmtserve-<toolkit>/venv; run scripts/toolkits/<toolkit>.sh once to make one) and
# the data of scripts/toolkits/data.py ($TOOLKIT_DATA, default ${TMPDIR:-/tmp}/tkdata; written
# with the repo's .venv when missing). Nothing is written in the repository.
#
# The vocabularies: the toolkit data's sentencepiece model has 800 pieces, so each vocabulary
# file (OpenNMT-py's and eole's "piece<TAB>count", fairseq's dict.txt) is the real one padded with
# made-up pieces "filler00001".. to 31,996 entries: 32,000 rows with each toolkit's 4 specials.
# Each checkpoint is what the toolkit saved with its defaults (optimizer state included):
#   OUT/opennmt_py/model_step_2.pt (+ spm.model: the opt names "spm.model", relative)
#   OUT/eole/model/                (eole's model_path: step_2/ and its links; spm.model copied in by eole)
#   OUT/fairseq/checkpoint_last.pt (+ dict.en.txt, dict.fr.txt, spm.model beside it)
#   OUT/torch_tutorial/model.pt    (+ declaration.json with heads 8, vocab.json of 32,000, spm.model)
# Work files (configs, logs, binarized data) go to OUT/work/. About 5 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
repo="$PWD"
out="$(mkdir -p "${1:-/tmp/toolkit-base}" && cd "${1:-/tmp/toolkit-base}" && pwd)"
shift || true
toolkits=("$@")
[ ${#toolkits[@]} -gt 0 ] || toolkits=(opennmt_py eole fairseq torch_tutorial)
tmp="${TMPDIR:-/tmp}"
data="${TOOLKIT_DATA:-$tmp/tkdata}"
onmt_venv="${ONMT_VENV:-$tmp/nmtserve-opennmt-py/venv}"
eole_venv="${EOLE_VENV:-$tmp/nmtserve-eole/venv}"
fairseq_venv="${FAIRSEQ_VENV:-$tmp/nmtserve-fairseq/venv}"
work="$out/work"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONWARNINGS=ignore TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
VOCAB_ENTRIES=31996  # + 4 specials = 32000

step() { printf '==> %s (%s)\n' "$*" "$(date +%T)" >&2; }
need_venv() { [ -x "$1/bin/python" ] || { echo "no venv $1: run scripts/toolkits/$2.sh first" >&2; exit 1; }; }
run_logged() {  # LOG CMD...: the command's output to LOG; its tail on failure
  local log="$1"; shift
  "$@" > "$log" 2>&1 || { tail -30 "$log" >&2; echo "failed: $*" >&2; exit 1; }
}
# pad_vocab IN OUT SEP: IN's "piece SEP count" lines, then fillers up to VOCAB_ENTRIES lines
pad_vocab() {
  python3 - "$1" "$2" "$3" "$VOCAB_ENTRIES" <<'EOF'
import sys
src, dst, sep, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
lines = [l for l in open(src, encoding="utf-8").read().splitlines() if l.strip()]
lines += [f"filler{i:05d}{sep}1" for i in range(1, n - len(lines) + 1)]
open(dst, "w", encoding="utf-8").write("\n".join(lines[:n]) + "\n")
EOF
}

if [ ! -f "$data/spm.model" ] || [ ! -f "$data/train.sp.en" ]; then
  step "data: scripts/toolkits/data.py $data"
  .venv/bin/python scripts/toolkits/data.py "$data"
fi
mkdir -p "$work/data"
for f in train.en train.fr train.sp.en train.sp.fr; do head -n 2000 "$data/$f" > "$work/data/$f"; done
for f in valid.en valid.fr valid.sp.en valid.sp.fr; do head -n 100 "$data/$f" > "$work/data/$f"; done
cp "$data/spm.model" "$work/data/spm.model"

base_model_onmt() {
  cat <<'EOF'
encoder_type: transformer
decoder_type: transformer
self_attn_type: scaled-dot
position_encoding: true
hidden_size: 512
word_vec_size: 512
heads: 8
transformer_ff: 2048
enc_layers: 6
dec_layers: 6
EOF
}

make_opennmt_py() {
  need_venv "$onmt_venv" opennmt_py
  local w="$work/opennmt_py" dest="$out/opennmt_py"
  rm -rf "$w" "$dest"; mkdir -p "$w" "$dest"
  cp "$data/spm.model" "$w/spm.model"
  step "OpenNMT-py: onmt_build_vocab, padded to $VOCAB_ENTRIES entries"
  cat > "$w/vocab.yaml" <<EOF
save_data: $w/samples
src_vocab: $w/vocab.src.real
tgt_vocab: $w/vocab.tgt.real
overwrite: true
n_sample: -1
src_subword_model: spm.model
tgt_subword_model: spm.model
data:
  corpus_1: {path_src: $work/data/train.en, path_tgt: $work/data/train.fr, transforms: [sentencepiece]}
EOF
  (cd "$w" && run_logged vocab.log "$onmt_venv/bin/onmt_build_vocab" -config vocab.yaml)
  pad_vocab "$w/vocab.src.real" "$w/vocab.src" $'\t'
  pad_vocab "$w/vocab.tgt.real" "$w/vocab.tgt" $'\t'
  step "OpenNMT-py: onmt_train, 2 steps -> $dest/model_step_2.pt"
  { cat <<EOF
overwrite: true
src_vocab: $w/vocab.src
tgt_vocab: $w/vocab.tgt
src_subword_model: spm.model
tgt_subword_model: spm.model
transforms: [sentencepiece]
data:
  corpus_1: {path_src: $work/data/train.en, path_tgt: $work/data/train.fr}
save_model: $dest/model
train_steps: 2
save_checkpoint_steps: 2
valid_steps: 1000000
report_every: 1
seed: 1234
num_workers: 0
world_size: 1
gpu_ranks: []
bucket_size: 2048
optim: adam
adam_beta2: 0.998
learning_rate: 2.0
decay_method: noam
warmup_steps: 400
label_smoothing: 0.1
batch_type: tokens
batch_size: 1024
param_init: 0.0
param_init_glorot: true
dropout: [0.1]
attention_dropout: [0.1]
EOF
    base_model_onmt; } > "$w/train.yaml"
  (cd "$w" && run_logged train.log "$onmt_venv/bin/onmt_train" -config train.yaml)
  cp "$data/spm.model" "$dest/spm.model"
  ls -la "$dest" >&2
}

make_eole() {
  need_venv "$eole_venv" eole
  local w="$work/eole" dest="$out/eole"
  rm -rf "$w" "$dest"; mkdir -p "$w" "$dest"
  write_eole_yaml() {  # SRC_VOCAB TGT_VOCAB
    cat <<EOF
save_data: $w/samples
src_vocab: $1
tgt_vocab: $2
share_vocab: false
overwrite: true
seed: 1234
report_every: 1
transforms: [sentencepiece]
transforms_configs:
  sentencepiece: {src_subword_model: $work/data/spm.model, tgt_subword_model: $work/data/spm.model}
data:
  corpus_1: {path_src: $work/data/train.en, path_tgt: $work/data/train.fr}
  valid: {path_src: $work/data/valid.en, path_tgt: $work/data/valid.fr}
model:
  architecture: transformer
  hidden_size: 512
  layers: 6
  heads: 8
  transformer_ff: 2048
  embeddings: {word_vec_size: 512, position_encoding_type: SinusoidalInterleaved}
training:
  model_path: $dest/model
  save_format: safetensors
  train_steps: 2
  valid_steps: 1000000
  save_checkpoint_steps: 1000000
  keep_checkpoint: 1
  world_size: 1
  gpu_ranks: []
  num_workers: 0
  batch_type: tokens
  batch_size: 1024
  valid_batch_size: 256
  bucket_size: 2048
  optim: adam
  learning_rate: 0.002
  adam_beta2: 0.98
  decay_method: none
  param_init_method: xavier_uniform
  max_grad_norm: 1.0
  dropout: [0.1]
  attention_dropout: [0.1]
  label_smoothing: 0.1
EOF
  }
  step "eole: build_vocab, padded to $VOCAB_ENTRIES entries"
  write_eole_yaml "$w/vocab.src.real" "$w/vocab.tgt.real" > "$w/vocab.yaml"
  run_logged "$w/build_vocab.log" "$eole_venv/bin/eole" build_vocab -config "$w/vocab.yaml" -n_sample -1 -num_threads 1
  pad_vocab "$w/vocab.src.real" "$w/vocab.src" $'\t'
  pad_vocab "$w/vocab.tgt.real" "$w/vocab.tgt" $'\t'
  step "eole: train, 2 steps -> $dest/model"
  write_eole_yaml "$w/vocab.src" "$w/vocab.tgt" > "$w/train.yaml"
  run_logged "$w/train.log" "$eole_venv/bin/eole" train -config "$w/train.yaml"
  ls -laL "$dest/model" >&2
}

make_fairseq() {
  need_venv "$fairseq_venv" fairseq
  local w="$work/fairseq" dest="$out/fairseq"
  rm -rf "$w" "$dest"; mkdir -p "$w" "$dest"
  export PATH="$fairseq_venv/bin:$PATH"
  step "fairseq: dictionaries padded to $VOCAB_ENTRIES entries, fairseq-preprocess"
  run_logged "$w/dict.log" fairseq-preprocess --source-lang en --target-lang fr --trainpref "$work/data/train.sp" \
    --destdir "$w/dicts" --dict-only --workers 1
  pad_vocab "$w/dicts/dict.en.txt" "$w/dict.en.txt" " "
  pad_vocab "$w/dicts/dict.fr.txt" "$w/dict.fr.txt" " "
  run_logged "$w/preprocess.log" fairseq-preprocess --source-lang en --target-lang fr \
    --trainpref "$work/data/train.sp" --validpref "$work/data/valid.sp" --destdir "$w/bin" \
    --srcdict "$w/dict.en.txt" --tgtdict "$w/dict.fr.txt" --workers 1
  step "fairseq: fairseq-train --arch transformer (base), 2 updates -> $dest/checkpoint_last.pt"
  # training runs in the data folder: cfg.bpe records sentencepiece_model "spm.model" (relative)
  (cd "$work/data" && run_logged "$w/train.log" fairseq-train "$w/bin" --save-dir "$dest" \
    --arch transformer --optimizer adam --adam-betas "(0.9,0.98)" --lr 5e-4 --lr-scheduler inverse_sqrt \
    --warmup-updates 4000 --dropout 0.1 --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
    --max-tokens 1024 --max-update 2 --seed 1 --num-workers 0 --cpu --no-epoch-checkpoints \
    --disable-validation --log-format simple --log-interval 1 \
    --bpe sentencepiece --sentencepiece-model spm.model)
  cp "$w/bin/dict.en.txt" "$w/bin/dict.fr.txt" "$data/spm.model" "$dest/"
  ls -la "$dest" >&2
}

make_torch_tutorial() {
  local dest="$out/torch_tutorial" fixture="$repo/tests/fixtures/toolkits/torch_tutorial"
  rm -rf "$dest"; mkdir -p "$dest"
  step "torch.nn.Transformer: scripts/toolkits/torch_tutorial.py --base $dest/model.pt"
  .venv/bin/python scripts/toolkits/torch_tutorial.py --base "$dest/model.pt"
  cp "$fixture/spm.model" "$dest/"
  python3 - "$fixture" "$dest" <<'EOF'
import json, sys
from pathlib import Path
fixture, dest = Path(sys.argv[1]), Path(sys.argv[2])
decl = json.loads((fixture / "declaration.json").read_text())
decl["heads"] = 8
decl["comment"] = "base-size untrained Seq2SeqTransformer (scripts/toolkits/torch_tutorial.py --base)"
(dest / "declaration.json").write_text(json.dumps(decl, indent=2) + "\n")
vocab = json.loads((fixture / "vocab.json").read_text())
vocab += [f"filler{i:05d}" for i in range(1, 32000 - len(vocab) + 1)]
(dest / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=0) + "\n")
print(f"{dest}: declaration.json (heads 8), vocab.json ({len(vocab)} entries), spm.model")
EOF
}

for t in "${toolkits[@]}"; do
  case "$t" in
    opennmt_py|eole|fairseq|torch_tutorial) s=$SECONDS; "make_$t"; echo "    ($((SECONDS - s)) s)" >&2 ;;
    *) echo "unknown toolkit $t (opennmt_py eole fairseq torch_tutorial)" >&2; exit 2 ;;
  esac
done
du -shL "$out"/{opennmt_py,eole,fairseq,torch_tutorial} 2>/dev/null >&2 || true
