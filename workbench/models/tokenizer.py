"""A character-level tokenizer built locally with the `tokenizers` library (no hub access), and a run's token
ids back to text (:func:`token_decoder`)."""

from __future__ import annotations

import string
from collections.abc import Callable
from pathlib import Path

from tokenizers import Tokenizer, decoders
from tokenizers.models import BPE
from transformers import PreTrainedTokenizerFast

from workbench.models.directory import load_tokenizer, refuse_remote_code

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


def token_decoder(builtin: str | None, path: str | None) -> Callable[[int], str] | None:
    """A run's token id -> text, where the run's tokenizer is at hand on this machine: the built-in tiny
    model's character tokenizer (built locally, never downloaded), or the tokenizer of a ``model.path``
    directory that exists here. None otherwise (a model directory on another machine, an imported run): the
    caller shows the id. Ids the tokenizer does not know decode to ``""``."""
    if builtin == "tiny":
        tokenizer = build_char_tokenizer()
    elif path and Path(path).expanduser().is_dir():
        try:
            refuse_remote_code(Path(path).expanduser())
            tokenizer = load_tokenizer(Path(path).expanduser())
        except (OSError, ValueError):  # no tokenizer.json there, not one that loads as itself, or remote code
            return None
    else:
        return None

    def decode(token_id: int) -> str:
        try:
            return tokenizer.decode([token_id])
        except (IndexError, OverflowError, TypeError, ValueError):  # an id outside the vocabulary
            return ""

    return decode
