"""Small local chat models to walk the real-model path on a CPU (``workbench chat-model PATH``; no hub
access), and the ones the chat tests use. Chat models as labs use them, built locally at a few MB: a Qwen2-architecture and a
Llama-3-architecture causal LM with random weights, each saved with ``save_pretrained`` next to its own
tokenizer carrying its family's chat template and special tokens: a byte-level BPE trained here for
Llama 3, and for Qwen2 a character-level WordLevel tokenizer, deliberately not Qwen's: a fine-tuned or
custom model with a ``qwen2`` config ships its own tokenizer, which transformers' ``AutoTokenizer`` replaces
by ``Qwen2Tokenizer``, so only a non-Qwen tokenizer here shows whether the directory's own one is used
(:func:`qwen2_chat_tokenizer` rebuilds it in memory, the reference the tests compare against)."""

from __future__ import annotations

import string
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

# Qwen2.5's template without its tool-calling branches (ChatML, with Qwen's default system turn).
QWEN_CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (message['role'] == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# Llama 3's template (the instruct models'), without its tool-calling and date branches.
LLAMA3_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
CORPUS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "How many clips did Natalia sell altogether in April and May? The answer is 72. #### 72",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting.",
    "Solve the problem and give the final answer after ####. Put your answer in \\boxed{}.",
    "0 1 2 3 4 5 6 7 8 9 10 100 1,000 $5 + - * / = ( ) . , ? !",
]
VOCAB_SIZE = 600


def chat_tokenizer(special: list[str], template: str, *, bos: str | None, eos: str) -> PreTrainedTokenizerFast:
    """A byte-level BPE (every string encodes) trained on a small corpus, with ``special`` as added tokens."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(CORPUS, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=bos,
        eos_token=eos,
        additional_special_tokens=[t for t in special if t not in (bos, eos)],
    )
    tokenizer.chat_template = template
    return tokenizer


def character_chat_tokenizer(special: list[str], template: str, *, eos: str) -> PreTrainedTokenizerFast:
    """A WordLevel tokenizer with one token per printable ASCII character (others are ``<unk>``), with
    ``special`` as added tokens: nothing like Qwen's byte-level BPE."""
    unk = "<unk>"
    chars = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
    core = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate([*special, unk, *chars])}, unk_token=unk))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")  # every character its own word
    core.decoder = decoders.Fuse()
    core.add_special_tokens([*special, unk])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token=eos, unk_token=unk, additional_special_tokens=[t for t in special if t != eos]
    )
    tokenizer.chat_template = template
    return tokenizer


def qwen2_chat_tokenizer() -> PreTrainedTokenizerFast:
    """The Qwen2 chat model's own tokenizer, as saved in its directory."""
    tokenizer = character_chat_tokenizer(QWEN_SPECIAL, QWEN_CHAT_TEMPLATE, eos="<|endoftext|>")
    tokenizer.pad_token = "<|endoftext|>"
    return tokenizer


def save_qwen2_chat_model(path: Path) -> Path:
    """Qwen2 architecture (GQA, q/k/v biases, tied embeddings) with Qwen2.5-base's special tokens (EOS is
    ``<|endoftext|>``, a chat turn ends with ``<|im_end|>``) and its own character-level tokenizer."""
    tokenizer = qwen2_chat_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return save(Qwen2ForCausalLM(config), tokenizer, path)


def llama3_chat_tokenizer() -> PreTrainedTokenizerFast:
    """The Llama 3 chat model's own tokenizer, as saved in its directory (BPE training is deterministic)."""
    return chat_tokenizer(LLAMA3_SPECIAL, LLAMA3_CHAT_TEMPLATE, bos="<|begin_of_text|>", eos="<|end_of_text|>")


def save_llama3_chat_model(path: Path) -> Path:
    """Llama 3 architecture (GQA, rope theta 500000, untied head) with Llama-3-base's tokens: BOS
    ``<|begin_of_text|>``, EOS ``<|end_of_text|>``, no pad token, a chat turn ends with ``<|eot_id|>``."""
    tokenizer = llama3_chat_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        rope_theta=500000.0,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return save(LlamaForCausalLM(config), tokenizer, path)


def save(model, tokenizer, path: Path) -> Path:
    import torch

    torch.manual_seed(0)  # the random init
    model.init_weights()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


FAMILIES = {"qwen2": save_qwen2_chat_model, "llama3": save_llama3_chat_model}


def build_chat_model(path: str | Path, family: str = "qwen2") -> Path:
    """Save a small random-weight ``family`` chat model with its own tokenizer and chat template to
    ``path`` (a new or empty directory: ``FileExistsError`` otherwise, ``ValueError`` for an unknown
    family). Its weights are random: a run on it exercises the path (chat template, end-of-turn stop,
    answer format, sampler/learner agreement), not learning."""
    if family not in FAMILIES:
        raise ValueError(f"--family: expected one of {', '.join(FAMILIES)}, got {family!r}")
    target = Path(path)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(f"{target} exists and is not an empty directory: choose another path")
    return FAMILIES[family](target)
