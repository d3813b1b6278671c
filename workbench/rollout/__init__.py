"""Samplers behind one protocol (``base.Sampler``): HF transformers, or vLLM (imported lazily)."""

from __future__ import annotations


def build_sampler(cfg, learner_model, tokenizer, prompt_template: str | None = None):
    """The sampler ``cfg.sampler.backend`` names, holding ``learner_model``'s current weights.

    ``cfg`` is the ``RunConfig`` (the vLLM engine takes the run's seed); the template defaults
    to ``cfg.model.prompt_template``. Call ``close()`` on the result when done.
    """
    template = cfg.model.prompt_template if prompt_template is None else prompt_template
    if cfg.sampler.backend == "vllm":
        from workbench.rollout.vllm import VLLMSampler  # deferred: torch

        return VLLMSampler(learner_model, tokenizer, cfg.sampler, template, seed=cfg.seed)
    from workbench.rollout.hf import HFSampler  # deferred: torch, transformers

    return HFSampler(learner_model, tokenizer, cfg.sampler, template)
