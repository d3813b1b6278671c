"""HF transformers sampler: KV-cached decoding with per-token logprobs of the sampling distribution.

``sampler.decode: lean`` (default) runs the workbench's own decode loop (``workbench.rollout.decode``),
``generate`` runs transformers' ``generate``, the reference the lean loop is tested against.

Sampling applies exactly what the learner applies: the run config's temperature (and top-p),
nothing else. ``generate`` would otherwise fill every setting the call leaves unset from the model
directory's ``generation_config.json`` (a ``repetition_penalty``, ``top_k``, ``no_repeat_ngram_size``,
``bad_words_ids``, ...), reshaping the sampled distribution but not the learner's: a silently
off-policy run. So generation runs under a neutral config holding only the special token ids.
"""

from __future__ import annotations

import contextlib

import torch
from transformers import GenerationConfig

from workbench.batch import Rollouts
from workbench.config import SamplerConfig
from workbench.rollout.base import grouped_rollouts
from workbench.rollout.decode import decode
from workbench.rollout.prompts import PromptFormat, as_prompt_format
from workbench.rollout.weights import has_adapters, plain_copy, plain_state_dict
from workbench.tasks import Problem

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class HFSampler:
    """Samples with its own weight copy in ``sampler.dtype``; shares the learner's module when dtypes agree."""

    def __init__(self, learner_model, tokenizer, cfg: SamplerConfig, prompt: PromptFormat | str = "{prompt}") -> None:
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.prompt = as_prompt_format(prompt)
        self.stop_ids = self.prompt.stops(tokenizer)  # EOS, and a chat template's end-of-turn token
        self.dtype = DTYPES[cfg.dtype]
        self.model = None
        self._compiled: tuple[torch.nn.Module, torch.nn.Module] | None = None  # (model, its compiled wrapper)
        self.sync_weights(learner_model)

    def sync_weights(self, learner_model) -> None:
        if learner_model.dtype == self.dtype:
            self.model = learner_model  # same weights, same precision: nothing to copy
        elif self.model is None or self.model is learner_model:
            self.model = plain_copy(learner_model).to(self.dtype).eval()
        elif has_adapters(learner_model):  # LoRA: the adapters merged into plain weights (rollout/weights.py)
            with torch.no_grad():
                self.model.load_state_dict(plain_state_dict(learner_model))  # casts to the sampler's dtype
        else:
            with torch.no_grad():
                for dst, src in zip(self.model.parameters(), learner_model.parameters(), strict=True):
                    dst.copy_(src)  # casts to the sampler's dtype

    def close(self) -> None:
        """Nothing to release: the weights are plain torch modules."""

    @torch.no_grad()
    def generate(self, problems: list[Problem], group_size: int, *, temperature: float, seed: int) -> Rollouts:
        tok = self.tokenizer
        prompts = [self.prompt.render(p.prompt) for p in problems]
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.model.device)
        torch.manual_seed(seed)
        was_training = self.model.training
        self.model.eval()
        if self.cfg.decode == "lean":
            completion, sampler_logp = decode(
                self.decoding_model(),
                enc["input_ids"],
                enc["attention_mask"],
                group_size,
                max_new_tokens=self.cfg.max_new_tokens,
                temperature=temperature,
                top_p=self.cfg.top_p,
                stop_ids=self.stop_ids,
                pad_id=tok.pad_token_id,
            )
        else:
            completion, sampler_logp = self.generate_reference(enc, group_size, temperature)
        self.model.train(was_training)
        sampler_logp = sampler_logp.cpu()
        completion, enc = completion.cpu(), enc.to("cpu")  # rollouts live on the CPU; the learner moves them
        mask, truncated = response_mask(completion, self.stop_ids)
        sampler_logp = torch.where(mask.bool(), sampler_logp, torch.zeros_like(sampler_logp))
        texts = tok.batch_decode(torch.where(mask.bool(), completion, tok.pad_token_id), skip_special_tokens=True)
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

    def decoding_model(self) -> torch.nn.Module:
        """The module the lean decode calls: the model, or (``sampler.compile``) its ``torch.compile`` wrapper,
        made once per model object (it shares the weights, so syncs reach it) and compiled on first use."""
        if not self.cfg.compile:
            return self.model
        if self._compiled is None or self._compiled[0] is not self.model:
            self._compiled = (self.model, torch.compile(self.model, dynamic=True))
        return self._compiled[1]

    def generate_reference(self, enc, group_size: int, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        """``sampler.decode: generate``: transformers' ``generate`` (completion ids [B, T], their logp [B, T])."""
        greedy = temperature == 0
        with run_config_only(self.model, self.tokenizer):
            out = self.model.generate(
                **enc,
                do_sample=not greedy,
                temperature=None if greedy else temperature,
                top_p=None if greedy else self.cfg.top_p,
                top_k=None
                if greedy
                else 0,  # transformers defaults to top-k 50: off, so logprobs are the true distribution
                num_return_sequences=group_size,
                max_new_tokens=self.cfg.max_new_tokens,
                output_scores=True,
                return_dict_in_generate=True,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.stop_ids,
            )
        completion = out.sequences[:, enc["input_ids"].shape[1] :]  # [B, T]
        scores = torch.stack(out.scores, dim=1).float()  # [B, T, V] logits after temperature/top-p
        logp = torch.log_softmax(scores, dim=-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)  # [B, T]
        return completion, logp


@contextlib.contextmanager
def run_config_only(model, tokenizer):
    """Generate under a neutral ``GenerationConfig``: only the special token ids, so every setting the
    ``generate`` call leaves unset takes transformers' neutral default, never the model directory's value
    (its ``generation_config.json`` fills unset fields otherwise). The model's own config is restored."""
    saved = model.generation_config
    model.generation_config = GenerationConfig(
        bos_token_id=getattr(tokenizer, "bos_token_id", None),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    try:
        yield
    finally:
        model.generation_config = saved


def response_mask(completion: torch.Tensor, stop_ids: int | list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """1 up to and including the first stop token (EOS, end of turn); rows without one are truncated (all ones)."""
    is_stop = torch.isin(completion, torch.as_tensor(stop_ids, device=completion.device))  # [B, T]
    seen_before = (is_stop.cumsum(dim=1) - is_stop.long()) > 0  # a stop token strictly earlier in the row
    mask = (~seen_before).float()
    truncated = ~is_stop.any(dim=1)
    return mask, truncated
