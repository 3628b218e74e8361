"""Byte-level tokenizer and the stdlib training corpus of the embedded model (used by ``train_tiny.py``)."""

import os
import random
import sysconfig
from pathlib import Path

import torch

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")  # ids 256, 257, 258 (bytes are ids 0..255)
PAD_ID, BOS_ID, EOS_ID = 256, 257, 258
VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)
SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode character map (the ByteLevel alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def build_tokenizer():
    """Byte-level tokenizer: token id == byte value for 0..255, then <pad>, <bos>, <eos>.

    A BPE model with an empty merge list over the 256 ByteLevel symbols, so every UTF-8 string maps to its
    bytes and decodes back losslessly."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    for i, t in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(t) == 256 + i, (t, tok.token_to_id(t))
    assert tok.get_vocab_size() == VOCAB_SIZE
    return tok


def random_unicode_text(rng, n):
    """Random text mixing ASCII, whitespace, Latin-1, CJK, emoji and other planes (no surrogates)."""
    pools = [(0x20, 0x7E), (0x09, 0x0D), (0xA0, 0x2FF), (0x370, 0x52F), (0x4E00, 0x9FFF), (0x1F300, 0x1FAFF)]
    out = []
    for _ in range(n):
        lo, hi = rng.choice(pools) if rng.random() < 0.8 else (0x80, 0x10FFFF)
        c = rng.randint(lo, hi)
        if 0xD800 <= c <= 0xDFFF:
            c = 0xFFFD
        out.append(chr(c))
    return "".join(out)


def check_tokenizer(tok, texts, seed=0):
    """Round-trip checks: ids == UTF-8 bytes and decode(encode(s)) == s, on the given texts and random Unicode."""
    rng = random.Random(seed)
    samples = list(texts) + [random_unicode_text(rng, rng.randint(0, 300)) for _ in range(200)] + ["", " ", "\n\n\t"]
    for s in samples:
        ids = tok.encode(s, add_special_tokens=False).ids
        assert ids == list(s.encode("utf-8")), "tokenizer ids are not the UTF-8 bytes"
        assert tok.decode(ids, skip_special_tokens=False) == s, "tokenizer round trip failed"
    # special tokens decode to nothing when skipped
    assert tok.decode([BOS_ID] + list(b"ab") + [EOS_ID], skip_special_tokens=True) == "ab"
    return len(samples)


def stdlib_py_files():
    """Sorted relative paths of the stdlib's .py files, skipping test folders and site-packages."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for f in filenames:
            if f.endswith(".py"):
                files.append((Path(dirpath) / f).relative_to(root))
    return root, sorted(files, key=lambda p: p.as_posix())


def build_corpus(val_every):
    """Concatenate the stdlib sources as bytes, each file followed by <eos>. Every `val_every`-th file (in
    sorted order, starting at index val_every - 1) is held out for validation. Files that are not valid
    UTF-8 are skipped."""
    root, files = stdlib_py_files()
    train, val = [], []
    info = {"root": str(root), "files_train": 0, "files_val": 0, "files_skipped": 0, "bytes_train": 0, "bytes_val": 0}
    val_names = []
    for i, rel in enumerate(files):
        data = (root / rel).read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            info["files_skipped"] += 1
            continue
        is_val = (i % val_every) == val_every - 1
        (val if is_val else train).append(data)
        key = "val" if is_val else "train"
        info[f"files_{key}"] += 1
        info[f"bytes_{key}"] += len(data)
        if is_val:
            val_names.append(rel.as_posix())
    info["val_names"] = val_names

    def to_ids(chunks):
        out = bytearray()
        for c in chunks:
            out += c
            out.append(0)  # placeholder for <eos>, patched below
        ids = torch.frombuffer(out, dtype=torch.uint8).to(torch.int16)
        ends = torch.tensor([len(c) for c in chunks], dtype=torch.long).add_(1).cumsum_(0) - 1
        ids[ends] = EOS_ID
        return ids

    return to_ids(train), to_ids(val), [c for c in train[:3]], info
