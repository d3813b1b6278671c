"""Locally built chat models, once per session (a few seconds each)."""

from __future__ import annotations

import pytest

from tests.chat.models import save_llama3_chat_model, save_qwen2_chat_model


@pytest.fixture(scope="session")
def qwen2_chat_dir(tmp_path_factory):
    return save_qwen2_chat_model(tmp_path_factory.mktemp("models") / "qwen2-chat")


@pytest.fixture(scope="session")
def llama3_chat_dir(tmp_path_factory):
    return save_llama3_chat_model(tmp_path_factory.mktemp("models") / "llama3-chat")
