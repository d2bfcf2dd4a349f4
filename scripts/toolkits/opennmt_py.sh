#!/usr/bin/env bash
# The OpenNMT-py fixture (tests/fixtures/toolkits/opennmt_py/): checkpoints trained by OpenNMT-py
# 3.5.1 itself, and its own translations of the first 100 test sentences, recorded with the exact
# onmt_translate commands; CTranslate2's conversion of the same checkpoint decoded beside them.
#
#     bash scripts/toolkits/opennmt_py.sh          # from anywhere; ~8 minutes (one training thread)
#
# Everything OpenNMT-py needs lives in a throwaway venv outside the repo ($ONMT_WORK, default
# ${TMPDIR:-/tmp}/nmtserve-opennmt-py): torch 2.13.0+cpu (scripts/torch-cpu-args.sh), OpenNMT-py
# 3.5.1 installed --no-deps (its metadata asks torch<2.3; it trains and translates on 2.13), its
# dependencies, ctranslate2 and sentencepiece. Two stand-ins there:
#   * empty `spacy` and `fasttext` packages: onmt.transforms imports both when it loads (for the
#     terminology and clean transforms, unused here); installing spacy is ~100 MB, fasttext builds
#     from source;
#   * TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1: OpenNMT-py 3.5.1 calls torch.load without weights_only,
#     and torch >= 2.6 refuses the argparse.Namespace a checkpoint holds as its "opt".
# The data is scripts/toolkits/data.py's (run with the repo's .venv; $ONMT_DATA reuses a folder it
# already wrote). Training runs on one thread (OMP_NUM_THREADS=1).
#
# Writes to the fixture: model.pt (separate vocabularies, d_model 32, 4 heads, 2+2 layers, ff 128,
# sinusoidal positions, self_attn_type scaled-dot), shared.pt (share_vocab, share_embeddings,
# share_decoder_embeddings, add_qkvbias, add_ffnbias; d_model 16, 2 heads, ff 64), rnn.pt (LSTM
# encoder/decoder, hidden 8, 20 steps), relative.pt (max_relative_positions 8, d_model 8, 2 heads,
# 1+1 layers, 20 steps), spm.model,
# source.en, expected.json (model.pt) and expected_shared.json (shared.pt). model.pt and shared.pt
# are saved less their "optim" key (size); rnn.pt and relative.pt are as OpenNMT-py saved them.
# Each checkpoint's opt records src/tgt_subword_model "spm.model" (training runs beside it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
repo="$(pwd)"
work="${ONMT_WORK:-${TMPDIR:-/tmp}/nmtserve-opennmt-py}"
venv="$work/venv"
run="$work/run"
fixture="$repo/tests/fixtures/toolkits/opennmt_py"
helper="$repo/scripts/toolkits/opennmt_py_helper.py"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 PYTHONWARNINGS=ignore
mkdir -p "$work" "$run"
timings="$work/timings.txt"
: > "$timings"
t0=$SECONDS
lap() { echo "$1: $((SECONDS - t0)) s" | tee -a "$timings" >&2; t0=$SECONDS; }

# ---- 1. the throwaway venv ----------------------------------------------------------------------
if [ ! -f "$venv/.installed" ]; then
  echo "==> venv $venv" >&2
  rm -rf "$venv"
  "${PYTHON:-python3}" -m venv "$venv"
  mapfile -t torch_args < <(PYTHON="$venv/bin/python" bash scripts/torch-cpu-args.sh)
  "$venv/bin/pip" install -q "${torch_args[@]}"
  "$venv/bin/pip" install -q --no-deps OpenNMT-py==3.5.1
  "$venv/bin/pip" install -q configargparse pyonmttok pyyaml sacrebleu rapidfuzz pyahocorasick six \
    ctranslate2 flask waitress sentencepiece
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  for stub in spacy fasttext; do
    mkdir -p "$site/$stub"
    echo "# stand-in: onmt.transforms imports $stub when it loads; no transform used here needs it" \
      > "$site/$stub/__init__.py"
  done
  "$venv/bin/python" -c "import onmt.transforms, onmt.bin.train, onmt.bin.translate, ctranslate2"
  touch "$venv/.installed"
fi
lap "venv"

# ---- 2. data -------------------------------------------------------------------------------------
data="${ONMT_DATA:-$work/data}"
if [ ! -f "$data/spm.model" ]; then
  .venv/bin/python scripts/toolkits/data.py "$data"
fi
cp "$data/spm.model" "$run/spm.model"
mkdir -p "$run/data"
for f in train.en train.fr test.en; do cp "$data/$f" "$run/data/$f"; done
head -n 100 "$data/test.en" > "$run/source.en"
lap "data"

cd "$run"
mkdir -p vocab ckpt
onmt() { "$venv/bin/$1" "${@:2}"; }

# ---- 3. vocabularies (pieces counted through the sentencepiece transform) ------------------------
cat > vocab.yaml <<'EOF'
save_data: vocab
src_vocab: vocab/vocab.src
tgt_vocab: vocab/vocab.tgt
overwrite: true
n_sample: -1
src_subword_model: spm.model
tgt_subword_model: spm.model
data:
  corpus_1: {path_src: data/train.en, path_tgt: data/train.fr, transforms: [sentencepiece]}
EOF
onmt onmt_build_vocab -config vocab.yaml > vocab.log 2>&1
sed -e 's#vocab/vocab.src#vocab/vocab.shared#' -e '/tgt_vocab/d' vocab.yaml > vocab_shared.yaml
echo "share_vocab: true" >> vocab_shared.yaml
onmt onmt_build_vocab -config vocab_shared.yaml > vocab_shared.log 2>&1
lap "vocabularies"

# ---- 4. training ----------------------------------------------------------------------------------
common() {  # $1 name, $2 steps
  cat <<EOF
overwrite: true
src_subword_model: spm.model
tgt_subword_model: spm.model
transforms: [sentencepiece]
data:
  corpus_1: {path_src: data/train.en, path_tgt: data/train.fr}
save_model: ckpt/$1
train_steps: $2
save_checkpoint_steps: $2
valid_steps: 1000000
report_every: $(( $2 < 250 ? 10 : 250 ))
seed: 1234
num_workers: 0
world_size: 1
gpu_ranks: []
bucket_size: 32768
optim: adam
adam_beta2: 0.998
learning_rate: 2.0
decay_method: noam
warmup_steps: 400
label_smoothing: 0.1
batch_type: tokens
batch_size: 2048
max_grad_norm: 0.0
param_init: 0.0
param_init_glorot: true
dropout: [0.1]
attention_dropout: [0.1]
EOF
}
transformer() {  # $1 d_model, $2 heads, $3 ff, $4 layers
  cat <<EOF
encoder_type: transformer
decoder_type: transformer
self_attn_type: scaled-dot
hidden_size: $1
word_vec_size: $1
heads: $2
transformer_ff: $3
enc_layers: $4
dec_layers: $4
EOF
}
{ common model "${ONMT_STEPS:-2000}"; transformer 32 4 128 2
  printf '%s\n' "src_vocab: vocab/vocab.src" "tgt_vocab: vocab/vocab.tgt" "position_encoding: true"; } > model.yaml
{ common shared "${ONMT_SHARED_STEPS:-2500}"; transformer 16 2 64 2
  printf '%s\n' "src_vocab: vocab/vocab.shared" "share_vocab: true" "share_embeddings: true" \
    "share_decoder_embeddings: true" "add_qkvbias: true" "add_ffnbias: true" "position_encoding: true"; } > shared.yaml
{ common rnn 20
  printf '%s\n' "src_vocab: vocab/vocab.src" "tgt_vocab: vocab/vocab.tgt" "encoder_type: rnn" \
    "decoder_type: rnn" "rnn_type: LSTM" "layers: 1" "hidden_size: 8" "word_vec_size: 8"; } > rnn.yaml
{ common relative 20; transformer 8 2 32 1
  printf '%s\n' "src_vocab: vocab/vocab.src" "tgt_vocab: vocab/vocab.tgt" "position_encoding: false" \
    "max_relative_positions: 8"; } > relative.yaml
step() { sed -n 's/^train_steps: //p' "$1.yaml"; }
for name in model shared rnn relative; do  # one at a time
  if [ -n "${ONMT_REUSE:-}" ] && [ -f "ckpt/${name}_step_$(step "$name").pt" ]; then continue; fi  # developing
  onmt onmt_train -config "$name.yaml" > "train_$name.log" 2>&1 || { tail -30 "train_$name.log" >&2; exit 1; }
  { grep -E "Step [0-9]+/" "train_$name.log" || true; } | tail -1 >&2
  lap "train $name"
done

# ---- 5. translations: onmt_translate itself, and the same run in-process for full-precision scores
translate_opts=(-src source.en -n_best 1 -transforms sentencepiece -src_subword_model spm.model
                -tgt_subword_model spm.model -verbose)
for name in model shared; do
  # the fixture's file: as OpenNMT-py saved it, less "optim"; translated and converted as it is
  "$venv/bin/python" "$helper" strip "ckpt/${name}_step_$(step "$name").pt" "$name.pt"
  for beam in 4 1; do
    args=(-model "$name.pt" "${translate_opts[@]}" -beam_size "$beam")
    rm -f "${name}_b$beam".*  # -log_file appends
    onmt onmt_translate "${args[@]}" -output "${name}_b$beam.txt" -log_file "${name}_b$beam.log" > /dev/null 2>&1
    echo "onmt_translate ${args[*]} -output OUT -log_file LOG" > "${name}_b$beam.cmd"
    "$venv/bin/python" "$helper" translate "${name}_b$beam.json" -- "${args[@]}" \
      -output "${name}_b$beam.api.txt" -log_file "${name}_b$beam.api.log" > /dev/null 2>&1
    cmp "${name}_b$beam.txt" "${name}_b$beam.api.txt"
  done
  out="$( [ "$name" = model ] && echo expected.json || echo expected_shared.json )"
  "$venv/bin/python" "$helper" expected "$out" --checkpoint "$name.pt" \
    --beam4 "${name}_b4.json" "${name}_b4.txt" "${name}_b4.log" "$(cat "${name}_b4.cmd")" \
    --beam1 "${name}_b1.json" "${name}_b1.txt" "${name}_b1.log" "$(cat "${name}_b1.cmd")"
  lap "translate $name"
  "$venv/bin/python" "$helper" ctranslate2 "$out" --checkpoint "$name.pt" --spm spm.model \
    --source source.en --work "ct2_$name"
  lap "ctranslate2 $name"
done

# ---- 6. the fixture --------------------------------------------------------------------------------
rm -rf "$fixture"
mkdir -p "$fixture"
cp model.pt shared.pt "$fixture/"
cp "ckpt/rnn_step_20.pt" "$fixture/rnn.pt"
cp "ckpt/relative_step_20.pt" "$fixture/relative.pt"
cp spm.model source.en expected.json expected_shared.json "$fixture/"
du -ch "$fixture"/* >&2
lap "fixture"
cat "$timings" >&2
