"""Train the tiny byte-level Qwen3.5-style hybrid (Gated DeltaNet + gated attention) model shipped in
replayssm/assets/tiny, on CPU, from the Python standard library's own source files.

Reproduce the shipped model and its MTP head (defaults are the values they were trained with):
    python scripts/train_tiny.py --out replayssm/assets/tiny
Train only the MTP head of the model already in a folder (main model frozen, unchanged):
    python scripts/train_tiny.py --mtp-only --out replayssm/assets/tiny
Quick smoke run (a few seconds):
    python scripts/train_tiny.py --steps 3 --batch 2 --seq-len 64 --mtp-steps 2 --out /tmp/tiny_smoke

Needs torch, transformers (with Qwen3_5TextConfig), safetensors and tokenizers. The fast kernels (fla,
causal_conv1d) are blocked so transformers takes its pure-torch Gated DeltaNet path on every machine.
"""

import sys

# Block the optional fast kernels before any transformers model code is imported: the pure-torch path is used.
sys.modules["fla"] = None
sys.modules["causal_conv1d"] = None

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_corpus import (  # noqa: E402
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SKIP_DIRS,
    VOCAB_SIZE,
    build_corpus,
    build_tokenizer,
    check_tokenizer,
)
from tiny_mtp_train import add_mtp_args, train_mtp  # noqa: E402

SAMPLE_PROMPTS = ("def ", "import os\n", "class ")


def build_config(args):
    from transformers import Qwen3_5TextConfig

    cfg = Qwen3_5TextConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=args.head_dim,
        hidden_act="silu",
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        linear_conv_kernel_dim=4,
        linear_key_head_dim=args.linear_head_dim,
        linear_value_head_dim=args.linear_head_dim,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        full_attention_interval=4,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
    )
    assert cfg.model_type == "qwen3_5_text"
    expect = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(args.layers)]
    assert list(cfg.layer_types) == expect, cfg.layer_types
    return cfg


def lr_at(step, args):
    """Linear warmup then cosine decay to min_lr_frac * lr."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def get_batch(ids, batch, seq_len, gen):
    starts = torch.randint(0, len(ids) - seq_len - 1, (batch,), generator=gen)
    x = torch.stack([ids[s : s + seq_len + 1] for s in starts.tolist()]).long()
    return x[:, :-1], x[:, 1:]


@torch.no_grad()
def evaluate(model, ids, seq_len, max_tokens, batch=16):
    """Mean next-token loss (nats) over non-overlapping windows of the validation stream."""
    model.eval()
    n_win = min(max_tokens // seq_len, (len(ids) - 1) // seq_len)
    total, count = 0.0, 0
    for b0 in range(0, n_win, batch):
        starts = range(b0 * seq_len, min(n_win, b0 + batch) * seq_len, seq_len)
        x = torch.stack([ids[s : s + seq_len + 1] for s in starts]).long()
        logits = model(input_ids=x[:, :-1]).logits.float()
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"
        )
        total += loss.item()
        count += x[:, 1:].numel()
    model.train()
    return total / max(1, count), count


def greedy_samples(out_dir, n_tokens):
    """Reload the saved model with AutoModelForCausalLM in fp32 and greedily continue a few prompts."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32)
    model.eval()
    samples = []
    for prompt in SAMPLE_PROMPTS:
        x = torch.tensor([list(prompt.encode("utf-8"))])
        with torch.no_grad():
            y = model.generate(
                x, max_new_tokens=n_tokens, do_sample=False, pad_token_id=PAD_ID, eos_token_id=EOS_ID, use_cache=True
            )
        ids = y[0].tolist()
        text = bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")
        samples.append((prompt, text, EOS_ID in ids[x.shape[1] :]))
    return model, samples


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder (config.json, model.safetensors, tokenizer.json, ...)")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr-frac", type=float, default=0.1, help="final LR as a fraction of --lr (cosine)")
    p.add_argument("--warmup", type=int, default=None, help="warmup steps (default: min(100, steps // 10))")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--hidden", type=int, default=192)
    p.add_argument("--intermediate", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=32, help="attention head dim")
    p.add_argument("--linear-head-dim", type=int, default=32, help="Gated DeltaNet key/value head dim")
    p.add_argument("--val-every", type=int, default=40, help="hold out every N-th stdlib file for validation")
    p.add_argument(
        "--val-tokens",
        type=int,
        default=None,
        help="validation targets evaluated at the end (default: tokens seen in training, clamped to 4096..65536)",
    )
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--save-dtype", choices=("bfloat16", "float32"), default="bfloat16")
    p.add_argument("--sample-tokens", type=int, default=200, help="greedy sample length in TRAINING.md (0: none)")
    add_mtp_args(p)
    args = p.parse_args(argv)
    if args.warmup is None:
        args.warmup = min(100, args.steps // 10)
    if args.val_tokens is None:
        args.val_tokens = min(65536, max(4096, args.steps * args.batch * args.seq_len))
    d = args.linear_head_dim
    assert d >= 16 and d & (d - 1) == 0, "Gated DeltaNet head dims must be powers of two >= 16"
    return args


def main(argv=None):
    import tokenizers
    import transformers
    from transformers import Qwen3_5ForCausalLM

    argv_list = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv_list)
    t_start = time.time()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python scripts/train_tiny.py " + " ".join(shlex.quote(a) for a in argv_list)
    if args.mtp_only:
        return {"mtp": train_mtp(out, args, log=lambda m: print(m, flush=True), command=command)}

    # tokenizer
    tok = build_tokenizer()
    train_ids, val_ids, first_train_files, info = build_corpus(args.val_every)
    n_checked = check_tokenizer(tok, [b.decode("utf-8") for b in first_train_files], seed=args.seed)
    print(
        f"data: {info['files_train']} train files ({info['bytes_train']:,} bytes), {info['files_val']} val files "
        f"({info['bytes_val']:,} bytes), {info['files_skipped']} skipped; tokenizer round trips ok on {n_checked} "
        "texts",
        flush=True,
    )

    # model
    cfg = build_config(args)
    model = Qwen3_5ForCausalLM(cfg)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())  # tied lm_head counted once
    print(f"model: {n_params:,} parameters, layer_types={cfg.layer_types}", flush=True)

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    gen = torch.Generator().manual_seed(args.seed)

    t_train = time.time()
    log, ema = [], None
    for step in range(args.steps):
        lr = lr_at(step, args)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = get_batch(train_ids, args.batch, args.seq_len, gen)
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        li = loss.item()
        ema = li if ema is None else 0.95 * ema + 0.05 * li
        if (step + 1) % args.log_every == 0 or step == 0 or step + 1 == args.steps:
            el = time.time() - t_train
            tps = (step + 1) * args.batch * args.seq_len / el
            print(
                f"step {step + 1:5d}/{args.steps}  loss {li:.4f}  ema {ema:.4f}  lr {lr:.2e}  "
                f"gnorm {float(gnorm):.2f}  {el:7.1f}s  {tps:,.0f} tok/s",
                flush=True,
            )
            log.append((step + 1, li, ema, el))
    train_wall = time.time() - t_train

    val_loss, val_count = evaluate(model, val_ids, args.seq_len, args.val_tokens)
    print(f"val (fp32 weights): loss {val_loss:.4f} nats/token = {val_loss / math.log(2):.4f} bits/byte", flush=True)

    # save
    if args.save_dtype == "bfloat16":
        model.to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    tok.save(str(out / "tokenizer.json"))
    # the saved tokenizer.json reloads and still round-trips
    tok2 = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    check_tokenizer(tok2, [], seed=args.seed + 1)

    samples, saved_val = [], None
    if args.sample_tokens > 0:
        reloaded, samples = greedy_samples(out, args.sample_tokens)
        saved_val, _ = evaluate(reloaded, val_ids, args.seq_len, args.val_tokens)
        print(
            f"val (saved {args.save_dtype} weights, run in fp32): {saved_val / math.log(2):.4f} bits/byte", flush=True
        )
        for prompt, text, _ in samples:
            print(f"--- sample {prompt!r}\n{text}\n", flush=True)
    total_wall = time.time() - t_start

    files = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file() and p.name != "TRAINING.md"}
    final_train = sum(r[1] for r in log[-3:]) / max(1, len(log[-3:]))
    write_report(
        out, args, argv_list, cfg, n_params, info, log, train_wall, total_wall, ema, final_train, val_loss, val_count,
        saved_val, samples, files, versions=(torch.__version__, transformers.__version__, tokenizers.__version__),
    )  # fmt: skip
    res = {"val_loss": val_loss, "saved_val_loss": saved_val, "train_loss_ema": ema, "params": n_params}
    if args.mtp_steps > 0:
        res["mtp"] = train_mtp(out, args, log=lambda m: print(m, flush=True), command=command)
    return res


def write_report(
    out, args, argv_list, cfg, n_params, info, log, train_wall, total_wall, ema, final_train, val_loss, val_count,
    saved_val, samples, files, versions,
):  # fmt: skip
    ln2 = math.log(2)
    cmd = "python scripts/train_tiny.py " + " ".join(shlex.quote(a) for a in argv_list)
    lines = [
        "# Tiny byte-level Qwen3.5-style hybrid model",
        "",
        "Trained on CPU by `scripts/train_tiny.py` (in the replayssm repository).",
        "",
        "## Command",
        "",
        "```",
        cmd,
        "```",
        "",
        f"Resolved arguments: `{json.dumps(vars(args), sort_keys=True)}`",
        "",
        f"- seed: {args.seed}",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {platform.machine()}, {args.threads} torch threads, Python {platform.python_version()}",
        f"- torch {versions[0]}, transformers {versions[1]}, tokenizers {versions[2]}",
        f"- wall time: {train_wall:.0f} s training ({train_wall / 60:.1f} min), {total_wall:.0f} s in all",
        "",
        "## Model",
        "",
        f"- `Qwen3_5ForCausalLM` (model_type `{cfg.model_type}`), {n_params:,} parameters "
        f"(tied input/output embedding counted once), weights saved as {args.save_dtype}",
        f"- {cfg.num_hidden_layers} layers: {cfg.layer_types.count('linear_attention')} Gated DeltaNet + "
        f"{cfg.layer_types.count('full_attention')} gated attention (full_attention_interval 4)",
        f"- hidden {cfg.hidden_size}, MLP intermediate {cfg.intermediate_size}, vocab {cfg.vocab_size}",
        f"- GDN: {cfg.linear_num_key_heads} key heads x {cfg.linear_key_head_dim}, {cfg.linear_num_value_heads} value "
        f"heads x {cfg.linear_value_head_dim}, conv kernel {cfg.linear_conv_kernel_dim}",
        f"- attention: {cfg.num_attention_heads} query heads, {cfg.num_key_value_heads} KV heads, head_dim "
        f"{cfg.head_dim}, partial rotary {cfg.rope_parameters.get('partial_rotary_factor')}",
        "- files: " + ", ".join(f"`{k}` {v:,} B" for k, v in files.items()),
        "",
        "## Tokenizer",
        "",
        "Byte level: token id = byte value (0..255), then `<pad>` 256, `<bos>` 257, `<eos>` 258.",
        "`tokenizer.json` is a `tokenizers` BPE model with no merges over the 256 ByteLevel symbols (ByteLevel",
        "pre-tokenizer and decoder), so any UTF-8 text encodes to its bytes and decodes back losslessly (checked on",
        "random Unicode text). Literal special-token strings in the text (e.g. `<eos>`) are matched as special tokens",
        "by `tokenizers`; the training data was built from raw bytes, so it never contains special ids except the",
        "`<eos>` separators.",
        "",
        "## Data",
        "",
        f"The `.py` files of the Python {platform.python_version()} standard library (`{info['root']}`), sorted by",
        "relative path, skipping folders named " + ", ".join(f"`{d}`" for d in sorted(SKIP_DIRS)) + " and",
        f"non-UTF-8 files ({info['files_skipped']} skipped); raw bytes of each file followed by `<eos>`. Every",
        f"{args.val_every}th file (sorted index {args.val_every - 1}, {2 * args.val_every - 1}, ...) is held out.",
        "",
        f"- train: {info['files_train']} files, {info['bytes_train']:,} bytes",
        f"- validation: {info['files_val']} files, {info['bytes_val']:,} bytes; evaluated on the first {val_count:,}"
        f" next-token targets (non-overlapping {args.seq_len}-token windows)",
        f"- training sees {args.steps * args.batch * args.seq_len:,} tokens ({args.steps} steps x {args.batch} random "
        f"{args.seq_len}-token windows, drawn with a torch.Generator seeded with {args.seed})",
        "",
        "## Optimisation",
        "",
        f"AdamW (betas 0.9/0.95, weight decay {args.weight_decay} on matrices except the embedding), peak LR",
        f"{args.lr}, {args.warmup} warmup steps then cosine decay to {args.min_lr_frac} x peak, gradient clip "
        f"{args.grad_clip},",
        "fp32 training, pure-torch Gated DeltaNet path (fla and causal_conv1d blocked).",
        "",
        "## Results",
        "",
        f"- final train loss: {final_train:.4f} nats/token (mean of the last logged steps), EMA {ema:.4f} "
        f"= {ema / ln2:.3f} bits/byte",
        f"- validation loss (fp32 weights at end of training): {val_loss:.4f} nats/token = {val_loss / ln2:.4f} "
        "bits/byte",
    ]
    if saved_val is not None:
        lines.append(
            f"- validation loss (saved {args.save_dtype} weights, reloaded with AutoModelForCausalLM in fp32): "
            f"{saved_val:.4f} nats/token = {saved_val / ln2:.4f} bits/byte"
        )
    lines += [
        "",
        "(Targets are bytes plus the rare `<eos>` separators, so nats/token / ln 2 is bits per byte.)",
        "",
        "Loss log (step, loss, EMA, seconds):",
        "",
        "```",
    ]
    lines += [f"{s:6d} {li:.4f} {e:.4f} {t:8.1f}" for s, li, e, t in log]
    lines += ["```", ""]
    if samples:
        lines += [
            "## Greedy samples",
            "",
            f"The saved model reloaded with `AutoModelForCausalLM.from_pretrained(dir, dtype=torch.float32)`, "
            f"`generate(max_new_tokens={args.sample_tokens}, do_sample=False)`; prompt included.",
            "",
        ]
        for prompt, text, hit_eos in samples:
            stop = " (stopped at `<eos>`)" if hit_eos else ""
            lines += [f"Prompt {prompt!r}{stop}:", "", "````", text, "````", ""]
    (out / "TRAINING.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
