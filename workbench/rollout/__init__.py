"""Samplers behind one protocol (``base.Sampler``): HF transformers, or vLLM (imported lazily)."""

from __future__ import annotations


def build_sampler(cfg, learner_model, tokenizer, prompt=None):
    """The sampler ``cfg.sampler.backend`` names, holding ``learner_model``'s current weights.

    ``cfg`` is the ``RunConfig`` (the vLLM engine takes the run's seed); ``prompt`` is a
    ``prompts.PromptFormat`` or a template string, by default ``cfg.model.prompt_template`` as plain
    text. Call ``close()`` on the result when done.
    """
    prompt = cfg.model.template_text if prompt is None else prompt
    if cfg.sampler.backend == "vllm":
        from workbench.rollout.vllm import VLLMSampler  # deferred: torch

        return VLLMSampler(learner_model, tokenizer, cfg.sampler, prompt, seed=cfg.seed)
    from workbench.rollout.hf import HFSampler  # deferred: torch, transformers

    return HFSampler(learner_model, tokenizer, cfg.sampler, prompt)
