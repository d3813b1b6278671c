"""Train real TRL ``GRPOTrainer`` runs on a local tiny model, logging to MLflow with
``report_to=["mlflow"]`` (run by tests/importers/test_trl_import.py inside ``.venv-trl``).

    python tests/importers/trl_train.py MODEL_DIR --uri sqlite:///trl.db --experiment trl-grpo \\
        --loss-type grpo --loss-type dr_grpo --seed 0 --seed 1 --steps 3 --out DIR

CPU settings TRL 1.16 needs here: bf16 and gradient checkpointing off, ``use_cpu``,
an explicit learning rate; ``per_device_train_batch_size`` counts completions. Each run also
writes its ``trainer_state.json`` under ``OUT/<loss_type>-<seed>/`` (``state.save_to_json``), and, with
``log_completions``, TRL writes each logging step's completions under ``OUT/<loss_type>-<seed>/completions/``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--uri", required=True)
    ap.add_argument("--experiment", required=True)
    ap.add_argument("--loss-type", action="append", required=True)
    ap.add_argument("--seed", action="append", type=int, required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    os.environ["MLFLOW_TRACKING_URI"] = args.uri
    os.environ["MLFLOW_EXPERIMENT_NAME"] = args.experiment
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")

    import mlflow
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    rng = random.Random(0)
    pairs = [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(64)]
    data = Dataset.from_dict({"prompt": [f"{a}+{b}=" for a, b in pairs], "answer": [str(a + b) for a, b in pairs]})

    def correct(completions, answer, **_):
        """1 when the completion's first number is the sum, else the fraction of its characters that
        are digits: rewards then differ within a group, so advantages and gradients are not zero."""
        out = []
        for text, gold in zip(completions, answer, strict=True):
            m = re.search(r"-?\d+", text)
            digits = sum(c.isdigit() for c in text) / max(len(text), 1)
            out.append(1.0 if m and m.group(0) == gold else digits)
        return out

    tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    for loss_type in args.loss_type:
        for seed in args.seed:
            out = Path(args.out) / f"{loss_type}-{seed}"
            config = GRPOConfig(
                output_dir=str(out),
                run_name=f"{loss_type}-{seed}",
                seed=seed,
                loss_type=loss_type,
                max_steps=args.steps,
                learning_rate=1e-3,
                per_device_train_batch_size=8,
                num_generations=4,
                max_completion_length=8,
                temperature=1.0,
                beta=0.0,
                logging_steps=1,
                report_to=["mlflow"],
                log_completions=True,
                num_completions_to_print=0,
                bf16=False,
                gradient_checkpointing=False,
                use_cpu=True,
                save_strategy="no",
                dataloader_num_workers=0,
                disable_tqdm=True,
            )
            model = AutoModelForCausalLM.from_pretrained(args.model)
            trainer = GRPOTrainer(
                model=model, reward_funcs=[correct], args=config, train_dataset=data, processing_class=tokenizer
            )
            trainer.train()
            out.mkdir(parents=True, exist_ok=True)
            trainer.state.save_to_json(str(out / "trainer_state.json"))
            mlflow.end_run()  # the next trainer starts its own run


if __name__ == "__main__":
    main()
