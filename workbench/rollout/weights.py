"""A policy module's weights as a sampler loads them: the model's own (HF) names, any LoRA adapters merged in.

A LoRA learner (``learner.lora``) trains adapters that ``peft`` injects into the policy's linear layers in
place: ``q_proj`` becomes a wrapper holding ``q_proj.base_layer`` (the frozen W) and ``q_proj.lora_A``/
``lora_B``. A sampler that shares the learner's module runs them unmerged (the learner's own computation, so
its logprobs are the learner's exactly); one that holds its own copy (another dtype, a vLLM engine) needs
plain weights: ``W' = W + (alpha/r)·B·A`` under the plain name ``q_proj.weight``, and no adapter tensors.
"""

from __future__ import annotations

import copy
import sys

import torch

ADAPTER_KEY = ".lora_"  # peft's adapter tensors: lora_A, lora_B, lora_embedding_A/B, lora_magnitude_vector
BASE_LAYER = ".base_layer."  # peft's name for the wrapped (frozen) layer


def lora_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """``{module name: peft LoRA layer}`` of ``model``; empty without adapters. peft is looked for only if
    something imported it already: a module built without it can hold none of its layers (and a plain run
    does not pay peft's import)."""
    if "peft" not in sys.modules:
        return {}
    from peft.tuners.lora import LoraLayer

    return {name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)}


def plain_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s weights by their plain names (read-only): the live tensors of a model without adapters; with
    LoRA layers, each adapted weight is ``W + scaling·B·A`` (summed over the layer's active adapters, computed
    in float32 and cast back to W's dtype), and the adapter tensors are left out. Adapters switched off
    (``disable_adapter``) or already merged into W add nothing."""
    weights = {name: tensor.detach() for name, tensor in model.state_dict().items()}
    layers = lora_layers(model)
    if not layers:
        return weights
    plain = {name.replace(BASE_LAYER, "."): tensor for name, tensor in weights.items() if ADAPTER_KEY not in name}
    for name, layer in layers.items():
        if layer.disable_adapters or layer.merged:
            continue
        key = f"{name}.weight"
        base = plain[key]
        delta = sum(
            layer.get_delta_weight(adapter).float() for adapter in layer.active_adapters if adapter in layer.lora_A
        )
        plain[key] = (base.float() + delta).to(base.dtype)
    return plain


def has_adapters(model: torch.nn.Module) -> bool:
    return bool(lora_layers(model))


def plain_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy holding ``model``'s current weights and nothing else: a deepcopy of a DeepSpeed
    ZeRO-3 module would carry its partitioning hooks along, so HF models are rebuilt from config;
    LoRA adapters are merged into the copy's plain weights (``rollout/weights.py``)."""
    config = getattr(model, "config", None)
    if config is None:
        return copy.deepcopy(model)
    fresh = type(model)(config)
    fresh.load_state_dict(plain_state_dict(model))
    return fresh.to(model.device)
