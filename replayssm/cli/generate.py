"""replayssm generate: stream text from a model folder with speculative decoding."""

from __future__ import annotations

import sys
import time

from .common import (
    GREEDY_BELOW,
    SEED_MAX,
    TEMPERATURE_MAX,
    UsageError,
    add_command,
    add_device,
    add_draft_vocab,
    check_ring,
    device,
    integer,
    model_files,
    model_folder,
    note_shadowed,
    number,
)
from .common import power_of_two as pow2

DEFAULT_MAX_LEN = 2048


def add_parser(sub) -> None:
    g = add_command(sub, "generate", "stream text from a model folder with speculative decoding", run)
    g.add_argument("--model", required=True,
                   help="model folder with config.json, *.safetensors and tokenizer.json, or 'tiny' (the embedded "
                        "model)")  # fmt: skip
    g.add_argument("--prompt", required=True, help="the text to continue")
    g.add_argument("--backend", choices=["replay", "recurrent"], default="replay")
    g.add_argument("--drafter", choices=["auto", "mtp", "ngram", "none"], default="auto",
                   help="draft with the model's MTP head, n-gram prompt lookup, or not at all (auto: MTP when the "
                        "checkpoint has a head, else n-gram)")  # fmt: skip
    add_draft_vocab(g)
    g.add_argument("--window", type=integer(1, 64), default=None,
                   help="window length T (1 = plain decode; default 4, or 1 with --drafter none)")  # fmt: skip
    g.add_argument("--ring", type=pow2(2), default=None,
                   help="ring length L: a power of two >= 2 x --window (default: 16, or the least that fits a "
                        "longer window)")  # fmt: skip
    g.add_argument("--max-new-tokens", type=integer(1), default=128)
    g.add_argument("--max-len", type=integer(2), default=None,
                   help="KV positions per request: prompt + --max-new-tokens + --window must fit; at most the "
                        "model's max_position_embeddings (default 2048, or that limit when it is lower)")  # fmt: skip
    g.add_argument(
        "--temperature",
        type=number(0, TEMPERATURE_MAX),
        default=0.0,
        help="0 (or below 1e-5) = greedy; above samples (at most fp32's largest number)",
    )
    g.add_argument("--seed", type=integer(0, SEED_MAX), default=None,
                   help="the sampler's seed (default 0); only with a sampling --temperature")  # fmt: skip
    g.add_argument("--ignore-eos", action="store_true", help="keep going after the end-of-sequence token")
    add_device(g)


def _load(args, dev, folder):
    from ..engine.llm import LLM, DraftVocabError
    from ..models.loader import MTPUnavailableError
    from ..progress import progress

    size = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    with progress(size, f"loading {folder.name}", unit="B", unit_scale=True) as bar:
        try:
            return LLM(folder, backend=args.backend, window=args.window, ring_len=args.ring, device=dev,
                       drafter=args.drafter, max_len=args.max_len, draft_vocab=args.draft_vocab,
                       load_progress=bar.update)  # fmt: skip
        except DraftVocabError as e:  # --drafter auto on a model whose MTP head did not load
            raise UsageError(f"--draft-vocab: {e}; drop --draft-vocab (or use a model with an MTP head)") from e
        except MTPUnavailableError as e:
            raise UsageError(f"--drafter mtp: {e.reason}; use --drafter ngram (or auto)") from e
        except (ValueError, OSError) as e:  # an unsupported config.json, missing or mis-shaped weights
            raise UsageError(f"--model {args.model}: {e}") from e


def _check_fits(args, cfg, dev) -> None:
    """The weights in the dtype ``LLM`` loads them in fit ``dev``."""
    from ..fit import weights_too_big

    big = weights_too_big(cfg, dev)
    if big:
        raise UsageError(f"--model {args.model}: {big}")


def _check_window_fits(args) -> None:
    if args.window + 1 > args.max_len:
        raise UsageError(f"--max-len {args.max_len}: must be greater than --window {args.window} (room for a prompt "
                         "and a window)")  # fmt: skip


def _check_config(args, folder):
    """Everything checked before the weights load (a large model takes minutes), from config.json, tokenizer.json
    and the safetensors headers (``model_files``, ``mtp_head_problem``, ``check_checkpoint``: every tensor's name,
    shape and dtype, each file readable): --max-len within the model's
    max_position_embeddings (the KV cache for --max-len positions is allocated up front) and long enough for the
    prompt, --max-new-tokens and the window; --draft-vocab within the vocabulary; an MTP head where --drafter mtp or
    --draft-vocab needs one. Returns the ``ModelConfig`` and the prompt's token ids."""
    from ..models.loader import load_tokenizer, mtp_head_problem

    cfg = model_files(folder, args.model)
    limit = cfg.max_position_embeddings
    if args.max_len is None:
        args.max_len = DEFAULT_MAX_LEN if limit is None else min(DEFAULT_MAX_LEN, limit)
        _check_window_fits(args)
    if limit is not None and args.max_len > limit:
        raise UsageError(f"--max-len: must be an integer from 2 to {limit} (the model's max_position_embeddings), "
                         f"got {args.max_len}")  # fmt: skip
    if args.draft_vocab is not None and args.draft_vocab > cfg.vocab_size:
        raise UsageError(f"--draft-vocab: must be an integer from 1 to {cfg.vocab_size} (the model's vocabulary), "
                         f"got {args.draft_vocab}")  # fmt: skip
    if args.drafter == "mtp" or (args.drafter == "auto" and args.draft_vocab is not None):
        problem = mtp_head_problem(folder)
        if problem and args.drafter == "mtp":
            raise UsageError(f"--drafter mtp: {folder} has no usable MTP head: {problem}; use --drafter ngram (or "
                             "auto)")  # fmt: skip
        if problem:
            raise UsageError(f"--draft-vocab: {folder} has no usable MTP head ({problem}), so --drafter auto drafts "
                             "n-grams; drop --draft-vocab (or use a model with an MTP head)")  # fmt: skip
    from ..models.checkpoint import check_checkpoint

    mtp = {"mtp": True, "auto": "auto"}.get(args.drafter, False) if args.window > 1 else False  # as LLM loads it
    try:
        check_checkpoint(folder, cfg, mtp)  # the safetensors headers: a bad tensor is named before any weight loads
    except (ValueError, OSError) as e:
        raise UsageError(f"--model {args.model}: {e}") from None
    ids = load_tokenizer(folder).encode(args.prompt).ids
    outside = sorted({i for i in ids if i >= cfg.vocab_size})
    if outside:  # tokens tokenizer.json adds past config.json's vocabulary: the model has no embedding for them
        raise UsageError(f"--model {args.model}: its tokenizer encodes --prompt to token ids {outside[:8]} outside "
                         f"config.json's vocab_size {cfg.vocab_size}; change the prompt or fix the folder")  # fmt: skip
    window = args.window  # (1 with --drafter none: run() saw to it)
    need = len(ids) + args.max_new_tokens + window
    if need > args.max_len:
        tokens = f"{len(ids)} token{'s' if len(ids) != 1 else ''}"
        step = f"--window {window}" if args.drafter != "none" else "1 (--drafter none decodes a token a step)"
        if limit is not None and len(ids) + window > limit:  # no --max-len or --max-new-tokens would do
            raise UsageError(f"--prompt: the prompt is {tokens}, + {step} = {len(ids) + window}, more than the "
                             f"model's max_position_embeddings ({limit}); shorten it")  # fmt: skip
        if limit is not None and need > limit:  # no --max-len would do: the flag to change is --max-new-tokens
            raise UsageError(f"--max-new-tokens {args.max_new_tokens}: the prompt is {tokens}, + --max-new-tokens + "
                             f"{step} = {need}, more than the model's max_position_embeddings ({limit}); lower "
                             "--max-new-tokens or shorten --prompt")  # fmt: skip
        raise UsageError(f"--max-len {args.max_len} is too small: the prompt is {tokens}, + --max-new-tokens "
                         f"{args.max_new_tokens} + {step} = {need}; raise --max-len or shorten --prompt")  # fmt: skip
    return cfg, ids


def run(args) -> int:
    if args.drafter == "none" and args.window not in (None, 1):
        raise UsageError(f"--window {args.window}: --drafter none decodes plainly (window 1); drop --window or pick a "
                         "drafter")  # fmt: skip
    if args.window is None:
        args.window = 1 if args.drafter == "none" else 4
    if args.ring is not None and args.backend == "recurrent":
        raise UsageError(f"--ring {args.ring}: only the replay backend keeps a ring; drop it with --backend recurrent")
    args.ring = check_ring(args.ring, args.window) if args.backend == "replay" else None
    if args.draft_vocab is not None and args.drafter in ("ngram", "none"):
        raise UsageError(
            f"--draft-vocab: only with the MTP drafter (--drafter mtp or auto), got --drafter {args.drafter}"
        )
    if args.window == 1 and args.drafter in ("mtp", "ngram"):
        raise UsageError(f"--drafter {args.drafter} needs --window >= 2 (it drafts --window - 1 tokens); --window 1 "
                         "is plain decoding: use --drafter none (or auto)")  # fmt: skip
    if args.seed is not None and args.temperature < GREEDY_BELOW:
        raise UsageError(f"--seed {args.seed}: only with sampling (--temperature of at least {GREEDY_BELOW:g}); greedy "
                         "decoding draws nothing: drop it")  # fmt: skip
    if not args.prompt:
        raise UsageError("--prompt: must not be empty")
    try:
        args.prompt.encode("utf-8")
    except UnicodeEncodeError:  # bytes the shell passed that are not UTF-8 (Python keeps them as surrogates)
        raise UsageError("--prompt: not valid UTF-8 text") from None
    from ..tiny import TINY_MODEL

    if args.model.lower() == "tiny":
        note_shadowed(args.model)
    folder = model_folder(str(TINY_MODEL) if args.model.lower() == "tiny" else args.model)
    if not (folder / "tokenizer.json").is_file():
        raise UsageError(f"--model {args.model}: the folder has no tokenizer.json, so --prompt cannot be encoded")
    if args.draft_vocab is not None and args.window == 1:
        raise UsageError("--draft-vocab: only with the MTP drafter, and --window 1 is plain decoding: drop it")
    if args.max_len is not None:
        _check_window_fits(args)
    cfg, ids = _check_config(args, folder)
    dev = device(args.device)
    _check_fits(args, cfg, dev)
    if dev.type == "cpu":
        import torch

        torch.set_num_threads(1)  # many tiny tensor operations: more threads only wait on each other (cli/demo.py)
    llm = _load(args, dev, folder)
    eng = llm.engine(temperature=args.temperature, seed=args.seed or 0, ignore_eos=args.ignore_eos)
    req = eng.add(ids, args.max_new_tokens)
    print(args.prompt, end="", flush=True)  # the prompt, then its continuation as it comes (docs/cli.md)
    shown, t0 = "", time.perf_counter()
    while eng.step():
        shown = _stream(llm.decode(req.generated), shown, final=False)
    _stream(llm.decode(req.generated), shown, final=True)
    dt = time.perf_counter() - t0
    eos = llm.model.config.eos_token_id or ()
    why = "end-of-sequence token" if req.generated and req.generated[-1] in eos and not args.ignore_eos else (
        "--max-new-tokens")  # fmt: skip
    print(flush=True)
    mean = f"{sum(req.accepted) / len(req.accepted):.2f}" if req.accepted else "- (the prefill gave every token)"
    steps = f"{req.steps} step{'s' if req.steps != 1 else ''} after the prefill's token"
    print(f"[{len(req.generated)} tokens in {dt:.2f} s ({len(req.generated) / dt:.1f} tokens/s), {steps}, "
          f"mean accepted {mean} of {llm.runner_config.window}, backend {args.backend}, drafter {llm.drafter}; "
          f"stopped at the {why}]", file=sys.stderr)  # fmt: skip
    return 0


def _stream(text: str, shown: str, *, final: bool) -> str:
    """Print what ``text`` adds to ``shown``; an incomplete UTF-8 character at the end waits for its bytes."""
    if not final:
        text = text.rstrip("\ufffd")
    if text.startswith(shown) and len(text) > len(shown):
        print(text[len(shown) :], end="", flush=True)
        return text
    return shown
