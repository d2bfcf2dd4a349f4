"""A `torch.nn.Transformer` checkpoint as PyTorch's tutorial "Language Translation with
nn.Transformer and torchtext" builds one, for the torch-tutorial importer's fixture
(tests/fixtures/toolkits/torch_tutorial/).

    python scripts/toolkits/torch_tutorial.py DATA_DIR OUT_DIR [--minutes 4]
    python scripts/toolkits/torch_tutorial.py --base PATH

DATA_DIR is what scripts/toolkits/data.py wrote. The model classes, the masks, the training loop
(Adam lr 1e-4, betas (0.9, 0.98), eps 1e-9, cross-entropy ignoring PAD, xavier_uniform_ on every
matrix, batches of 128 in file order) and greedy_decode/translate are the tutorial's; only the
sizes (d_model 64, 4 heads, 2+2 layers, ff 256) and the vocabulary differ: instead of torchtext +
spacy, one vocabulary shared by source and target, the tutorial's specials <unk> <pad> <bos> <eos>
at 0..3 followed by the pieces of DATA_DIR/spm.model (less sentencepiece's own <unk> <s> </s>).

OUT_DIR gets model.pt (model.state_dict()), vocab.json (id -> piece), spm.model, source.en (the
first 100 test sentences) and expected.json (the tutorial's greedy decoding of each).
--base writes the state_dict of an untrained base-size model (d_model 512, 8 heads, 6+6 layers,
ff 2048, vocabulary 32000) to PATH, for timing an export.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import sentencepiece as spm  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch import Tensor  # noqa: E402
from torch.nn import Transformer  # noqa: E402
from torch.nn.utils.rnn import pad_sequence  # noqa: E402

torch.set_num_threads(1)

UNK_IDX, PAD_IDX, BOS_IDX, EOS_IDX = 0, 1, 2, 3
SPECIAL_SYMBOLS = ["<unk>", "<pad>", "<bos>", "<eos>"]
DEVICE = torch.device("cpu")
BATCH_SIZE = 128
TOOLKIT = "torch.nn.Transformer (PyTorch tutorial Seq2SeqTransformer)"


# ---- as in PyTorch's tutorial (model classes, masks) -------------------------------------------

# Helper class that adds positional encoding to the token embedding to introduce a notion of word order.
class PositionalEncoding(nn.Module):
    def __init__(self, emb_size: int, dropout: float, maxlen: int = 5000):
        super().__init__()
        den = torch.exp(- torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        pos_embedding = pos_embedding.unsqueeze(-2)

        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", pos_embedding)

    def forward(self, token_embedding: Tensor):
        return self.dropout(token_embedding + self.pos_embedding[:token_embedding.size(0), :])


# Helper class to convert tensor of input indices into corresponding tensor of token embeddings
class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, emb_size):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens: Tensor):
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


# Seq2Seq Network
class Seq2SeqTransformer(nn.Module):
    def __init__(self,
                 num_encoder_layers: int,
                 num_decoder_layers: int,
                 emb_size: int,
                 nhead: int,
                 src_vocab_size: int,
                 tgt_vocab_size: int,
                 dim_feedforward: int = 512,
                 dropout: float = 0.1):
        super().__init__()
        self.transformer = Transformer(d_model=emb_size,
                                       nhead=nhead,
                                       num_encoder_layers=num_encoder_layers,
                                       num_decoder_layers=num_decoder_layers,
                                       dim_feedforward=dim_feedforward,
                                       dropout=dropout)
        self.generator = nn.Linear(emb_size, tgt_vocab_size)
        self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)

    def forward(self,
                src: Tensor,
                trg: Tensor,
                src_mask: Tensor,
                tgt_mask: Tensor,
                src_padding_mask: Tensor,
                tgt_padding_mask: Tensor,
                memory_key_padding_mask: Tensor):
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
        outs = self.transformer(src_emb, tgt_emb, src_mask, tgt_mask, None,
                                src_padding_mask, tgt_padding_mask, memory_key_padding_mask)
        return self.generator(outs)

    def encode(self, src: Tensor, src_mask: Tensor):
        return self.transformer.encoder(self.positional_encoding(
                            self.src_tok_emb(src)), src_mask)

    def decode(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor):
        return self.transformer.decoder(self.positional_encoding(
                          self.tgt_tok_emb(tgt)), memory,
                          tgt_mask)


def generate_square_subsequent_mask(sz):
    mask = (torch.triu(torch.ones((sz, sz), device=DEVICE)) == 1).transpose(0, 1)
    mask = mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, 0.0)
    return mask


def create_mask(src, tgt):
    src_seq_len = src.shape[0]
    tgt_seq_len = tgt.shape[0]

    tgt_mask = generate_square_subsequent_mask(tgt_seq_len)
    src_mask = torch.zeros((src_seq_len, src_seq_len), device=DEVICE).type(torch.bool)

    src_padding_mask = (src == PAD_IDX).transpose(0, 1)
    tgt_padding_mask = (tgt == PAD_IDX).transpose(0, 1)
    return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask


# helper function to add BOS/EOS and create tensor for input sequence indices
def tensor_transform(token_ids: list[int]):
    return torch.cat((torch.tensor([BOS_IDX]),
                      torch.tensor(token_ids),
                      torch.tensor([EOS_IDX])))


# ---- the vocabulary: sentencepiece pieces instead of torchtext + spacy --------------------------

class PieceVocab:
    """The tutorial's vocab_transform and token_transform for one joint sentencepiece model."""

    def __init__(self, spm_model: Path):
        self.sp = spm.SentencePieceProcessor(model_file=str(spm_model))
        own = {self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id(), self.sp.pad_id()}
        self.itos = SPECIAL_SYMBOLS + [self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())
                                       if i not in own]
        self.stoi = {piece: i for i, piece in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def text_transform(self, text: str) -> Tensor:
        pieces = self.sp.encode(text, out_type=str)
        return tensor_transform([self.stoi.get(p, UNK_IDX) for p in pieces])

    def lookup_tokens(self, ids: list[int]) -> list[str]:
        return [self.itos[i] for i in ids]

    def detokenize(self, pieces: list[str]) -> str:
        return self.sp.decode_pieces(pieces)


# ---- as in PyTorch's tutorial (collation, training, greedy decoding) ----------------------------

def collate(chunk: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    return (pad_sequence([s for s, _ in chunk], padding_value=PAD_IDX),
            pad_sequence([t for _, t in chunk], padding_value=PAD_IDX))


def batches(pairs: list[tuple[Tensor, Tensor]]):
    for start in range(0, len(pairs), BATCH_SIZE):
        yield collate(pairs[start:start + BATCH_SIZE])


def bucketed_batches(pairs: list[tuple[Tensor, Tensor]], epoch: int) -> list[tuple[Tensor, Tensor]]:
    """Not the tutorial's: batches of 128 pairs of similar lengths, in a seeded random order, which
    halves the padding (and so the time) of the tutorial's batches in file order."""
    generator = torch.Generator().manual_seed(epoch)
    order = torch.randperm(len(pairs), generator=generator).tolist()
    window = BATCH_SIZE * 50
    out = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start:start + window], key=lambda i: (len(pairs[i][0]), len(pairs[i][1])))
        out += [collate([pairs[i] for i in chunk[b:b + BATCH_SIZE]])
                for b in range(0, len(chunk), BATCH_SIZE)]
    return [out[i] for i in torch.randperm(len(out), generator=generator).tolist()]


def train_epoch(model, optimizer, loss_fn, train_batches, deadline: float) -> tuple[float, bool]:
    model.train()
    losses, count = 0.0, 0
    for src, tgt in train_batches:
        tgt_input = tgt[:-1, :]
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)
        logits = model(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask,
                       src_padding_mask)
        optimizer.zero_grad()
        tgt_out = tgt[1:, :]
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
        loss.backward()
        optimizer.step()
        losses += loss.item()
        count += 1
        if time.monotonic() > deadline:
            return losses / count, False
    return losses / count, True


@torch.no_grad()
def evaluate(model, loss_fn, pairs) -> float:
    model.eval()
    losses, count = 0.0, 0
    for src, tgt in batches(pairs):
        tgt_input = tgt[:-1, :]
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)
        logits = model(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask,
                       src_padding_mask)
        tgt_out = tgt[1:, :]
        losses += loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1)).item()
        count += 1
    return losses / count


# Function to generate output sequence using greedy algorithm
def greedy_decode(model, src, src_mask, max_len, start_symbol):
    memory = model.encode(src, src_mask)
    ys = torch.ones(1, 1).fill_(start_symbol).type(torch.long)
    for _ in range(max_len - 1):
        tgt_mask = generate_square_subsequent_mask(ys.size(0)).type(torch.bool)
        out = model.decode(ys, memory, tgt_mask)
        out = out.transpose(0, 1)
        prob = model.generator(out[:, -1])
        _, next_word = torch.max(prob, dim=1)
        next_word = next_word.item()

        ys = torch.cat([ys, torch.ones(1, 1).type_as(src.data).fill_(next_word)], dim=0)
        if next_word == EOS_IDX:
            break
    return ys


# The tutorial's translate(), returning the ids instead of joining the tokens with spaces
@torch.no_grad()
def translate_ids(model: torch.nn.Module, vocab: PieceVocab, src_sentence: str) -> tuple[list[int], int]:
    model.eval()
    src = vocab.text_transform(src_sentence).view(-1, 1)
    num_tokens = src.shape[0]
    src_mask = (torch.zeros(num_tokens, num_tokens)).type(torch.bool)
    tgt_tokens = greedy_decode(model, src, src_mask, max_len=num_tokens + 5,
                               start_symbol=BOS_IDX).flatten()
    return tgt_tokens.tolist(), num_tokens + 5


# ---- the fixture --------------------------------------------------------------------------------

def make_model(src_vocab: int, tgt_vocab: int, emb: int, nhead: int, enc: int, dec: int,
               ffn: int) -> Seq2SeqTransformer:
    torch.manual_seed(0)
    model = Seq2SeqTransformer(enc, dec, emb, nhead, src_vocab, tgt_vocab, ffn)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model


def read_pairs(vocab: PieceVocab, data: Path, split: str) -> list[tuple[Tensor, Tensor]]:
    en = (data / f"{split}.en").read_text(encoding="utf-8").splitlines()
    fr = (data / f"{split}.fr").read_text(encoding="utf-8").splitlines()
    return [(vocab.text_transform(s), vocab.text_transform(t)) for s, t in zip(en, fr, strict=True)]


def build_fixture(data: Path, out: Path, minutes: float, epochs: int, lr: float,
                  sentences: int) -> int:
    started = time.monotonic()
    torch.use_deterministic_algorithms(True)
    out.mkdir(parents=True, exist_ok=True)
    vocab = PieceVocab(data / "spm.model")
    train, valid = read_pairs(vocab, data, "train"), read_pairs(vocab, data, "valid")
    model = make_model(len(vocab), len(vocab), 64, 4, 2, 2, 256)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD_IDX)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
    deadline = started + minutes * 60
    for epoch in range(1, epochs + 1):
        t0 = time.monotonic()
        train_loss, finished = train_epoch(model, optimizer, loss_fn,
                                           bucketed_batches(train, epoch), deadline)
        val_loss = evaluate(model, loss_fn, valid)
        print(f"Epoch: {epoch}{'' if finished else ' (cut short)'}, Train loss: {train_loss:.3f}, "
              f"Val loss: {val_loss:.3f}, Epoch time = {time.monotonic() - t0:.1f}s", flush=True)
        if not finished:
            break
    torch.save(model.state_dict(), out / "model.pt")
    (out / "vocab.json").write_text(json.dumps(vocab.itos, ensure_ascii=False, indent=0) + "\n",
                                    encoding="utf-8")
    shutil.copyfile(data / "spm.model", out / "spm.model")
    lines = (data / "test.en").read_text(encoding="utf-8").splitlines()[:sentences]
    (out / "source.en").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    greedy, at_max = [], 0
    for line in lines:
        ys, max_len = translate_ids(model, vocab, line)
        ended = ys[-1] == EOS_IDX
        at_max += not ended
        ids = ys[1:-1] if ended else ys[1:]
        pieces = vocab.lookup_tokens(ids)
        greedy.append({"ids": ids, "pieces": pieces, "text": vocab.detokenize(pieces)})
    expected = {"toolkit": TOOLKIT, "torch": torch.__version__, "greedy": greedy}
    (out / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1) + "\n",
                                       encoding="utf-8")
    refs = (data / "test.fr").read_text(encoding="utf-8").splitlines()[:sentences]
    exact = sum(g["text"] == r for g, r in zip(greedy, refs, strict=True))
    print(f"{out}: {len(vocab)} ids, {len(lines)} sentences, {at_max} stopped at max_len "
          f"(no EOS), {exact} equal to the reference; {time.monotonic() - started:.0f}s in all")
    return 0


def save_base(path: Path) -> int:
    model = make_model(32000, 32000, 512, 8, 6, 6, 2048)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)
    print(f"{path}: base-size Seq2SeqTransformer state_dict, "
          f"{sum(p.numel() for p in model.parameters())} parameters")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, nargs="?", help="what scripts/toolkits/data.py wrote")
    parser.add_argument("out", type=Path, nargs="?", help="the fixture folder")
    parser.add_argument("--minutes", type=float, default=6.0,
                        help="stop training after this long whatever --epochs says (default 6)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs (default 3)")
    parser.add_argument("--lr", type=float, default=1e-3,
                        help="Adam's learning rate (default 1e-3; the tutorial's 1e-4 is for d_model 512)")
    parser.add_argument("--sentences", type=int, default=100, help="test sentences to decode")
    parser.add_argument("--base", type=Path, metavar="PATH",
                        help="only save an untrained base-size model's state_dict to PATH")
    args = parser.parse_args()
    if args.base is not None:
        return save_base(args.base)
    if args.data is None or args.out is None:
        parser.error("DATA_DIR and OUT_DIR are required without --base")
    return build_fixture(args.data, args.out, args.minutes, args.epochs, args.lr, args.sentences)


if __name__ == "__main__":
    raise SystemExit(main())
