"""Completion dumps written as TRL 1.16 and verl 0.9.1 write them (for tests/importers/test_completions_import.py).

* TRL: ``GRPOTrainer.log`` with ``log_completions=True`` builds ``table = {"step": [global_step] * n, "prompt": ...,
  "completion": ..., **rewards (one column per reward function), **extra, "advantage": ...}`` and writes
  ``pd.DataFrame(table).to_parquet(f"{output_dir}/completions/completions_{global_step:05d}.parquet")``.
* verl: ``RayPPOTrainer._write_generations`` writes ``{dump_path}/{global_steps}.jsonl``, one
  ``json.dumps(entry, ensure_ascii=False, default=str)`` line per sample, ``entry`` = ``input``, ``output``, ``gts``,
  ``score``, ``step`` and every reward extra info of the batch's length. :func:`verl_write_generations` is that
  function's body; ``test_verl_writer_is_verls_own`` runs verl's own copy (when installed) and compares the bytes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def trl_write_completions(
    output_dir: Path,
    global_step: int,
    prompts: list,
    completions: list,
    rewards: dict[str, list],
    advantages: list[float],
    extra: dict[str, list] | None = None,
) -> Path:
    import pandas as pd

    os.makedirs(os.path.join(output_dir, "completions"), exist_ok=True)
    table = {
        "step": [global_step] * len(prompts),
        "prompt": prompts,
        "completion": completions,
        **rewards,
        **(extra or {}),
        "advantage": advantages,
    }
    path = os.path.join(output_dir, "completions", f"completions_{global_step:05d}.parquet")
    pd.DataFrame(table).to_parquet(path)
    return Path(path)


def verl_write_generations(inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path, global_steps):
    os.makedirs(dump_path, exist_ok=True)
    filename = os.path.join(dump_path, f"{global_steps}.jsonl")
    n = len(inputs)
    base_data = {"input": inputs, "output": outputs, "gts": gts, "score": scores, "step": [global_steps] * n}
    for k, v in reward_extra_infos_dict.items():
        if len(v) == n:
            base_data[k] = v
    with open(filename, "w") as f:
        for i in range(n):
            entry = {k: v[i] for k, v in base_data.items()}
            f.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")
    return Path(filename)
