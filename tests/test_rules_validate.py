"""Malformed rule files: every problem is a positioned ``file:line: key: reason``, never a traceback.

Also: a user file that names a default buffer kind extends it (``replace: true`` replaces it), and the
rule engine's globs behave as ``fnmatch.fnmatchcase`` without depending on ``fnmatch.translate``'s
output (Python 3.14 ends it with ``\\z``, not ``\\Z``).
"""

from __future__ import annotations

import fnmatch
import re
import textwrap

import pytest
from hypothesis import example, given, settings, strategies as st

from castfind.rules import RuleError, glob_regex, glob_match, load_rules, validate

# --- globs: castfind's own translator, identical to fnmatch.fnmatchcase on every Python ---------------

ALPHABET = "ab-z!^]\\[*?.\n|&~"
patterns = st.text(alphabet=ALPHABET, max_size=10)
names = st.text(alphabet="abz-!^]\\[.\n|&~é", max_size=10)

TRICKY = ["*", "?", "[a-z]*", "[!a-z]", "[]]", "[!]]", "[]-a]", "[a-]", "[-a]", "[z-a]", "[!z-a]", "[c-a-e]",
          "[a-b--c]", "[--a]", "[\\]", "[\\-^]", "[^a]", "[[]", "[", "[!", "[!]", "a[", "]", "\\*", "*\\",
          "[a&&b]", "[a||b]", "[a~~b]", "[.]", "**a**", "*weight", "weight_*", "*_weight_*", "*.forward",
          "[!.]*", "[*?]", "[a-a]", "[é-ë]"]
NAMES = ["", "a", "b", "z", "-", "]", "^", "!", "\\", "[", ".", "*", "?", "&", "|", "~", "\n", "ab", "aa",
         "w13_weight", "weight_scale", "x.forward", "x\n.forward", "é", "ê", "ab]", "[a", "a\n"]


def test_glob_matches_fnmatchcase_on_tricky_patterns():
    for p in TRICKY:
        for n in NAMES:
            assert glob_match(p, n) == fnmatch.fnmatchcase(n, p), (p, n)


@settings(max_examples=1500, deadline=None)
@given(patterns, names)
@example("[!]]*", "]a")
@example("[a-]", "-")
def test_glob_matches_fnmatchcase_property(pattern, name):
    assert glob_match(pattern, name) == fnmatch.fnmatchcase(name, pattern)


@settings(max_examples=500, deadline=None)
@given(patterns)
def test_glob_regex_compiles_without_warnings(pattern):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # FutureWarning: possible set operation / nested set
        re.compile(glob_regex(pattern))
        re.compile(glob_regex(pattern, star=r"\w*", one=r"\w").encode())


def _translate_as_on_314(monkeypatch) -> None:
    """``fnmatch.translate`` as Python 3.14 writes it: ``(?s:...)\\z`` (a bad escape before 3.14)."""
    original = fnmatch.translate
    monkeypatch.setattr(fnmatch, "translate", lambda pat: original(pat)[: -len("\\Z")] + "\\z")
    _clear_fnmatch_cache()


def _clear_fnmatch_cache() -> None:
    clear = getattr(getattr(fnmatch, "_compile_pattern", None), "cache_clear", None)
    if clear:
        clear()


def test_buffer_attribute_patterns_do_not_depend_on_fnmatch_translate(monkeypatch):
    rs = load_rules(include_default=True)  # before the patch: importing may use fnmatch (pytest's hooks)
    _translate_as_on_314(monkeypatch)
    try:
        words = rs.buffer_words()
        assert words is not None
        for text, hit in [(b"x = self.kv_buffer.to(d)", True), (b"self.w13_weight.float()", True),
                          (b"self.lm_head.weight.to(x)", True), (b"self.\\\n    k_cache.half()", True),
                          (b"self.weight_q.to(x)", True), (b"kv_buffer = 1", False), (b"self.kv_buffers_x", False),
                          (b"get_key_buffer(i)", True), (b"self.proj.bias.to(x)", False)]:
            assert bool(words.search(text)) is hit, text
        kind = rs.buffers["weight"]
        assert kind.attribute_matches("w13_weight") and not kind.attribute_matches("w13_weightx")
        assert kind.excluded("self.input_layernorm.weight", "Layer.forward")
        assert rs.is_entry("Backend.forward_decode") and not rs.is_entry("Backend.forward_decode_x")
        assert rs.is_scalar_index("layer.layer_id") and rs.is_dtype_arg("torch.float8_e4m3fn")
    finally:
        monkeypatch.undo()
        _clear_fnmatch_cache()
