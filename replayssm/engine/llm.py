"""``LLM``: the user-facing entry point -- load a model, generate with speculative decoding."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from ..models.config import ModelConfig
from ..models.loader import MTPUnavailableError, load_model, load_tokenizer, mtp_head_problem
from ..models.model import HybridLM
from .checks import check_positive_int, check_seed, check_temperature, is_int
from .drafter import HostDrafter, check_host_drafter
from .engine import Engine
from .llm_args import (  # noqa: F401  (DraftVocabError and DTYPES: part of this module's API)
    DEFAULT_MAX_LEN,
    DTYPES,
    DraftVocabError,
    _check_draft_vocab,
    _check_max_len,
    _check_pool_fits,
    _device_dtype,
    _weights_to_place,
)
from .runner import ModelRunner, RunnerConfig

DRAFTERS = ("auto", "mtp", "ngram", "none")
MAX_WINDOW = 64  # the longest window LLM and the CLI accept (--window); verify cost grows with it, acceptance not


@dataclass
class Output:
    """One prompt's generation. ``accepted``: the tokens each verify step accepted, as the verify counted them (a
    measure of the drafter): a last step may accept more than ``max_new_tokens`` leaves room for, and
    ``token_ids`` drops those, so ``len(token_ids)`` can be less than ``sum(accepted)``."""

    token_ids: list[int]
    text: str | None
    steps: int
    accepted: list[int]

    @property
    def mean_accepted(self) -> float:
        """The mean of ``accepted`` (0.0 for no steps)."""
        return sum(self.accepted) / len(self.accepted) if self.accepted else 0.0


class LLM:
    """Generate with a hybrid GDN model.

    ``model``: a folder (config.json, safetensors, optional tokenizer.json) or a ``HybridLM``, which is used as it
    is: moved and cast in place to ``device``/``dtype`` (``nn.Module.to``), even when building the rest then fails.
    ``backend``: "replay" (checkpoint + ring, exact fold) or "recurrent" (per-token snapshots).
    ``window``: the window length T = last accepted token + T-1 drafts, 1 to 64 (1 = plain decode: only with
    drafter "auto" or "none"; "mtp", "ngram" and drafter objects need window >= 2; with drafter "none" the LLM
    decodes plainly, and the window is 1 whatever is passed: ``runner_config.window`` says so).
    ``drafter``: "mtp" (the model's MTP head, drafting on the device inside the step), "ngram" (prompt
    lookup), "auto" (MTP when the checkpoint has an MTP head, else n-gram), "none", or your own object with
    ``propose(context, k) -> list[int]`` (``engine.drafter.HostDrafter``, docs/drafters.md: called on the
    host once per request per step with the prompt + generated tokens; up to k = window - 1 tokens);
    ``self.drafter`` says which one runs (the name, or your object). ``device``/``dtype`` default to CUDA/bf16
    when a GPU is present, else CPU/fp32.
    ``ring_len``: the replay backend's ring length L, a power of two >= 2 * window (None: 16, or the least power of
    two >= 2 * window; ``RunnerConfig.ring_len``); refused unless the backend or the shadow backend is replay.
    ``max_slots`` bounds concurrent requests, ``max_len`` their length (at most the model's
    ``max_position_embeddings``; None: 2048, or that limit when it is lower, as the CLI's ``--max-len``; KV memory
    for it is allocated up front). ``shadow_backend``: run a second
    GDN state pool of that backend in lockstep (``state.lockstep.LockstepPool``): ``generate`` then runs its steps
    one after the other and compares the two pools' committed states (``runner.states_equal``) after every step,
    raising ``RuntimeError`` at the first difference; ``self.lockstep_checks`` counts the comparisons the last
    ``generate`` made (one per step, the step that ends a request included). ``draft_vocab``: the tokens the MTP
    drafter may propose, None (all), an int N (the N lowest ids) or a sequence of token ids (engine/draft_head.py;
    the output stays exact, only acceptance can change). ``load_progress(nbytes)`` is called
    as each weight file of a model folder has been read.
    """

    def __init__(self, model: str | Path | HybridLM, *, backend: str = "replay", window: int = 4,
                 drafter: str | HostDrafter = "auto", device=None, dtype=None, max_slots: int = 16,
                 max_len: int | None = None,
                 ring_len: int | None = None, cuda_graphs: bool = True, shadow_backend: str | None = None,
                 draft_vocab=None, load_progress=None):  # fmt: skip
        if not isinstance(model, (str, os.PathLike, HybridLM)):
            raise TypeError(f"model must be a model folder (a str or a Path) or a HybridLM, got {type(model).__name__}")
        custom = not isinstance(drafter, str)
        if not custom and drafter == "none":  # plain decode: the window is 1, whatever is passed (nothing checks it)
            window = 1
        if custom:
            check_host_drafter(drafter, DRAFTERS)
        if not custom and drafter not in DRAFTERS:
            raise ValueError(f"drafter must be one of {DRAFTERS} or an object with propose(context, k), got "
                             f"{drafter!r}")  # fmt: skip
        # checked before the (slow) load: errors name the argument as passed (window=, ring_len=, ...)
        checks = dict(backend=backend, max_slots=max_slots, window=window, ring_len=ring_len, cuda_graphs=cuda_graphs,
                      shadow_backend=shadow_backend, draft_vocab=draft_vocab)  # fmt: skip
        RunnerConfig(max_len=DEFAULT_MAX_LEN if max_len is None else max_len, **checks)
        if window > MAX_WINDOW:
            raise ValueError(f"window={window}: must be from 1 to {MAX_WINDOW} (as the CLI's --window)")
        if ring_len is not None and "replay" not in (backend, shadow_backend):
            raise ValueError(f"ring_len={ring_len}: only the replay backend keeps a ring (backend={backend!r}); drop "
                             "it (as the CLI refuses --ring with --backend recurrent)")  # fmt: skip
        if (custom or drafter in ("mtp", "ngram")) and window < 2:
            what = "a drafter object" if custom else f"drafter={drafter!r}"
            raise ValueError(f"{what} needs window >= 2 (it proposes window - 1 tokens), got window={window}; "
                             "window=1 is plain decode: pass drafter='none' (or 'auto')")  # fmt: skip
        if isinstance(model, (str, Path)) and str(model).lower() == "tiny" and not Path(model).exists():
            raise FileNotFoundError(f"no model folder {str(model)!r}: the CLI's 'tiny' is the embedded model's folder, "
                                    "replayssm.tiny.TINY_MODEL; pass that")  # fmt: skip
        config = model.config if isinstance(model, HybridLM) else ModelConfig.from_file(model)
        if max_len is None:  # the default: 2048, or the model's own limit when it is lower
            max_len = min(DEFAULT_MAX_LEN, config.max_position_embeddings or DEFAULT_MAX_LEN)
            RunnerConfig(max_len=max_len, **checks)  # (the window must fit in it)
        _check_max_len(config, max_len)  # before loading: a clear config error first
        if draft_vocab is not None:  # it sizes the MTP drafter's head: checked before anything loads or moves
            no_mtp = custom or drafter in ("ngram", "none") or window == 1
            if isinstance(model, HybridLM):
                no_mtp = no_mtp or model.mtp is None
            elif drafter == "auto" and not no_mtp:  # n-grams where a folder has no head (its headers say; "mtp":
                no_mtp = mtp_head_problem(model) is not None  # the load refuses it, MTPUnavailableError, first)
            _check_draft_vocab(draft_vocab, config.vocab_size, None if no_mtp else "mtp", drafter, window)
        device, dtype = _device_dtype(device, dtype)
        if load_progress is not None and not callable(load_progress):
            raise TypeError(f"load_progress must be None or a callable taking a byte count, got {load_progress!r}")
        if isinstance(model, HybridLM) and drafter == "mtp" and model.mtp is None:
            raise MTPUnavailableError("drafter='mtp': the model has no MTP head (load_model(..., mtp=True))")
        weights = _weights_to_place(model, config, dtype, device)
        _check_pool_fits(config, backend, shadow_backend, window, ring_len, max_slots, max_len, dtype, device, weights)
        self.tokenizer = None
        if isinstance(model, HybridLM):
            self.model = model.to(device=device, dtype=dtype).eval()
        else:
            mtp = {"mtp": True, "auto": "auto"}.get(drafter, False) if window > 1 and not custom else False
            self.model = load_model(model, dtype=dtype, device=device, mtp=mtp, progress=load_progress)
            if (Path(model) / "tokenizer.json").is_file():
                self.tokenizer = load_tokenizer(model)
        if drafter == "auto":
            drafter = "mtp" if self.model.mtp is not None else "ngram"
        if not custom and (drafter == "none" or window == 1):
            drafter, window = "none", 1
        if draft_vocab is not None and drafter != "mtp":  # drafter='auto' on a folder without an MTP head
            _check_draft_vocab(draft_vocab, self.model.config.vocab_size, None, "auto", window)
        self.drafter = drafter
        self.runner_config = RunnerConfig(backend=backend, max_slots=max_slots, max_len=max_len, window=window,
                                          ring_len=ring_len, cuda_graphs=cuda_graphs,
                                          shadow_backend=shadow_backend, draft_vocab=draft_vocab,
                                          device_drafter="mtp" if drafter == "mtp" else None)  # fmt: skip
        self.runner = ModelRunner(self.model, self.runner_config)
        self._placed = _placement(self.model)  # the weights' dtype and device this LLM's pools were built for
        self._memory = _weight_memory(self.model)  # ... and where they were when its steps were captured
        self.lockstep_checks = 0
        self._unreleased: Engine | None = None  # an engine of generate() whose clean-up did not finish

    def encode(self, text: str) -> list[int]:
        """``text`` as token ids (the model folder's tokenizer.json)."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}")
        if self.tokenizer is None:
            raise ValueError("this model has no tokenizer.json: pass token ids instead of text")
        return self.tokenizer.encode(text).ids

    def decode(self, ids: list[int]) -> str:
        """Token ids (each in the model's vocabulary, as ``generate`` takes them) as text; "" when the model has no
        tokenizer (``Output.text`` is then None)."""
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
            raise TypeError(f"decode takes token ids, got {type(ids).__name__}")
        self.runner.check_token_ids(ids, "decode's ids")
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return self.tokenizer.decode(ids) if self.tokenizer is not None else ""

    def engine(self, *, temperature: float = 0.0, seed: int = 0, ignore_eos: bool = True) -> Engine:
        """An ``Engine`` over this LLM's runner and drafter, as ``generate`` builds one (docs/engine.md): add
        requests and step it yourself. ``ignore_eos=False`` stops requests at the model's end-of-sequence token.
        Weights moved in place since this LLM was built (``.to()``, or another LLM over the same ``HybridLM``) are
        refused in another dtype or on another device; back in this LLM's, the runner's CUDA graphs are captured
        again, since they would read the weights' old memory (``ModelRunner.weights_moved``; an engine's steps check
        it too, ``engine/weights.py``)."""
        if not isinstance(ignore_eos, bool):
            raise TypeError(f"ignore_eos={ignore_eos!r}: must be a bool")
        now = _placement(self.model)
        if now != self._placed:  # another LLM over the same HybridLM (or a .to()) moved it
            (dt, dev), (was_dt, was_dev) = now, self._placed
            raise RuntimeError(f"the model's weights are now {dt} on {dev}, but this LLM was built for {was_dt} on "
                               f"{was_dev} (an LLM built over the same HybridLM, or a .to() call, moved them in "
                               "place): move them back, or build this LLM again")  # fmt: skip
        if _weight_memory(self.model) != self._memory:  # the same dtype and device, new memory (a .to() round trip)
            self.runner.weights_moved()  # its captured steps would read the old memory: captured again
            self._memory = _weight_memory(self.model)
        eos = None if ignore_eos else self.model.config.eos_token_id
        if not ignore_eos and eos is None:
            warnings.warn("ignore_eos=False: the model names no end-of-sequence token (no eos_token_id in its "
                          "config.json or generation_config.json), so requests run to max_new_tokens",
                          stacklevel=2)  # fmt: skip
        return Engine(self.runner, drafter=self.drafter, temperature=temperature, seed=seed, eos_token_id=eos)

    def _prompt_ids(self, prompts) -> list[list[int]]:
        """A str (one prompt), a list of str, or a list of token-id lists -> token-id lists, all checked."""
        if isinstance(prompts, str):
            prompts = [prompts]
        if not isinstance(prompts, (list, tuple)):
            raise TypeError(f"prompts must be a str, a list of str or a list of token-id lists, got "
                            f"{type(prompts).__name__}")  # fmt: skip
        out = []
        for i, p in enumerate(prompts):
            if isinstance(p, str):
                ids = self.encode(p)
            elif isinstance(p, (list, tuple)):
                ids = list(p)
                self.runner.check_token_ids(ids, f"prompts[{i}]")
            else:
                hint = " (a flat list of ints: wrap it, [[1, 2, 3]] is one prompt)" if isinstance(p, int) else ""
                raise TypeError(f"prompts[{i}] must be a str or a list of token ids, got {type(p).__name__}{hint}")
            if not ids:
                raise ValueError(f"prompts[{i}] is empty")
            out.append(ids)
        return out

    def generate(
        self,
        prompts: str | list[str] | list[list[int]],
        max_new_tokens: int = 64,
        *,
        temperature: float = 0.0,
        seed: int = 0,
        arrivals: list[int] | None = None,
        ignore_eos: bool = True,
    ) -> list[Output]:
        """Generate for many prompts at once (continuous batching; ``arrivals[i]`` = engine iteration at
        which prompt i joins, default 0). Greedy when ``temperature`` is 0; otherwise sampled, the draws seeded by
        ``seed`` (the same seed, the same tokens). Every prompt gets ``max_new_tokens`` tokens whatever they say:
        ``ignore_eos=True`` (the default) keeps lengths comparable across backends; ``ignore_eos=False`` stops a
        prompt at the model's end-of-sequence token.

        ``prompts``: a str (one prompt: the result is a list of one), a list of str, or a list of token-id
        lists (ints in [0, vocab)). Everything is checked before any request starts; if generation fails, every
        slot and parked state the call held is given back before the exception propagates (if that clean-up is
        itself interrupted, the next call finishes it first)."""
        ids = self._prompt_ids(prompts)
        max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
        check_temperature(temperature)
        check_seed(seed)
        if not isinstance(ignore_eos, bool):
            raise TypeError(f"ignore_eos={ignore_eos!r}: must be a bool")
        if arrivals is not None and hasattr(arrivals, "tolist"):  # a NumPy array or a tensor of iterations
            arrivals = arrivals.tolist()
        if arrivals is not None and (not isinstance(arrivals, (list, tuple)) or len(arrivals) != len(ids)):
            raise ValueError(f"arrivals must list one engine iteration per prompt ({len(ids)}), got {arrivals!r:.80}")
        bad = [i for i, a in enumerate(arrivals or ()) if not is_int(a) or a < 0]
        if bad:
            raise ValueError(f"arrivals[{bad[0]}]={arrivals[bad[0]]!r}: must be an int >= 0 (an engine iteration)")
        if self._unreleased is not None:  # a call whose clean-up was interrupted (a second Ctrl-C): finish it now
            self._unreleased.release()
            self._unreleased = None
        eng = self.engine(temperature=temperature, seed=seed, ignore_eos=ignore_eos)
        if self.runner_config.shadow_backend is not None:
            eng.overlap = False  # every step committed before the next starts: the two pools can be compared
            eng.on_commit = lambda slots: self._check_lockstep(eng, slots)
        try:
            for i, p in enumerate(ids):
                try:
                    eng.add(p, max_new_tokens, arrival=arrivals[i] if arrivals else 0)
                except (ValueError, TypeError) as e:  # which prompt: the message names it
                    e.args = (f"prompts[{i}]: {e}",)
                    raise
            self.lockstep_checks = 0  # (once every request is taken: a refused call leaves the last count)
            reqs = eng.run()
        except BaseException:
            self._unreleased = eng  # until its release() has run to the end
            eng.release()
            self._unreleased = None
            raise
        return [Output(r.generated, self.decode(r.generated) if self.tokenizer else None, r.steps, r.accepted)
                for r in reqs]  # fmt: skip

    def _check_lockstep(self, eng: Engine, slots: list[int]) -> None:
        """After each committed step, before it frees any slot: both pools' committed states of ``slots`` bitwise
        equal, every layer."""
        if not slots:
            return
        if not self.runner.states_equal(slots):
            cfg = self.runner_config
            raise RuntimeError(f"lockstep check failed at engine iteration {eng.iteration}: the {cfg.backend} and "
                               f"{cfg.shadow_backend} pools' committed states differ (slots {slots})")  # fmt: skip
        self.lockstep_checks += 1


def _placement(model: HybridLM) -> tuple[torch.dtype, torch.device]:
    """The dtype and device of a model's first parameter (``LLM`` places them all together)."""
    p = next(model.parameters())
    return p.dtype, p.device


def _weight_memory(model: HybridLM) -> tuple[int, ...]:
    """Where each parameter's data lives: a CUDA graph captured over the weights reads these addresses."""
    return tuple(p.data_ptr() for p in model.parameters())
