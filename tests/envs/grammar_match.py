"""Checks a turn grammar the way a constrained sampler would: the reply's tokens (SmolLM2's
tokenizer) replayed through llguidance's matcher, which must accept the whole reply."""

from __future__ import annotations

from functools import lru_cache

from llguidance import LLMatcher


@lru_cache(maxsize=1)
def _tokenizers():
    from llguidance.hf import from_tokenizer

    from practicum.engine.models import load_builtin_tokenizer

    hf = load_builtin_tokenizer()
    return hf, from_tokenizer(hf)


def compile_error(grammar: str) -> str:
    """'' when llguidance compiles `grammar` for the tokenizer, else its error."""
    return LLMatcher.validate_grammar(grammar, _tokenizers()[1])


def matches(grammar: str, text: str) -> bool:
    """Whether `text`, tokenized as the model would write it, is a complete match."""
    hf, tok = _tokenizers()
    m = LLMatcher(tok, grammar, log_level=0)
    ids = hf.encode(text, add_special_tokens=False)
    return m.consume_tokens(ids) and not m.is_error() and m.is_accepting()
