"""The DeepSpeed learner: the learner surface (``workbench.train.learner_protocol``) on a
``deepspeed.initialize`` engine.

ZeRO stage 0-3, AdamW, global-norm clipping and bf16/fp16 mixed precision come from a DeepSpeed
config generated from ``LearnerConfig`` (``deepspeed_config`` adds keys such as CPU offload).
Gradient accumulation stays workbench's: ``policy_update`` weights each micro-batch loss so the
accumulated gradient is the minibatch gradient, calls ``backward`` per micro-batch and ``step``
once; the engine runs with ``managed_gradient_accumulation=false`` (its ``step()`` is the
boundary, whatever the number of micro-batches) and without its own ``1/gas`` loss scaling.

One process without a launcher gets single-process distributed defaults (``RANK=0``, a free
``MASTER_PORT``, ...); under the ``deepspeed`` launcher its environment wins. Several processes
(``WORLD_SIZE > 1``): rank 0 drives the study and the other ranks mirror its learner calls
(``workbench.train.ranks``); ZeRO-3 is refused there (docs/engines.md, 'DeepSpeed learner').
``deepspeed`` is imported here, inside the class, so workbench imports without it.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from workbench.batch import Rollouts
from workbench.config import LearnerConfig, deep_merge
from workbench.train.learner_base import LearnerBase
from workbench.train.logprobs import sequence_logprobs
from workbench.train.lora import Adapters

MISSING = (
    "learner.backend=deepspeed needs the deepspeed package: install the `gpu` extra "
    "(pip install 'rl-workbench[gpu]') on GPUs, or `make engines` (the `cpu-engines` extra) on a CPU"
)
# Keys the learner relies on: a user's deepspeed_config may not change them.
OWNED_KEYS = (
    "optimizer",
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "managed_gradient_accumulation",
    "gradient_clipping",
    "bf16",
    "fp16",
)
CHECKPOINT_TAG = "deepspeed"  # engine.save_checkpoint(dir, tag) writes dir/<tag>/


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def single_process_defaults(device: str) -> None:
    """Environment for one process started without a launcher; variables already set (launcher) win.

    Without ``RANK``/``WORLD_SIZE`` DeepSpeed falls back to MPI discovery (mpi4py); without
    ``DS_ACCELERATOR=cpu`` on a machine with no GPU it may pick an accelerator it cannot use.
    """
    if device not in ("auto", "cpu", "cuda", "cuda:0"):
        raise ValueError(
            f"learner.device={device!r} with learner.backend=deepspeed: DeepSpeed places the model on "
            "its accelerator's device number LOCAL_RANK; choose the GPU with CUDA_VISIBLE_DEVICES instead"
        )
    defaults = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(free_port())
    if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


def deepspeed_config(cfg: LearnerConfig) -> dict[str, Any]:
    """The DeepSpeed config for ``cfg``: same AdamW, clipping and precision as the torch learner."""
    clash = sorted(set(cfg.deepspeed_config) & set(OWNED_KEYS))
    if "stage" in cfg.deepspeed_config.get("zero_optimization", {}):
        clash.append("zero_optimization.stage")
    if clash:
        raise ValueError(
            f"learner.deepspeed_config may not set {clash}: use the learner.* fields "
            "(lr, betas, weight_decay, grad_clip, dtype, micro_batch_size, zero_stage)"
        )
    generated = {
        # Workbench feeds the engine itself (no DeepSpeed dataloader): the batch sizes are nominal.
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        # step() is the accumulation boundary: the number of micro-batches per step may vary.
        "managed_gradient_accumulation": False,
        "gradient_clipping": cfg.grad_clip,
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": cfg.lr, "betas": list(cfg.betas), "eps": 1e-8, "weight_decay": cfg.weight_decay},
        },
        "zero_optimization": {"stage": cfg.zero_stage},
        "bf16": {"enabled": cfg.dtype == "bfloat16"},
        "fp16": {"enabled": cfg.dtype == "float16", "auto_cast": False},
        "steps_per_print": 2**31 - 1,  # workbench logs its own metrics
        "wall_clock_breakdown": False,
    }
    return deep_merge(generated, cfg.deepspeed_config)


def import_deepspeed():
    try:
        import deepspeed
    except ImportError as error:
        raise ImportError(MISSING) from error
    return deepspeed


class DeepSpeedLearner(LearnerBase):
    """Owns the policy through a DeepSpeed engine (ZeRO 0-3); the same surface as ``TorchLearner``."""

    def __init__(self, model, cfg: LearnerConfig) -> None:
        single_process_defaults(cfg.device)
        deepspeed = import_deepspeed()
        from deepspeed.accelerator import get_accelerator

        if cfg.dtype == "float16" and not get_accelerator().is_fp16_supported():
            raise ValueError(
                f"learner.dtype=float16: DeepSpeed's {get_accelerator().device_name()} accelerator has "
                "no fp16 training; use bfloat16 or float32 (fp16 needs a GPU)"
            )
        self.cfg = cfg
        self._deepspeed = deepspeed
        self._module_type, self._module_config = type(model), getattr(model, "config", None)
        model = model.float().train()
        # LoRA (ZeRO 0-2; the config refuses ZeRO-3): adapters injected in place before the engine wraps the
        # module, so its optimizer (and ZeRO's partitioning of optimizer states and gradients) sees them alone
        self.adapters = None if cfg.lora is None else Adapters(model, cfg.lora)
        trained = model.parameters() if self.adapters is None else self.adapters.parameters()
        self.engine, *_ = deepspeed.initialize(model=model, model_parameters=trained, config=deepspeed_config(cfg))
        self.model = self.engine.module  # under ZeRO-3 its parameters are partitioned: see gathered_model()
        self.device = self.engine.device
        # ZeRO (any stage > 0) and the bf16/fp16 optimizers report the pre-clip norm and skip a non-finite
        # step themselves; stage 0 in fp32 hands the plain optimizer a clipped gradient, so this class does.
        self._own_grad_checks = not (cfg.zero_stage > 0 or cfg.dtype != "float32")

    @property
    def zero3(self) -> bool:
        return self.cfg.zero_stage == 3

    def logprobs(
        self, rollouts: Rollouts, rows: torch.Tensor | slice, temperature: float, with_entropy: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return sequence_logprobs(self.engine, rollouts, rows, temperature, with_entropy)

    def backward(self, loss: torch.Tensor) -> None:
        """Add ``d loss / d weights`` to the accumulated gradient (one micro-batch)."""
        self.engine.backward(loss, scale_wrt_gas=False)  # the micro-batch weights are policy_update's

    def step(self) -> float:
        """Clip the accumulated global grad norm, step, clear the gradient. Returns the pre-clip norm.

        A non-finite gradient is never applied: DeepSpeed skips it (reporting an infinite norm) under
        ZeRO and mixed precision; for stage 0 in fp32 this method checks and skips it.
        """
        if self._own_grad_checks:
            norms = [torch.linalg.vector_norm(p.grad) for p in self.model.parameters() if p.grad is not None]
            norm = float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0
            if not math.isfinite(norm):
                self.engine.zero_grad()
                return norm
            self.engine.step()  # clips to grad_clip, steps, clears the gradient
            return norm
        self.engine.step()
        return float(self.engine.get_global_grad_norm())

    @contextlib.contextmanager
    def gathered_model(self) -> Iterator[torch.nn.Module]:
        """The module with its full weights inside the block (ZeRO-3 gathers them, then re-partitions)."""
        gather = (
            self._deepspeed.zero.GatheredParameters(list(self.model.parameters()), modifier_rank=None)
            if self.zero3
            else contextlib.nullcontext()
        )
        with gather:
            yield self.model

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every full weight under the module's own (HF) names, for samplers that load weights: the live
        tensors (read-only) for ZeRO 0-2, copies on CPU for ZeRO-3 (its gathered weights are freed after)."""
        if not self.zero3:
            return super().full_state_dict()
        with self.gathered_model() as model:
            return {name: tensor.detach().to("cpu", copy=True) for name, tensor in model.state_dict().items()}

    def policy_copy(self) -> torch.nn.Module:
        """A plain (DeepSpeed-free) copy of the policy with full weights (LoRA: merged), e.g. the KL reference."""
        if self._module_config is None:
            raise TypeError("DeepSpeedLearner.policy_copy needs a transformers model (with .config)")
        copy = self._module_type(self._module_config)
        copy.load_state_dict(self.full_state_dict())
        return copy.to(device=self.device, dtype=next(self.model.parameters()).dtype)

    def save_checkpoint(self, directory: Path) -> None:
        """Weights, optimizer state and the engine's counters, via ``engine.save_checkpoint``."""
        # LoRA: the frozen base is left out (rebuilt, identical, from the model cache)
        self.engine.save_checkpoint(
            str(directory), tag=CHECKPOINT_TAG, save_latest=False, exclude_frozen_parameters=self.adapters is not None
        )

    def load_checkpoint(self, directory: Path) -> None:
        path, _ = self.engine.load_checkpoint(
            str(directory), tag=CHECKPOINT_TAG, load_module_strict=self.adapters is None
        )
        if path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint under {Path(directory) / CHECKPOINT_TAG}")
