"""Megatron-LM's pipeline layout grammar: the slot symbols (``E`` embedding, ``t`` transformer
layer, ``m`` multi-token-prediction module, ``L`` LM head and loss), ``parse_layout`` (a
``--pipeline-model-parallel-layout`` string to its virtual stages) and ``layout_text`` (back).
docs/layout.md gives the grammar. Pure functions; no schedule, no model.
"""
from __future__ import annotations

from strategies.errors import SpecError

EMBEDDING, LAYER, MTP, LOSS = "E", "t", "m", "L"
SYMBOLS = {EMBEDDING: "embedding", LAYER: "transformer layer", MTP: "multi-token prediction",
           LOSS: "LM head and loss"}
MAX_LAYOUT_CHARS = 4096          # a layout string longer than this is refused
MAX_EXPANDED = 1 << 16           # slots after expanding repetitions


def parse_layout(text: str, field: str = "layout") -> tuple[tuple[str, ...], ...]:
    """The virtual stages a Megatron layout string names, in path order: ``|`` separates
    stages, ``E t m L`` are slots, ``X*N`` repeats one symbol (``|`` included),
    ``(...)*N`` repeats a group (groups may nest), commas and spaces are cosmetic.
    ``SpecError(field, text, rule)`` where it does not parse.

    >>> parse_layout("Et*3|(tt|)*2,m|L")
    (('E', 't', 't', 't'), ('t', 't'), ('t', 't'), ('m',), ('L',))
    """
    if not isinstance(text, str) or not text.strip():
        raise SpecError(field, text, "must be a Megatron pipeline layout string, e.g. "
                        "'Et|(tt|)*3,tL' (docs/layout.md)")
    if len(text) > MAX_LAYOUT_CHARS:
        raise SpecError(field, text[:40] + "...", f"must be at most {MAX_LAYOUT_CHARS} "
                        "characters")
    src = text.replace(",", "").replace(" ", "")
    flat, pos = _sequence(src, 0, text, field, depth=0)
    if pos != len(src):
        raise SpecError(field, text, f"unmatched ')' at character {pos + 1}")
    return tuple(tuple(stage) for stage in "".join(flat).split("|"))


def _sequence(src: str, pos: int, text: str, field: str, depth: int) -> tuple[list[str], int]:
    """Items from ``pos`` up to a closing ``)`` or the end: ``(expanded symbols, position)``."""
    out: list[str] = []
    while pos < len(src) and src[pos] != ")":
        c = src[pos]
        if c == "(":
            inner, pos = _sequence(src, pos + 1, text, field, depth + 1)
            if pos >= len(src):
                raise SpecError(field, text, "has a '(' without its ')'")
            pos += 1
            if pos >= len(src) or src[pos] != "*":
                raise SpecError(field, text, f"a group '(...)' must be followed by *N "
                                f"(character {pos + 1})")
            unit = inner
        elif c in SYMBOLS or c == "|":
            unit, pos = [c], pos + 1
        else:
            raise SpecError(field, text, f"unknown symbol {c!r} at character {pos + 1}; "
                            "allowed: E (embedding), t (transformer layer), m (MTP), L (loss), "
                            "| (stage separator), *N (repeat), ( ) (group)")
        times = 1
        if pos < len(src) and src[pos] == "*":
            end = pos + 1
            while end < len(src) and src[end].isdigit():
                end += 1
            if end == pos + 1:
                raise SpecError(field, text, f"'*' must be followed by a count (character "
                                f"{pos + 2})")
            times, pos = int(src[pos + 1:end]), end
            if times < 1:
                raise SpecError(field, text, "a repeat count *N must be >= 1")
        if len(out) + len(unit) * times > MAX_EXPANDED:
            raise SpecError(field, text, f"expands to more than {MAX_EXPANDED} symbols")
        out += unit * times
    if depth == 0 and pos < len(src):
        return out, pos
    return out, pos


def layout_text(stages: tuple[tuple[str, ...], ...]) -> str:
    """The compact Megatron string of ``stages`` (path order): each stage's runs as ``X*N``,
    runs of equal stages as ``(S|)*N``; ``parse_layout`` gives ``stages`` back.

    >>> layout_text((("E", "t"), ("t", "t"), ("t", "t"), ("t", "L")))
    'Et|(t*2|)*2,tL'
    """
    def one(stage: tuple[str, ...]) -> str:
        out, i = [], 0
        while i < len(stage):
            j = i
            while j < len(stage) and stage[j] == stage[i]:
                j += 1
            out.append(stage[i] + (f"*{j - i}" if j - i > 1 else ""))
            i = j
        return "".join(out)

    parts, i, n = [], 0, len(stages)
    while i < n:
        j = i
        while j < n and stages[j] == stages[i]:
            j += 1
        run, last = j - i, j == n
        s = one(stages[i])
        if run > 1 and not last:
            parts.append(f"({s}|)*{run},")
        elif run > 1:                                # the final run: no trailing separator
            parts.append(f"({s}|)*{run - 1},{s}")
        else:
            parts.append(s + ("" if last else "|"))
        i = j
    return "".join(parts)
