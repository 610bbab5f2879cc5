"""How the embeddings-server settings choose and key the embedder, before any request is sent
(tests/integration/test_embeddings_api.py talks to a server)."""

import pytest
from pydantic import ValidationError

from memoryos import MemoryConfig
from memoryos.embedding import create_embedder
from memoryos.embedding.openai_api import OpenAIAPIEmbedder
from memoryos.embedding.sentence_transformers_backend import SentenceTransformerEmbedder
from memoryos.embedding.shared import shared_embedder
from memoryos.errors import InvalidInputError

URL = "http://127.0.0.1:9/v1"
"""Never reached: nothing here sends a request (port 9 is discard)."""


def test_the_server_url_chooses_the_backend_and_names_the_model_as_served() -> None:
    assert isinstance(
        create_embedder(MemoryConfig(embedding_model_name="bge-m3")), SentenceTransformerEmbedder
    )
    remote = create_embedder(MemoryConfig(embedding_api_base_url=URL, embedding_model_name="bge-m3"))
    assert isinstance(remote, OpenAIAPIEmbedder) and remote.name == "openai-api:bge-m3"


def test_an_empty_url_is_none_and_anything_but_http_is_refused_by_name() -> None:
    assert MemoryConfig(embedding_api_base_url="").embedding_api_base_url is None
    with pytest.raises(ValidationError, match="embedding_api_base_url: must be an http"):
        MemoryConfig(embedding_api_base_url="tei:80")


def test_sentence_transformer_arguments_are_refused_for_a_server() -> None:
    settings = MemoryConfig(embedding_api_base_url=URL, embedding_model_kwargs={"truncate_dim": 256})
    with pytest.raises(InvalidInputError, match=r"^embedding_model_kwargs: "):
        create_embedder(settings)


def test_the_key_keys_the_shared_embedder_by_its_value() -> None:
    def shared(key: str | None) -> object:
        return shared_embedder(MemoryConfig(embedding_api_base_url=URL, embedding_api_key=key))

    assert shared("key-one") is shared("key-one")
    assert shared("key-one") is not shared("key-two")
    assert shared(None) is not shared("key-one")


@pytest.mark.parametrize(
    "setting",
    ["embedding_api_deadline_s", "embedding_api_max_concurrency", "embedding_api_max_input_tokens"],
)
def test_the_bounds_must_be_positive_and_are_refused_by_name(setting: str) -> None:
    with pytest.raises(ValidationError, match=setting):
        MemoryConfig(embedding_api_base_url=URL, **{setting: 0})


def test_the_bounds_default_to_a_deadline_four_requests_and_the_servers_truncation() -> None:
    settings = MemoryConfig(embedding_api_base_url=URL)
    assert settings.embedding_api_deadline_s == 60.0
    assert settings.embedding_api_max_concurrency == 4
    assert settings.embedding_api_max_input_tokens is None
