#!/usr/bin/env bash
# Rebuilds tests/fixtures/toolkits/fairseq/ from nothing: real fairseq-trained checkpoints and
# fairseq's own translations of them, for the fairseq importer's tests.
#
#     bash scripts/toolkits/fairseq.sh          # from anywhere; ~15 min on one CPU thread
#
# Everything fairseq needs lives in a throwaway directory outside the repository,
# $FAIRSEQ_WORK (default ${TMPDIR:-/tmp}/nmtserve-fairseq): a venv with torch (CPU build),
# fairseq-fixed 0.12.3.1 built from its sdist (PyPI's fairseq 0.12.2 does not import on Python
# 3.11) and ctranslate2; the data (scripts/toolkits/data.py, or $TOOLKIT_DATA if it already holds
# it); the binarized data and the training runs. A second run reuses what is there (venv, data,
# checkpoints); `rm -rf "$FAIRSEQ_WORK"` starts over. Only the fixture folder is written in the
# repository. Needs python3.11 (or $PYTHON), a C/C++ compiler, and the repository's .venv
# (scripts/setup.sh) for data.py.
#
# Checkpoints (tiny `transformer`: embed 64, ffn 256, 2+2 layers, 4 heads, 800 updates):
#   checkpoint_best.pt   post-norm, separate dictionaries, no sharing (fairseq's defaults)
#   shared/              --joined-dictionary --share-all-embeddings, pre-norm (both sides)
#   lnemb/               --layernorm-embedding --no-scale-embedding
#                        --share-decoder-input-output-embed --activation-fn gelu
#   lstm.pt              --arch lstm, 5 updates: the "not a Transformer" case
# Each is saved with --no-save-optimizer-state (fairseq's own option: the checkpoint is what
# fairseq wrote, minus `last_optimizer_state`). Each transformer folder gets expected.json: the
# first 100 test sentences (source.en) translated by fairseq-interactive at beam 4 and beam 1
# with fairseq's default lenpen / max_len_a / max_len_b / min_len, and by CTranslate2's
# conversion of the same checkpoint (scripts/toolkits/fairseq_fixture.py).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORK="${FAIRSEQ_WORK:-${TMPDIR:-/tmp}/nmtserve-fairseq}"
VENV="$WORK/venv"
DATA="${TOOLKIT_DATA:-$WORK/data}"
FIX="$ROOT/tests/fixtures/toolkits/fairseq"
PYTHON="${PYTHON:-python3.11}"
FAIRSEQ_VERSION=0.12.3.1
CT2_VERSION=4.8.5

# one thread everywhere: reproducible numbers, and the machine is shared
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
# fairseq 0.12's own torch.load calls predate torch 2.6's weights_only=True default and its
# checkpoints hold an argparse.Namespace: let fairseq (only) load them the old way
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
export PYTHONWARNINGS=ignore

mkdir -p "$WORK"
log() { printf '\n== %s (%s)\n' "$*" "$(date +%T)"; }

# --- 1. the throwaway venv -------------------------------------------------------------------
if ! "$VENV/bin/python" -c "import fairseq, ctranslate2" 2>/dev/null; then
  log "venv in $VENV"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  # torch's CPU build (never PyPI's CUDA torch), and what building fairseq's extensions needs
  # shellcheck disable=SC2046
  "$VENV/bin/pip" install -q $(PYTHON="$VENV/bin/python" bash "$ROOT/scripts/torch-cpu-args.sh") \
    "numpy<2" cython setuptools wheel
  log "building fairseq-fixed $FAIRSEQ_VERSION (a few minutes)"
  (cd "$WORK" && MAX_JOBS=1 "$VENV/bin/pip" wheel -q --no-deps --no-build-isolation \
     "fairseq-fixed==$FAIRSEQ_VERSION" -w "$WORK/wheels")
  # --no-deps: fairseq-fixed also asks for torchaudio, which only its speech tasks import and
  # whose PyPI wheel may want another torch
  "$VENV/bin/pip" install -q --no-deps "$WORK"/wheels/fairseq_fixed-"$FAIRSEQ_VERSION"-*.whl
  "$VENV/bin/pip" install -q hydra-core==1.3.2 omegaconf==2.3.0 regex sacrebleu bitarray cffi \
    scikit-learn packaging tqdm sentencepiece "numpy<2" "ctranslate2==$CT2_VERSION"
fi
export PATH="$VENV/bin:$PATH"
TORCH_VERSION="$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"

# --- 2. data: raw + sentencepiece text, spm.model ---------------------------------------------
if [ ! -f "$DATA/spm.model" ] || [ ! -f "$DATA/test.sp.en" ]; then
  log "data in $DATA"
  (cd "$ROOT" && .venv/bin/python scripts/toolkits/data.py "$DATA")
fi

# --- 3. binarize (fairseq-preprocess on the sentencepiece pieces) -----------------------------
CMDS="$WORK/commands.tsv"
: > "$CMDS"
record() { printf '%s\t%s\n' "$1" "$2" >> "$CMDS"; }
shq() {  # the arguments as one shell-quoted line (single quotes only where needed)
  local out=() a
  for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]]; then out+=("$a"); else out+=("'${a//\'/\'\\\'\'}'"); fi
  done
  printf '%s' "${out[*]}"
}
preprocess() {  # DEST [extra args]
  local dest="$1"; shift
  local cmd=(fairseq-preprocess --source-lang en --target-lang fr --trainpref "$DATA/train.sp"
             --validpref "$DATA/valid.sp" --testpref "$DATA/test.sp" --destdir "$dest"
             --workers 1 "$@")
  record "preprocess${*:+_joined}" "$(shq "${cmd[@]}")"
  if [ ! -f "$dest/dict.fr.txt" ]; then
    log "fairseq-preprocess -> $dest"
    "${cmd[@]}" > "$WORK/$(basename "$dest").log" 2>&1
  fi
}
preprocess "$WORK/bin"
preprocess "$WORK/bin-joined" --joined-dictionary

# --- 4. train ---------------------------------------------------------------------------------
TINY=(--arch transformer --encoder-embed-dim 64 --decoder-embed-dim 64
      --encoder-ffn-embed-dim 256 --decoder-ffn-embed-dim 256 --encoder-layers 2
      --decoder-layers 2 --encoder-attention-heads 4 --decoder-attention-heads 4)
RECIPE=(--optimizer adam --adam-betas "(0.9,0.98)" --lr 3e-3 --lr-scheduler inverse_sqrt
        --warmup-updates 300 --dropout 0.1 --criterion label_smoothed_cross_entropy
        --label-smoothing 0.1 --max-tokens 4096 --max-update 800 --seed 1 --num-workers 0 --cpu
        --no-epoch-checkpoints --no-save-optimizer-state --log-format simple --log-interval 100
        # records the subword model in cfg["bpe"] ({"_name": "sentencepiece",
        # "sentencepiece_model": "spm.model"}; relative: training runs in $DATA)
        --bpe sentencepiece --sentencepiece-model spm.model)
train() {  # NAME BIN [extra args]
  local name="$1" bin="$2"; shift 2
  local save="$WORK/ckpt-$name"
  local cmd=(fairseq-train "$bin" --save-dir "$save" "$@")
  record "train $name" "cd \$DATA && $(shq "${cmd[@]}")"
  if [ ! -f "$save/checkpoint_best.pt" ] && [ ! -f "$save/checkpoint_last.pt" ]; then
    log "fairseq-train $name"
    local t0=$SECONDS
    (cd "$DATA" && "${cmd[@]}" > "$WORK/train-$name.log" 2>&1) \
      || { tail -30 "$WORK/train-$name.log"; exit 1; }
    echo "trained $name in $((SECONDS - t0)) s: $(grep -E '\| valid \|' "$WORK/train-$name.log" | tail -1 | sed -E 's/.*\| (loss [^|]*\| nll_loss [^|]*)\|.*/\1/')"
  fi
}
train main "$WORK/bin" "${TINY[@]}" "${RECIPE[@]}"
train shared "$WORK/bin-joined" "${TINY[@]}" "${RECIPE[@]}" --share-all-embeddings \
  --encoder-normalize-before --decoder-normalize-before
train lnemb "$WORK/bin" "${TINY[@]}" "${RECIPE[@]}" --layernorm-embedding --no-scale-embedding \
  --share-decoder-input-output-embed --activation-fn gelu
train lstm "$WORK/bin" --arch lstm --encoder-embed-dim 16 --encoder-hidden-size 16 \
  --decoder-embed-dim 16 --decoder-hidden-size 16 --decoder-out-embed-dim 16 \
  --encoder-layers 1 --decoder-layers 1 --optimizer adam --lr 1e-3 --max-tokens 4096 \
  --max-update 5 --seed 1 --num-workers 0 --cpu --disable-validation --no-save-optimizer-state \
  --no-epoch-checkpoints

# --- 5. the fixture ---------------------------------------------------------------------------
log "fixture in $FIX"
rm -rf "$FIX"
mkdir -p "$FIX/shared" "$FIX/lnemb"
cp "$DATA/spm.model" "$FIX/"
head -n 100 "$DATA/test.en" > "$FIX/source.en"
cp "$WORK/ckpt-lstm/checkpoint_last.pt" "$FIX/lstm.pt"
for v in main shared lnemb; do
  case $v in main) dir="$FIX" bin="$WORK/bin" up="" ;;
             shared) dir="$FIX/shared" bin="$WORK/bin-joined" up="../" ;;
             lnemb) dir="$FIX/lnemb" bin="$WORK/bin" up="../" ;; esac
  rel="tests/fixtures/toolkits/fairseq${up:+/$v}"
  cp "$WORK/ckpt-$v/checkpoint_best.pt" "$bin/dict.en.txt" "$bin/dict.fr.txt" "$dir/"
  pre=preprocess; [ $v = shared ] && pre=preprocess_joined
  awk -F'\t' -v a="$pre" -v b="train $v" -v c="$([ $v = main ] && echo "train lstm")" \
    '$1 == a || $1 == b || $1 == c' "$CMDS" > "$WORK/commands-$v.tsv"
  for beam in 4 1; do
    # fairseq's own decoder, one sentence per batch; lenpen, max_len_a/b, min_len, unkpen left
    # at fairseq's defaults (1.0, 0, 200, 1, 0)
    cmd=(fairseq-interactive . --path checkpoint_best.pt --source-lang en --target-lang fr
         --bpe sentencepiece --sentencepiece-model "${up}spm.model" --input "${up}source.en"
         --beam "$beam" --nbest 1 --batch-size 1 --buffer-size 1 --cpu)
    printf 'beam%s\tcd %s && %s\n' "$beam" "$rel" \
      "$(shq "${cmd[@]}")" >> "$WORK/commands-$v.tsv"
    t0=$SECONDS
    (cd "$dir" && "${cmd[@]}" > "$WORK/$v.beam$beam.txt" 2> "$WORK/$v.beam$beam.log") \
      || { tail -20 "$WORK/$v.beam$beam.log"; exit 1; }
    echo "$v beam $beam: $((SECONDS - t0)) s"
  done
  conv=(ct2-fairseq-converter --model_path checkpoint_best.pt --data_dir . --source_lang en
        --target_lang fr --unsafe_deserialization --output_dir "$WORK/ct2-$v" --force)
  (cd "$dir" && "${conv[@]}" > "$WORK/ct2-$v.log" 2>&1) || { tail -20 "$WORK/ct2-$v.log"; exit 1; }
  python "$ROOT/scripts/toolkits/fairseq_fixture.py" "$dir" --beam4 "$WORK/$v.beam4.txt" \
    --beam1 "$WORK/$v.beam1.txt" --commands "$WORK/commands-$v.tsv" --work "$WORK" --data "$DATA" \
    --sp-source "$DATA/test.sp.en" --ct2 "$WORK/ct2-$v" --ct2-convert "cd $rel && $(shq "${conv[@]}")"
done
du -sh "$FIX"; du -a "$FIX" | sort -k2
echo "torch $TORCH_VERSION; done"
