"""The chat models the chat tests use: built by the package's own recipe (workbench/models/local_chat.py,
also `workbench chat-model PATH`), so the tests walk the path a newcomer walks."""

from workbench.models.local_chat import (  # noqa: F401 - re-exported for the chat tests
    LLAMA3_CHAT_TEMPLATE,
    LLAMA3_SPECIAL,
    QWEN_CHAT_TEMPLATE,
    QWEN_SPECIAL,
    character_chat_tokenizer,
    chat_tokenizer,
    llama3_chat_tokenizer,
    qwen2_chat_tokenizer,
    save,
    save_llama3_chat_model,
    save_qwen2_chat_model,
)
