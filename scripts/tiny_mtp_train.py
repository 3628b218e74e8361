"""Train the MTP head of the embedded model (main model frozen) and save it into the model folder.

Called by ``train_tiny.py`` after the main model (``--mtp-steps``), or alone on a trained folder
(``train_tiny.py --mtp-only --out DIR``). Writes the ``mtp.*`` tensors into ``model.safetensors``,
``mtp_num_hidden_layers`` into ``config.json``, and an "MTP head" section into ``TRAINING.md``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path

import torch
from tiny_corpus import build_corpus
from tiny_mtp import acceptance, distill_loss, greedy_sequences, line_starts, main_hidden, unrolled_logits

from replayssm.models.loader import load_model
from replayssm.models.mtp import MTPHead


def add_mtp_args(p) -> None:
    g = p.add_argument_group("MTP head")
    g.add_argument("--mtp-only", action="store_true", help="train only the MTP head of the model already in --out")
    g.add_argument("--mtp-steps", type=int, default=800, help="MTP training steps (0: no head)")
    g.add_argument("--mtp-batch", type=int, default=8)
    g.add_argument("--mtp-lr", type=float, default=2e-3)
    g.add_argument("--mtp-passes", type=int, default=3, help="draft steps unrolled in training (T-1 of the demo)")
    g.add_argument("--mtp-prompt-len", type=int, default=128)
    g.add_argument("--mtp-gen-tokens", type=int, default=128, help="greedy tokens after each training prompt")
    g.add_argument("--mtp-gen-seqs", type=int, default=160, help="prompt + greedy continuation sequences")
    g.add_argument("--mtp-text-seqs", type=int, default=384, help="plain training-text sequences")
    g.add_argument("--mtp-eval-seqs", type=int, default=32, help="held-out prompts (validation files) for acceptance")
    g.add_argument("--mtp-eval-every", type=int, default=100)


def _hidden(model, ids, chunk=32):
    return torch.cat([main_hidden(model, ids[i : i + chunk]) for i in range(0, len(ids), chunk)])


def _data(model, args, log):
    gen = torch.Generator().manual_seed(args.seed + 1)
    train_ids, val_ids, _, info = build_corpus(args.val_every)
    P, G, L = args.mtp_prompt_len, args.mtp_gen_tokens, args.mtp_prompt_len + args.mtp_gen_tokens
    t0 = time.time()
    starts = line_starts(train_ids, args.mtp_gen_seqs, P, gen)
    seq_gen = greedy_sequences(model, [train_ids[s : s + P].tolist() for s in starts], G)
    val_starts = line_starts(val_ids, args.mtp_eval_seqs, P, gen)
    seq_eval = greedy_sequences(model, [val_ids[s : s + P].tolist() for s in val_starts], G)
    t_gen = time.time() - t0
    log(f"mtp data: {len(seq_gen)} + {len(seq_eval)} greedy sequences of {L} tokens in {t_gen:.0f} s")
    text = torch.randint(0, len(train_ids) - L - 1, (args.mtp_text_seqs,), generator=gen)
    seq_text = torch.stack([train_ids[s : s + L].long() for s in text.tolist()])
    train = torch.cat([seq_gen, seq_text])
    t0 = time.time()
    hid, hid_eval = _hidden(model, train), _hidden(model, seq_eval)
    t_hid = time.time() - t0
    log(f"mtp data: main hidden states of {train.numel():,} + {seq_eval.numel():,} tokens in {t_hid:.0f} s")
    stats = {"gen_s": t_gen, "hidden_s": t_hid, "files_train": info["files_train"], "files_val": info["files_val"]}
    return train, hid, len(seq_gen), seq_eval, hid_eval, stats


def _init_head(model):
    cfg = replace(model.config, mtp_num_hidden_layers=1)
    head = MTPHead(cfg)
    last_attn = model.model.layers[cfg.attention_layers[-1]]  # warm start: the main model's last attention layer
    head.layers[0].load_state_dict(last_attn.state_dict())
    return head


def train_mtp(out: Path, args, log=print, command: str = "") -> dict:
    torch.manual_seed(args.seed + 2)
    model = load_model(out)
    for p in model.parameters():
        p.requires_grad_(False)
    train, hid, n_gen, seq_eval, hid_eval, stats = _data(model, args, log)
    head = _init_head(model).train()
    opt = torch.optim.AdamW(head.parameters(), lr=args.mtp_lr, betas=(0.9, 0.95), weight_decay=0.01)
    gen = torch.Generator().manual_seed(args.seed + 3)
    embed, lm_head = model.model.embed_tokens, model.lm_head
    weights = [1.0] * args.mtp_passes
    T = args.mtp_passes + 1
    P = args.mtp_prompt_len
    ngram_eval = acceptance(head, model, hid_eval, seq_eval, P, T)["ngram"]
    best, curve, t0 = None, [], time.time()
    for step in range(args.mtp_steps):
        warm = min(50, args.mtp_steps // 10 or 1)
        frac = (step - warm) / max(1, args.mtp_steps - warm)
        lr = args.mtp_lr * (min(1.0, (step + 1) / warm) if step < warm else 0.1 + 0.45 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        half = args.mtp_batch // 2  # half greedy continuations, half plain text
        idx = torch.cat([torch.randint(0, n_gen, (half,), generator=gen),
                         torch.randint(n_gen, len(train), (args.mtp_batch - half,), generator=gen)])  # fmt: skip
        ids, h = train[idx], hid[idx]
        logits = unrolled_logits(head, embed, lm_head, h, ids, args.mtp_passes)
        loss, parts = distill_loss(logits, lm_head(h), weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        last = step + 1 == args.mtp_steps
        if (step + 1) % args.mtp_eval_every == 0 or last:
            head.eval()
            acc = acceptance(head, model, hid_eval, seq_eval, P, T)["mtp"]
            head.train()
            curve.append((step + 1, loss.item(), parts, acc, time.time() - t0))
            per_pass = " ".join(f"{x:.3f}" for x in parts)
            log(f"mtp step {step + 1:5d}/{args.mtp_steps}  loss {loss.item():.4f} ({per_pass})  "
                f"held-out acceptance {acc:.3f} (n-gram {ngram_eval:.3f})  {time.time() - t0:7.1f}s")  # fmt: skip
            if best is None or acc > best[0]:
                best = (acc, step + 1, {k: v.detach().clone() for k, v in head.state_dict().items()})
    train_s = time.time() - t0
    head.load_state_dict(best[2])
    save_head(out, head, args.save_dtype)
    reloaded = load_model(out, mtp=True)  # the saved (rounded) head, through the real loader
    saved = acceptance(reloaded.mtp, reloaded, _hidden(reloaded, seq_eval), seq_eval, P, T)
    res = dict(stats, command=command, train_s=train_s, curve=curve, best_step=best[1], best_acc=best[0],
               saved=saved, window=T, params=sum(p.numel() for p in head.parameters()),
               eval_positions=saved["positions"])  # fmt: skip
    write_heldout_prompts(out, args.val_every)
    write_mtp_report(out, args, res)
    return res


def write_heldout_prompts(out: Path, val_every: int, n: int = 6, min_chars: int = 160) -> list[dict]:
    """``heldout_prompts.json``: ``n`` prompts (whole lines from a third of the way into the file, at least
    ``min_chars`` long) from validation files, which neither the model nor its MTP head was trained on."""
    from tiny_corpus import stdlib_py_files

    root, _ = stdlib_py_files()
    names = build_corpus(val_every)[3]["val_names"]
    prompts = []
    for name in names[:: max(1, len(names) // n)][:n]:
        lines = (root / name).read_text().splitlines(keepends=True)
        i = len(lines) // 3
        while i < len(lines) and not lines[i].strip():
            i += 1
        j = i
        while j < len(lines) and sum(map(len, lines[i:j])) < min_chars:
            j += 1
        prompts.append({"file": name, "line": i + 1, "text": "".join(lines[i:j])})
    (out / "heldout_prompts.json").write_text(json.dumps(prompts, indent=1) + "\n")
    return prompts


def save_head(out: Path, head: MTPHead, dtype: str) -> None:
    """Add the head's tensors (``mtp.*``) to model.safetensors and declare it in config.json."""
    from safetensors.torch import load_file, save_file

    f = out / "model.safetensors"
    tensors = {k: v for k, v in load_file(str(f)).items() if not k.startswith("mtp.")}
    dt = getattr(torch, dtype)
    tensors.update({f"mtp.{k}": v.detach().to(dt).contiguous() for k, v in head.state_dict().items()})
    save_file(tensors, str(f), metadata={"format": "pt"})
    cfg = json.loads((out / "config.json").read_text())
    cfg.update(mtp_num_hidden_layers=1, mtp_use_dedicated_embeddings=False)
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def write_mtp_report(out: Path, args, res: dict) -> None:
    keys = sorted(k for k in vars(args) if k.startswith("mtp_") and k != "mtp_only")
    resolved = json.dumps({k: getattr(args, k) for k in keys}, sort_keys=True)
    import datetime
    import platform

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## MTP head",
        "",
        "Trained by `scripts/train_tiny.py` after the main model (or alone: `--mtp-only`), main model frozen",
        "(its tensors are not rewritten):",
        "",
        "```",
        res["command"],
        "```",
        "",
        f"Resolved MTP arguments: `{resolved}`",
        "",
        f"- date: {date}; machine: {platform.machine()}, {args.threads} torch threads; torch {torch.__version__}",
        f"- one full-attention decoder layer + `fc` + three norms ({res['params']:,} parameters), warm-started "
        "from the main model's last attention layer; embedding and LM head shared with the main model",
        f"- data: {args.mtp_gen_seqs} sequences of a {args.mtp_prompt_len}-byte prompt (a random line start in the "
        f"training files) + the main model's {args.mtp_gen_tokens}-token greedy continuation, and "
        f"{args.mtp_text_seqs} plain training-text windows of the same length; same file split as the main model",
        f"- objective: soft cross-entropy to the main model's next-token distribution, unrolled {args.mtp_passes} "
        "draft steps with the drafter's own attention pattern (scripts/tiny_mtp.py `unrolled_logits`)",
        f"- AdamW, peak LR {args.mtp_lr}, cosine to 0.1 x peak, batch {args.mtp_batch}, {args.mtp_steps} steps; "
        f"kept the step with the best held-out acceptance (step {res['best_step']})",
        f"- wall time: {res['gen_s']:.0f} s greedy data, {res['hidden_s']:.0f} s main hidden states, "
        f"{res['train_s']:.0f} s training ({(res['gen_s'] + res['hidden_s'] + res['train_s']) / 60:.1f} min)",
        f"- held-out acceptance (T={res['window']}, every position of the greedy continuations of "
        f"{args.mtp_eval_seqs} prompts from the validation files, {res['eval_positions']:,} positions): "
        f"mean accepted length {res['saved']['mtp']:.3f} with the saved head vs {res['saved']['ngram']:.3f} with "
        "n-gram drafts",
        "",
        "Log (step, loss, per-pass loss, held-out acceptance, seconds):",
        "",
        "```",
    ]
    lines += [f"{s:6d} {lo:.4f} {' '.join(f'{x:.3f}' for x in parts)} {a:.3f} {t:8.1f}" for s, lo, parts, a, t in
              res["curve"]]  # fmt: skip
    lines += ["```", ""]
    f = out / "TRAINING.md"
    text = f.read_text() if f.is_file() else ""
    text = text.split("## MTP head")[0].rstrip("\n") + "\n\n"
    f.write_text(text + "\n".join(lines))
