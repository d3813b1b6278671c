"""A character-level tokenizer built locally with the `tokenizers` library (no hub access)."""

from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders
from tokenizers.models import BPE
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
CHARS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]  # printable ASCII + space + newline


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """BPE with no merges = one token per character; unknown characters map to <unk>."""
    vocab = {tok: i for i, tok in enumerate([PAD, EOS, UNK, *CHARS])}
    core = Tokenizer(BPE(vocab=vocab, merges=[], unk_token=UNK))
    core.add_special_tokens([PAD, EOS, UNK])
    core.decoder = decoders.Fuse()  # join characters without spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token=UNK, padding_side="left"
    )
