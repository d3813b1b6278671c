"""Your own TRL GRPOTrainer script, with the workbench's health rules, canonical metrics and study layout.

    MLFLOW_TRACKING_URI=sqlite:///$PWD/mlflow.db python docs/trl_callback_example.py MODEL_DIR \\
        --study my-trl-study --variant dapo --seed 0 --steps 20
    workbench health my-trl-study && workbench compare my-trl-study
    workbench rollouts my-trl-study --worst 10        # the stored completions with the lowest reward

MODEL_DIR is any local causal LM directory (a tokenizer with a pad or EOS token); the prompts are two-digit sums,
the reward is 1 for the right sum plus 0.25 for an answer that starts with a digit (two reward functions: TRL sums
them; the stored completions keep each as ``reward.<name>``). Only the ``callbacks=[WorkbenchCallback(...)]`` line
is the workbench's; the rest is plain TRL (docs/trl-engine.md). CPU settings: bf16 and gradient checkpointing off,
``use_cpu``. ``log_completions=True`` makes TRL write each step's completions, which the callback stores as the
run's ``rollouts/`` (``workbench rollouts``); without it the run has none, and its tag ``workbench.rollouts`` says
so.
"""

from __future__ import annotations

import argparse
import random
import re

from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from workbench.execution.trl_callback import WorkbenchCallback


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--study", required=True)
    ap.add_argument("--variant", default="dapo", help="also TRL's loss_type here")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--out", default="trl-out")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    pairs = [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(256)]
    data = Dataset.from_dict({"prompt": [f"{a}+{b}=" for a, b in pairs], "answer": [str(a + b) for a, b in pairs]})

    def correct(completions, answer, **_):
        return [
            1.0 if (m := re.search(r"-?\d+", text)) and m.group(0) == gold else 0.0
            for text, gold in zip(completions, answer, strict=True)
        ]

    def starts_with_a_digit(completions, **_):  # a format reward
        return [0.25 if re.match(r"\d", text) else 0.0 for text in completions]

    config = GRPOConfig(
        output_dir=args.out,
        seed=args.seed,
        loss_type=args.variant,
        max_steps=args.steps,
        learning_rate=args.lr,
        per_device_train_batch_size=16,
        num_generations=4,
        max_completion_length=8,
        logging_steps=1,  # the health rules judge every step
        log_completions=True,  # TRL writes each step's completions; the callback stores them (workbench rollouts)
        report_to="none",
        bf16=False,
        gradient_checkpointing=False,
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(args.model),
        reward_funcs=[correct, starts_with_a_digit],
        args=config,
        train_dataset=data,
        processing_class=AutoTokenizer.from_pretrained(args.model, padding_side="left"),
        callbacks=[WorkbenchCallback(study=args.study, variant=args.variant, seed=args.seed)],
    )
    trainer.train()


if __name__ == "__main__":
    main()
