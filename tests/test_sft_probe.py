"""The cold-start probe's lean greedy decode picks the same tokens as the reference, ``generate``.

The probe decides when SFT stops, so the cached model depends on it: a faster probe must not change
a single greedy token, or every tiny model (and run key) would silently change with it."""

import random

import pytest

from workbench.config import TinyModelConfig
from workbench.models.sft import probe_completions, supervised_warmup
from workbench.models.tiny import init_tiny_model
from workbench.models.tokenizer import build_char_tokenizer
from workbench.tasks import ArithmeticTask


@pytest.mark.slow
def test_lean_probe_matches_generate_through_a_cold_start():
    tok = build_char_tokenizer()
    cfg = TinyModelConfig(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128, seed=5)
    model = init_tiny_model(cfg, len(tok), tok.pad_token_id, tok.eos_token_id)
    task = ArithmeticTask(digits=2, ops="+-", eval_size=10)
    probe = task.sample_train(64, random.Random("probe"))  # mixed prompt lengths: left padding matters
    rng = random.Random(0)
    seen_answers = 0
    for _ in range(4):  # untrained, then ever closer to the answer format: different completion shapes
        lean = probe_completions(model, tok, probe, "{prompt}", lean=True)
        reference = probe_completions(model, tok, probe, "{prompt}", lean=False)
        assert lean == reference
        assert model.training  # the probe hands the model back to SFT in train mode
        seen_answers += sum("boxed" in t for t in lean)
        supervised_warmup(
            model,
            tok,
            task,
            "{prompt}",
            max_steps=40,
            batch_size=64,
            lr=3e-3,
            target_accuracy=1.0,
            check_every=1000,
            rng=rng,
            progress=False,
        )
    assert seen_answers > 0  # the comparison covered real answers, not only empty completions
