"""tiktoken rank files: ids equal tiktoken's own, loading errors name the line."""
from __future__ import annotations

import base64
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forma_gui.errors import FormatError
from forma_gui.formats.loader import load_tokenizer
from forma_gui.formats.tiktoken_file import SPECIAL_TOKENS, load_tiktoken, parse_ranks
from tests.conftest import MAX_EXAMPLES, data_file
from tests.corpus import CORPUS, SURROGATE_CORPUS, TEXT

ENCODINGS = ["r50k_base", "p50k_base", "cl100k_base", "o200k_base"]


def _oracle(name: str):
    """tiktoken's own Encoding (pattern and special tokens from tiktoken_ext), from the local file."""
    import tiktoken
    import tiktoken.load
    from tiktoken_ext import openai_public

    path = str(data_file("tiktoken", f"{name}.tiktoken"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(openai_public, "load_tiktoken_bpe",
                   lambda url, expected_hash=None: tiktoken.load.load_tiktoken_bpe(path))
        spec = getattr(openai_public, name)()
    return tiktoken.Encoding(**spec)


@pytest.fixture(scope="module", params=ENCODINGS)
def pair(request):
    name = request.param
    return load_tokenizer(data_file("tiktoken", f"{name}.tiktoken")), _oracle(name)


def test_corpus_ids_equal_tiktoken(pair):
    ours, ref = pair
    for text in CORPUS:
        assert ours.encode(text) == ref.encode_ordinary(text), text


def test_surrogates_replaced_like_tiktoken(pair):
    ours, ref = pair
    for text in SURROGATE_CORPUS:
        assert ours.encode(text) == ref.encode_ordinary(text), ascii(text)


def test_special_tokens_equal_tiktoken(pair):
    ours, ref = pair
    for text in CORPUS:
        assert ours.encode(text, special=True) == ref.encode(text, allowed_special="all"), text


def test_cold_and_warm_cache_agree(pair):
    ours, ref = pair
    text = "\n".join(CORPUS)
    ours.clear_cache()
    cold = ours.encode(text)
    assert cold == ours.encode(text) == ref.encode_ordinary(text)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(text=TEXT)
def test_random_text_equals_tiktoken(pair, text):
    ours, ref = pair
    assert ours.encode(text) == ref.encode_ordinary(text)
    assert ours.decode_bytes(ours.encode(text)) == text.encode("utf-8", "surrogatepass")


def test_vocab_size_and_specials(pair):
    ours, ref = pair
    assert ours.vocab_size == ref.n_vocab
    assert {t.content: t.id for t in ours.added_tokens} == SPECIAL_TOKENS[ours.name]
    assert ours.decode(ref.encode("Hello world")) == "Hello world"
    assert ours.token_bytes(ref.encode(" world")[0]) == b" world"
    assert ours.piece(ref.encode(" world")[0]) == "Ġworld"


def test_pattern_from_file_name_or_argument(tmp_path):
    src = data_file("tiktoken", "r50k_base.tiktoken").read_bytes()
    anonymous = tmp_path / "ranks.tiktoken"
    anonymous.write_bytes(src)
    with pytest.raises(FormatError, match="pass pattern="):
        load_tiktoken(anonymous)
    tok = load_tokenizer(anonymous, pattern="gpt2")
    assert tok.encode("Hello world") == [15496, 995]
    assert not tok.added_tokens  # unknown encoding: no special tokens invented


def _write(tmp_path, text: bytes):
    path = tmp_path / "r50k_base.tiktoken"
    path.write_bytes(text)
    return path


@pytest.mark.parametrize("body, line", [
    (b"IQ== 0\nIg== x\n", 2),
    (b"IQ== 0\nIg==\n", 2),
    (b"IQ== 0\nIg== 1 2\n", 2),
    (b"IQ== 0\n\nI*== 1\n", 3),
    (b"IQ== 0\nIQ== 1\n", 2),  # the same token twice
    (b"IQ== 0\nIg== 0\n", 2),  # the same rank twice
    (b"IQ== 0\nIg= 1\n", 2),   # bad padding
])
def test_bad_lines_are_named(tmp_path, body, line):
    with pytest.raises(FormatError) as info:
        load_tiktoken(_write(tmp_path, body))
    assert info.value.line == line and info.value.path.endswith("r50k_base.tiktoken")


def test_lenient_layouts_parse(tmp_path):
    ranks = {bytes([b]): b for b in range(256)}
    body = b"".join(base64.b64encode(t) + b"\t" + str(r).encode() + b"\r\n" for t, r in ranks.items())
    assert parse_ranks(b"\n" + body + b"\n") == ranks


def test_empty_file_is_an_error(tmp_path):
    with pytest.raises(FormatError, match="no ranks"):
        load_tiktoken(_write(tmp_path, b"\n"))


#: base64-looking tokens, well and badly padded (strict base64 decides which are valid); "/"
#: spells 0xFF bytes, the fast path's first separator choice, so tokens holding it get mended
B64_TOKEN = st.text("AQgw+/=", min_size=1, max_size=10).map(str.encode)
#: rank spellings: in order, shuffled, with gaps, repeated, with leading zeros
RANKS = st.sampled_from(["order", "shuffle", "gaps", "repeat", "zeros"])


def _rank_texts(n: int, how: str, rnd) -> list[bytes]:
    ranks = list(range(n))
    if how == "shuffle":
        rnd.shuffle(ranks)
    elif how == "gaps":
        ranks = [3 * r + 7 for r in ranks]
    elif how == "repeat" and n > 1:
        ranks[-1] = ranks[0]
    return [(b"00" if how == "zeros" else b"") + str(r).encode() for r in ranks]


@settings(max_examples=MAX_EXAMPLES)
@given(st.lists(B64_TOKEN, min_size=1, max_size=12), RANKS, st.booleans(), st.randoms())
def test_fast_parse_accepts_what_the_line_path_accepts(tokens, how, final_newline, rnd):
    """The canonical path decodes every token in numpy after checking its padding; it must
    accept exactly the files strict base64, line by line, accepts, with the same ranks."""
    from forma_gui.formats.tiktoken_file import _parse_canonical, _parse_lines

    ranks = _rank_texts(len(tokens), how, rnd)
    data = b"".join(t + b" " + r + b"\n" for t, r in zip(tokens, ranks))
    data = data if final_newline else data[:-1]
    try:
        expected = _parse_lines(data, "x.tiktoken")
    except FormatError:
        expected = None
    got = _parse_canonical(data)
    assert got is None or list(got.items()) == list(expected.items())  # None: the line path decides
    if expected is not None and all(len(t) % 4 == 0 and b"=" not in t.rstrip(b"=")
                                    and len(t) - len(t.rstrip(b"=")) <= 2 and t[:1] != b"="
                                    for t in tokens) and len(set(expected)) == len(tokens):
        assert got is not None  # well-formed files take the fast path


def test_fast_parse_mends_tokens_holding_the_separator():
    """The fast path cuts at a separator byte (0xFF first); tokens holding it are mended. Both
    the usual case (a few tokens hold 0xFF, some several times) and a file where most tokens
    hold it (then the rarest candidate is used) must decode as base64 does."""
    from forma_gui.formats.tiktoken_file import _parse_canonical

    rnd = random.Random(5)
    some = [bytes(rnd.choices(range(255), k=rnd.randint(1, 9))) for _ in range(3000)]
    some[10:30] = [b"\xff", b"\xff\xff", b"a\xffb\xff"] + [bytes([i, 255, i]) for i in range(17)]
    most = [bytes(rnd.choices(b"\xff\xfe\xc0\xc1Aa", k=rnd.randint(1, 9))) for _ in range(3000)]
    for tokens in (some, most):
        tokens = list(dict.fromkeys(tokens))
        data = b"".join(base64.b64encode(t) + b" %d\n" % r for r, t in enumerate(tokens))
        assert list(_parse_canonical(data).items()) == list(zip(tokens, range(len(tokens))))


@pytest.mark.parametrize("token", [b"QQ==QUJD", b"QQ==QQ==", b"QUI=QUJD", b"Q===", b"====", b"=QQ=",
                                   b"QQ=Q", b"Q=QQ", b"QQ=", b"QUJDQ"])
def test_fast_parse_rejects_what_strict_base64_rejects(token):
    """Padding anywhere but the end of the token, or a length that is not whole quads."""
    from forma_gui.formats.tiktoken_file import _parse_canonical, _parse_lines

    data = b"IQ== 0\n" + token + b" 1\nIg== 2\n"
    with pytest.raises(FormatError):
        _parse_lines(data, "x.tiktoken")
    assert _parse_canonical(data) is None


def test_fast_parse_when_the_last_rank_is_the_shortest():
    """Ranks are read as rows as wide as the longest one; the last row must not run off the end."""
    from forma_gui.formats.tiktoken_file import _parse_canonical, _parse_lines

    for data in (b"IQ== 0\nIg== 123456\nIw== 2\n", b"IQ== 0\nIg== 123456\nIw== 2"):
        assert _parse_canonical(data) == _parse_lines(data, "x.tiktoken") == {b"!": 0, b'"': 123456, b"#": 2}


def test_detection_skips_blank_lines_as_the_parser_does(tmp_path):
    """tiktoken's loader skips blank lines; `load_tokenizer` must recognise such a file."""
    src = data_file("tiktoken", "r50k_base.tiktoken").read_bytes()
    path = _write(tmp_path, b"\n\n" + src.replace(b"\n", b"\n\n", 3))
    assert load_tokenizer(path).encode("Hello world") == [15496, 995]
    with pytest.raises(FormatError, match="no ranks"):
        load_tokenizer(_write(tmp_path, b"\n\n"))
