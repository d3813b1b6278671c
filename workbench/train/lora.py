"""LoRA adapters on the learner's policy (``learner.lora``), through ``peft``.

Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", eq. (3): an adapted linear layer
computes ``h = W x + (alpha/r)·B A x`` with ``W`` frozen, ``A`` (r × d_in, Kaiming-uniform) and ``B``
(d_out × r, zeros, so the adapted policy starts as the base) trained. ``peft`` injects the adapters into the
model's own modules in place: the learner keeps training the same module object, now with only ``A`` and ``B``
requiring gradients; the base weights stay in ``learner.dtype`` (peft keeps the adapters in float32 when the
base is 16-bit, like master weights).

What a LoRA learner adds to the learner surface, in one object (``learner.adapters``):

* ``disabled()``: the base policy, by switching the adapters off around a forward: the KL reference
  (``kl_coef > 0``) costs no second copy of the weights;
* ``metrics()``: ``lora/trainable_params``, ``lora/trainable_frac`` and ``lora/update_norm`` (the catalogue);
* ``state_dict()``/``load_state_dict()``: the adapters only, for checkpoints (the base is rebuilt, identical,
  from the model cache);
* ``files()``: ``save_pretrained``'s adapter directory, which the run logs as its ``adapter/`` artifact and
  a user loads onto the base with ``peft.PeftModel.from_pretrained`` (the base model, then the adapter
  directory).
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

from workbench.config import LoraConfig
from workbench.metrics.names import LORA_TRAINABLE_FRAC, LORA_TRAINABLE_PARAMS, LORA_UPDATE_NORM
from workbench.rollout.weights import lora_layers


def peft_config(cfg: LoraConfig):
    from peft import LoraConfig as PeftLoraConfig  # deferred: peft imports in ~2 s, and only LoRA runs need it

    return PeftLoraConfig(
        r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=cfg.target_modules, bias="none"
    )


class Adapters:
    """The LoRA adapters ``peft`` injects into ``model`` (in place: ``model`` stays the module to train)."""

    def __init__(self, model: torch.nn.Module, cfg: LoraConfig, seed: int | None = None) -> None:
        """``seed``: draws A's initial values; by default the seed the run last gave ``torch.manual_seed``
        (``torch.initial_seed()``), not the global generator's current state, which depends on what ran
        before (building the tiny model on a cache miss draws from it): a resumed run and an uninterrupted
        one get the same adapters. The global generator is left as it was."""
        from peft import get_peft_model  # deferred: see peft_config

        self.cfg = cfg
        device = next(model.parameters()).device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(torch.initial_seed() if seed is None else seed)
            self.peft = get_peft_model(model, peft_config(cfg))
        if self.peft.get_base_model() is not model:  # what every peft version so far does; the learner relies on it
            raise RuntimeError("peft did not adapt the policy in place")
        self.model = model
        check_rank(self.layers(), cfg.rank)
        trainable, total = self.peft.get_nb_trainable_parameters()
        self.trainable_params, self.total_params = int(trainable), int(total)

    def layers(self) -> dict[str, torch.nn.Module]:
        return lora_layers(self.model)

    def parameters(self) -> list[torch.nn.Parameter]:
        """What the optimizer trains: the adapters' A and B, nothing else."""
        return [p for p in self.model.parameters() if p.requires_grad]

    @contextlib.contextmanager
    def disabled(self) -> Iterator[None]:
        """Inside the block the module computes the base policy (every adapter switched off)."""
        with self.peft.disable_adapter():
            yield

    def metrics(self) -> dict[str, float]:
        """``lora/trainable_params`` (A and B entries), ``lora/trainable_frac`` (of every parameter of the
        adapted model, adapters included, as peft counts) and ``lora/update_norm``: ‖ΔW‖ over every adapted
        layer, ``sqrt(Σ_layers ‖(alpha/r)·B A‖_F²)``, the adapted policy's distance from the base (0 at step 0,
        since B starts at 0). Each ‖BA‖_F² is computed as ``Σ (BᵀB) ⊙ (A Aᵀ)`` (r × r: ``tr(AᵀBᵀBA) =
        tr(BᵀB·AAᵀ)``), never forming the d_out × d_in product."""
        return {
            LORA_TRAINABLE_PARAMS: float(self.trainable_params),
            LORA_TRAINABLE_FRAC: self.trainable_params / self.total_params,
            LORA_UPDATE_NORM: update_norm(self.layers()),
        }

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The adapters' tensors (peft's names without the adapter name), copies on the CPU."""
        from peft import get_peft_model_state_dict

        return {k: v.detach().to("cpu", copy=True) for k, v in get_peft_model_state_dict(self.peft).items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(self.peft, state)
        missing = [k for k in result.missing_keys if ".lora_" in k]
        if result.unexpected_keys or missing:
            raise ValueError(
                f"adapter checkpoint does not fit this policy: missing {missing[:3]}, "
                f"unexpected {list(result.unexpected_keys)[:3]}"
            )

    def files(self) -> dict[str, bytes]:
        """``save_pretrained``'s adapter directory as ``{file name: bytes}`` (``adapter_config.json``,
        ``adapter_model.safetensors``; peft's generated README left out)."""
        with tempfile.TemporaryDirectory() as tmp:
            self.peft.save_pretrained(tmp)
            return {
                path.name: path.read_bytes()
                for path in sorted(Path(tmp).iterdir())
                if path.is_file() and path.name != "README.md"
            }


def update_norm(layers: dict[str, torch.nn.Module]) -> float:
    """``sqrt(Σ ‖scaling·B A‖_F²)`` over the layers' active adapters (see ``Adapters.metrics``), in float64."""
    total = 0.0
    with torch.no_grad():
        for layer in layers.values():
            for name in layer.active_adapters:
                if name not in layer.lora_A:
                    continue
                a = layer.lora_A[name].weight.double()  # [r, d_in]
                b = layer.lora_B[name].weight.double()  # [d_out, r]
                total += layer.scaling[name] ** 2 * float(((b.T @ b) * (a @ a.T)).sum())  # ‖BA‖_F² via r × r
    return math.sqrt(total)


def check_rank(layers: dict[str, torch.nn.Module], rank: int) -> None:
    """A rank above min(d_in, d_out) of an adapted layer adds parameters but no expressiveness (B A then has
    rank at most that dimension): a ValueError naming the layer."""
    for name, layer in layers.items():
        base = layer.get_base_layer()
        limit = min(getattr(base, "in_features", rank), getattr(base, "out_features", rank))
        if rank > limit:
            raise ValueError(
                f"learner.lora.rank={rank} is above the smallest dimension ({limit}) of the adapted "
                f"layer {name}: choose rank <= {limit} or leave that module out of target_modules"
            )
