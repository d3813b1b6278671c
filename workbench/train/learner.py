"""The torch learner: teacher-forced logprobs and entropy, and optimizer steps."""

from __future__ import annotations

import torch

from workbench.algorithms import entropy_from_logits
from workbench.batch import Rollouts
from workbench.config import LearnerConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def sequence_logprobs(model, rollouts: Rollouts, rows: torch.Tensor | slice, temperature: float,
                      with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Teacher-forced logp [b, T] of the sampled tokens and entropy [b, T] of the sampling distribution."""
    input_ids = rollouts.input_ids[rows]  # [b, P+T]
    attention = rollouts.attention_mask[rows]  # [b, P+T]
    # Left padding: positions count real tokens only, exactly as generate() numbered them.
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    p = rollouts.prompt_ids.shape[1]
    logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions).logits
    logits = logits[:, p - 1 : -1].float() / temperature  # [b, T, V] predicts each response token
    logp = torch.log_softmax(logits, dim=-1).gather(-1, rollouts.completion_ids[rows].unsqueeze(-1)).squeeze(-1)
    entropy = entropy_from_logits(logits.detach()) if with_entropy else None
    return logp, entropy


class ReferencePolicy:
    """A frozen copy of the initial policy, for KL regularisation (only built when kl_coef > 0)."""

    def __init__(self, model) -> None:
        import copy

        self.model = copy.deepcopy(model).eval().requires_grad_(False)

    @torch.no_grad()
    def logprobs(self, rollouts: Rollouts, temperature: float) -> torch.Tensor:
        return sequence_logprobs(self.model, rollouts, slice(None), temperature, with_entropy=False)[0]


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


class TorchLearner:
    """Owns the policy weights and the optimizer (single process, CPU or one GPU)."""

    def __init__(self, model, cfg: LearnerConfig) -> None:
        self.cfg = cfg
        self.device = torch.device(resolve_device(cfg.device))
        self.poison_next_update = False
        self.model = model.to(device=self.device, dtype=DTYPES[cfg.dtype]).train()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
        )

    def logprobs(self, rollouts: Rollouts, rows: torch.Tensor | slice, temperature: float,
                 with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        return sequence_logprobs(self.model, rollouts, rows, temperature, with_entropy)

    def optimizer_step(self, loss: torch.Tensor) -> float:
        """Backward, clip the global grad norm, step. Returns the pre-clip grad norm."""
        if self.poison_next_update:  # fault injection (learner.inject_nonfinite_at_step)
            loss = loss * float("nan")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        if torch.isfinite(grad_norm):  # a non-finite step is reported (health: non_finite), never applied
            self.optimizer.step()
        return float(grad_norm)
