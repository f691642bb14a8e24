"""TokenStore gives back exactly the tokens it was packed from."""
from __future__ import annotations

import dataclasses

from hypothesis import given, settings, strategies as st

from forma_gui.app import token_store
from forma_gui.app.token_store import TokenStore
from forma_gui.core.slices import release
from tests.app._stub_tokenizer import StubTokenizer
from tests.conftest import MAX_EXAMPLES

TOKENIZER = StubTokenizer()


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.lists(st.sampled_from(list("ab €東😀\n") + ["<|end|>", "Hello", " world"]), max_size=20)
       .map("".join), st.booleans())
def test_round_trip(text, special):
    tokens = TOKENIZER.segment(text, special=special)
    store = TokenStore.from_tokens(tokens, TOKENIZER)
    assert list(store) == tokens
    assert len(store) == len(tokens)
    assert store.nbytes == len(text.encode())
    assert store[-1:] == tokens[-1:]


def test_odd_tokens_keep_their_own_fields(monkeypatch):
    monkeypatch.setattr(token_store, "SLICE", 3)  # several slices, offsets must add up
    tokens = TOKENIZER.segment("Hello world, Hello")
    tokens[4] = dataclasses.replace(tokens[4], piece="changed")
    store = TokenStore.from_tokens(tokens, TOKENIZER)
    assert list(store) == tokens
    assert set(store._odd) == {4}


def test_count_and_find():
    tokens = TOKENIZER.segment("Hello world! Hello world!")
    store = TokenStore.from_tokens(tokens, TOKENIZER)
    world = TOKENIZER.encode(" world")[0]
    assert store.count_id(world) == 2
    first = store.find_id(world)
    assert tokens[first].id == world
    assert store.find_id(world, first + 1) > first
    assert store.find_id(10**6) is None


def test_release_empties_the_list():
    items = list(range(200_000))
    release(items)
    assert items == []
