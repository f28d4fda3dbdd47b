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
from hypothesis import example, given, settings
from hypothesis import strategies as st

from castfind.core.rules import RuleError, glob_match, glob_regex, identifier_tokens, load_rules, validate

# A valid rule (kv-cache, `.to()`, hot) whose fields the cases below break one at a time.
RULE = """\
rules:
  - id: CF201
    name: my-rule
    severity: warning
    message: "{expr} casts {buffer} to {dtype}"
    cast: [to]
    receiver: {buffer: [kv-cache]}
    hot: true
    fix: "do not"
    examples: {match: "x  # match", no_match: "y"}
"""


def _rule(**fields: str) -> str:
    """RULE with some of its lines replaced (``fields``: key -> the YAML text after ``key:``)."""
    out = []
    for line in RULE.splitlines():
        key = line.strip().split(":", 1)[0]
        if key in fields and line.startswith("    "):
            out.append(f"    {key}: {fields.pop(key)}")
        else:
            out.append(line)
    out += [f"    {k}: {v}" for k, v in fields.items()]  # keys RULE lacks go last
    return "\n".join(out) + "\n"


# (YAML text, line, key, a word of the reason) — each is one problem a user can make.
CASES = {
    # wrong container types
    "buffers-list": ("buffers: [kv-cache, weight]\n", 1, "buffers", "mapping"),
    "buffer-kind-list": ("buffers:\n  kv-cache: [get_x]\n", 2, "buffers.kv-cache", "mapping"),
    "getters-mapping": ("buffers:\n  mine:\n    attributes: [a]\n    getters: {get_x: 1}\n", 4,
                        "buffers.mine.getters", "list"),
    "getters-number-item": ("buffers:\n  mine:\n    getters:\n      - get_x\n      - 3\n", 5,
                            "buffers.mine.getters", "string"),
    "entry-points-mapping": ("entry_points: {forward: 1}\n", 1, "entry_points", "list"),
    "views-scalar": ("views: 3\n", 1, "views", "list"),
    "once-list": ("once: [__init__]\n", 1, "once", "mapping"),
    "once-functions-scalar": ("once:\n  functions: 7\n", 2, "once.functions", "list"),
    "once-unknown-key": ("once:\n  function: [x]\n", 2, "once.function", "unknown"),
    "index-list": ("index: [layer_id]\n", 1, "index", "mapping"),
    "index-string": ("index: layer_id\n", 1, "index", "mapping"),
    "index-scalar-mapping": ("index:\n  scalar: {layer_id: 1}\n", 2, "index.scalar", "list"),
    "casts-list": ("casts: [to, float]\n", 1, "casts", "mapping"),
    "cast-spec-list": ("casts:\n  to: [receiver]\n", 2, "casts.to", "mapping"),
    "cast-dtype-list": ("casts:\n  to: {operand: receiver, dtype: [a]}\n", 2, "casts.to.dtype", "string"),
    "rules-mapping": ("rules: {id: CF201}\n", 1, "rules", "list"),
    "rule-list": ("rules:\n  - [CF201]\n", 2, "rules[0]", "mapping"),
    "receiver-list": (_rule(receiver="[kv-cache]"), 7, "rule CF201.receiver", "mapping"),
    "message-list": (_rule(message="[a, b]"), 5, "rule CF201.message", "string"),
    "fix-mapping": (_rule(fix="{a: 1}"), 9, "rule CF201.fix", "string"),
    "examples-list": (_rule(examples="[a, b]"), 10, "rule CF201.examples", "mapping"),
    "example-match-list": (_rule(examples="{match: [x], no_match: y}"), 10, "rule CF201.examples.match", "string"),
    "cast-mapping": (_rule(cast="{to: 1}"), 6, "rule CF201.cast", "list"),
    "cast-empty": (_rule(cast="[]"), 6, "rule CF201.cast", "at least one"),
    # message templates
    "message-attribute": (_rule(message='"{expr.nope} is bad"'), 5, "rule CF201.message", "attribute"),
    "message-index": (_rule(message='"{expr[0]} is bad"'), 5, "rule CF201.message", "index"),
    "message-huge-width": (_rule(message='"{expr:>99999999}"'), 5, "rule CF201.message", "width"),
    "message-huge-precision": (_rule(message='"{expr:.1000}"'), 5, "rule CF201.message", "width"),
    "message-nested-spec": (_rule(message='"{expr:{dtype}}"'), 5, "rule CF201.message", "nested"),
    "message-unknown-field": (_rule(message='"{tensor} is cast"'), 5, "rule CF201.message", "placeholder"),
    "message-positional": (_rule(message='"{} is cast"'), 5, "rule CF201.message", "placeholder"),
    "message-bad-conversion": (_rule(message='"{expr!x}"'), 5, "rule CF201.message", "conversion"),
    "message-bad-spec": (_rule(message='"{expr:d}"'), 5, "rule CF201.message", "format"),
    "message-unbalanced": (_rule(message='"{expr"'), 5, "rule CF201.message", "brace"),
    # YAML string booleans (bool('no') is True)
    "infer-getters-string": ("buffers:\n  mine:\n    attributes: [a]\n    infer_getters: 'no'\n", 4,
                             "buffers.mine.infer_getters", "true or false"),
    "store-to-self-string": ('once:\n  store_to_self: "false"\n', 2, "once.store_to_self", "true or false"),
    "hot-string": (_rule(hot='"false"'), 8, "rule CF201.hot", "true"),
    "once-string": (_rule(once="'no'"), 11, "rule CF201.once", "true"),
    "replace-string": ("buffers:\n  kv-cache:\n    replace: 'yes'\n    getters: [g]\n", 3,
                       "buffers.kv-cache.replace", "true or false"),
    # buffer-kind exclusions: each key names the field its patterns apply to (tokens of the buffer's names, its class)
    "exclude-list": ("buffers:\n  mine:\n    attributes: [a]\n    exclude: ['*norm']\n", 4,
                     "buffers.mine.exclude", "which field"),
    "exclude-in-removed": ("buffers:\n  mine:\n    attributes: [a]\n    exclude_in: ['*Norm*']\n", 4,
                           "buffers.mine.exclude_in", "enclosing function"),
    "exclude-unknown-field": ("buffers:\n  mine:\n    attributes: [a]\n    exclude:\n      function: [x]\n", 5,
                              "buffers.mine.exclude.function", "unknown"),
    "exclude-name-underscore": ("buffers:\n  mine:\n    attributes: [a]\n    exclude:\n      name:\n"
                                "        - norm\n        - '*_ln'\n", 7, "buffers.mine.exclude.name", "underscore"),
    "exclude-name-dot": ("buffers:\n  mine:\n    attributes: [a]\n    exclude:\n      name: ['*.ln.*']\n", 5,
                         "buffers.mine.exclude.name", "dot"),
    "exclude-class-uppercase": ("buffers:\n  mine:\n    attributes: [a]\n    exclude:\n      class:\n"
                                "        - '*Norm*'\n", 6, "buffers.mine.exclude.class", "uppercase"),
    # duplicate keys (PyYAML keeps the last one silently)
    "duplicate-top-level": ("views: [a]\nviews: [b]\n", 2, "views", "duplicate"),
    "duplicate-rule-key": (_rule(hot="true\n    hot: false"), 9, "rule CF201.hot", "duplicate"),
    "duplicate-buffer-kind": ("buffers:\n  mine:\n    getters: [a]\n  mine:\n    getters: [b]\n", 4,
                              "buffers.mine", "duplicate"),
    "duplicate-nested": ("buffers:\n  mine:\n    getters: [a]\n    getters: [b]\n", 4,
                         "buffers.mine.getters", "duplicate"),
    "duplicate-flow": ("casts:\n  to: {operand: receiver, operand: argument}\n", 2, "casts.to.operand", "duplicate"),
    "once-guards-removed": ("once:\n  functions: [f]\n  guards: [\"is None\"]\n", 3, "once.guards", "no longer read"),
    "once-decorators-not-strings": ("once:\n  decorators: {a: 1}\n", 2, "once.decorators", "list of strings"),
}


@pytest.mark.parametrize("text,line,key,word", CASES.values(), ids=list(CASES))
def test_bad_rule_file_is_a_positioned_error(tmp_path, text, line, key, word):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    _, errors = validate([bad])
    mine = [e for e in errors if e.path == str(bad)]
    assert any(e.line == line and e.key == key and word in e.reason for e in mine), [str(e) for e in errors]
    assert all(str(e) == f"{e.path}:{e.line}: {e.key}: {e.reason}" for e in errors)
    with pytest.raises(RuleError):
        load_rules([bad])


def test_valid_template_with_escaped_braces_and_small_width_loads(tmp_path):
    ok = tmp_path / "ok.yaml"
    ok.write_text(_rule(message='"{{literal}} {expr!r:>40} {buffer_path:.20} {function}"'))
    rs = load_rules([ok])
    assert rs.rules[-1].message.startswith("{{literal}}")


def test_duplicate_key_names_the_first_occurrence(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("views: [a]\ndtype_args: [x]\nviews: [b]\n")
    _, errors = validate([bad])
    assert [(e.line, e.key) for e in errors] == [(3, "views")]
    assert "line 1" in errors[0].reason


def test_a_recursive_alias_is_reported_not_looped_on(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("views: &v [a, *v]\n")
    _, errors = validate([bad])
    assert [(e.line, e.key) for e in errors] == [(1, "views")]


def test_validate_command_lists_every_problem_without_a_traceback(tmp_path):
    from tests.support import run_castfind

    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent("""\
        buffers:
          kv-cache:
            getters: {a: 1}
            infer_getters: 'no'
        casts: [to]
        index: [layer]
        rules:
          - id: CF201
            name: x-y
            severity: error
            message: "{expr.nope} {dtype:>99999999}"
            cast: to
            receiver: {buffer: [kv-cache]}
            examples: {match: "a  # match", no_match: b}
            hot: true
            hot: false
        """))
    r = run_castfind("rules", "validate", "--rules", str(bad))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    got = {tuple(line.split(": ", 2)[:2]) for line in r.stdout.splitlines()}
    want = {(f"{bad}:3", "buffers.kv-cache.getters"), (f"{bad}:4", "buffers.kv-cache.infer_getters"),
            (f"{bad}:5", "casts"), (f"{bad}:6", "index"), (f"{bad}:11", "rule CF201.message"),
            (f"{bad}:16", "rule CF201.hot")}
    assert want <= got, r.stdout
    for cmd in (("rules", "list"), ("rules", "test"), ("scan", str(tmp_path), "--no-cache")):
        r = run_castfind(*cmd, "--rules", str(bad))
        assert r.returncode == 2 and "Traceback" not in r.stderr and f"{bad}:" in r.stderr, (cmd, r.stderr)


# --- buffer kinds: a user file extends a default kind, or replaces it with `replace: true` -----------


def test_user_buffer_kind_extends_the_default(tmp_path):
    default = load_rules().buffers["kv-cache"]
    user = tmp_path / "user.yaml"
    user.write_text("buffers:\n  kv-cache:\n    getters: [get_my_cache]\n    attributes: [my_pages]\n"
                    "    exclude: {name: ['*scratch*']}\n")
    kind = load_rules([user]).buffers["kv-cache"]
    assert set(kind.getters) == set(default.getters) | {"get_my_cache"}
    assert set(kind.attributes) == set(default.attributes) | {"my_pages"}
    assert set(kind.exclude_names) == set(default.exclude_names) | {"*scratch*"}
    assert kind.infer_getters == default.infer_getters
    assert kind.attribute_matches("kv_buffer") and kind.attribute_matches("my_pages")


def test_user_buffer_kind_extension_keeps_default_excludes_and_may_set_a_flag(tmp_path):
    default = load_rules().buffers["weight"]
    user = tmp_path / "user.yaml"
    user.write_text("buffers:\n  weight:\n    attributes: [qweight]\n    infer_getters: true\n")
    kind = load_rules([user]).buffers["weight"]
    assert set(kind.exclude_names) == set(default.exclude_names) and kind.exclude_classes == default.exclude_classes
    assert kind.infer_getters is True and default.infer_getters is False
    assert kind.excluded(("self", "norm", "weight"))


def test_user_buffer_kind_with_replace_true_replaces_the_default(tmp_path):
    user = tmp_path / "user.yaml"
    user.write_text("buffers:\n  kv-cache:\n    replace: true\n    getters: [get_my_cache]\n")
    kind = load_rules([user]).buffers["kv-cache"]
    assert kind.getters == ("get_my_cache",) and kind.attributes == ()
    assert not kind.attribute_matches("kv_buffer")


def test_extended_kind_is_what_the_scan_uses(tmp_path):
    """A getter added to the default kv-cache kind makes CF101 fire; the default getters still do."""
    from castfind.ruletest import _flagged

    user = tmp_path / "user.yaml"
    user.write_text("buffers:\n  kv-cache:\n    getters: [fetch_pages]\n")
    code = ("class B:\n    def forward_decode(self, q, layer):\n"
            "        a = self.pool.fetch_pages(layer.layer_id).to(q.dtype)  # match\n"
            "        b = self.pool.get_key_buffer(layer.layer_id).to(q.dtype)  # match\n"
            "        return a, b\n")
    assert _flagged(load_rules(), code, "CF101") == {4}
    assert _flagged(load_rules([user]), code, "CF101") == {3, 4}


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

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # FutureWarning: possible set operation / nested set
        text = re.compile(glob_regex(pattern))
        words = re.compile(glob_regex(pattern, star=r"\w*", one=r"\w").encode())
    assert [str(w.message) for w in caught] == []
    assert text.flags & re.UNICODE and not words.flags & re.UNICODE  # a str and a bytes pattern


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
        assert kind.excluded(("self", "input_layernorm", "weight"))
        assert rs.is_entry("Backend.forward_decode") and not rs.is_entry("Backend.forward_decode_x")
        assert rs.is_scalar_index("layer.layer_id") and rs.is_dtype_arg("torch.float8_e4m3fn")
    finally:
        monkeypatch.undo()
        _clear_fnmatch_cache()


def test_a_rule_file_named_twice_is_read_once(tmp_path):
    """`castfind rules validate --rules rules/` names the default folder again: not 4 duplicate ids."""
    from castfind.core.rules import default_rule_dir

    rs, errors = validate([default_rule_dir(), default_rule_dir() / "castfind.yaml"])
    assert errors == [] and rs is not None
    assert [r.id for r in rs.rules] == [r.id for r in load_rules().rules]
    copy = tmp_path / "castfind.yaml"  # a copy is another file: its ids are duplicates
    copy.write_text((default_rule_dir() / "castfind.yaml").read_text())
    _, errors = validate([copy])
    assert errors and all("duplicate id" in e.reason and e.path == str(copy) for e in errors)


# --- buffer-kind exclusions: tokens of the buffer's identifiers and of its class, never the function ----------


@pytest.mark.parametrize(("name", "tokens"), [
    ("input_layernorm", ("input", "layernorm")), ("Qwen2RMSNorm", ("qwen", "2", "rms", "norm")),
    ("norm1", ("norm", "1")), ("ln_f", ("ln", "f")), ("forward_normal", ("forward", "normal")),
    ("w13_weight", ("w", "13", "weight")), ("kvCache", ("kv", "cache")), ("_private__x", ("private", "x")),
])
def test_identifier_tokens(name, tokens):
    assert identifier_tokens(name) == tokens


def test_default_weight_exclusions_look_at_the_buffer_not_at_the_function():
    kind = load_rules().buffers["weight"]
    for names in [("self", "input_layernorm", "weight"), ("self", "q_norm", "weight"), ("self", "ln_f", "weight"),
                  ("self", "norms", "weight"), ("self", "e_score_correction_bias"), ("self", "weight_scale_inv"),
                  ("self", "embed_tokens", "weight")]:
        assert kind.excluded(names), names
    for names in [("self", "normal_proj", "weight"), ("self", "proj", "weight"), ("self", "w13_weight"),
                  ("self", "lm_head", "weight")]:
        assert not kind.excluded(names), names
    assert kind.excluded(("self", "weight"), ("RMSNorm",)) and kind.excluded(("self", "g", "weight"), ("LayerNorm",))
    assert not kind.excluded(("self", "weight"), ("NormalLinear",))
    assert not kind.excluded(("self", "weight"), ("RMSNorm", "Linear"))  # excluded only when every class matches
    assert not kind.excluded(("self", "weight"))  # no class known: the names decide


def test_validate_command_points_at_a_bad_exclude_pattern(tmp_path):
    from tests.support import run_castfind

    bad = tmp_path / "bad.yaml"
    bad.write_text("buffers:\n  weight:\n    exclude:\n      name: [norm, '*Norm*']\n    exclude_in: [x]\n")
    r = run_castfind("rules", "validate", "--rules", str(bad))
    assert r.returncode == 2 and "Traceback" not in r.stderr + r.stdout
    out = r.stdout + r.stderr
    assert f"{bad}:4: buffers.weight.exclude.name: '*Norm*' has an uppercase letter" in out, out
    assert f"{bad}:5: buffers.weight.exclude_in:" in out, out


def test_buffer_words_match_where_the_one_pattern_they_replace_matched():
    """The getter names and attribute accesses, searched apart (AnyPattern), match exactly the texts the
    single pattern of both matched: crafted edges and every project source and fixture."""
    import re

    from castfind.core.rules import glob_regex
    from tests.support import REPO

    rs = load_rules(include_default=True)
    for inferable_only in (False, True):
        kinds = [k for k in rs.buffers.values() if k.infer_getters or not inferable_only]
        getters = sorted({re.escape(g) for k in kinds for g in k.getters})
        attrs = sorted({"(?:" + glob_regex(p, star=r"\w*", one=r"\w") + ")" for k in kinds for p in k.attributes})
        alts = [r"\b(?:" + "|".join(getters) + ")", r"\.(?:\s|\\\r?\n|#[^\n]*\n)*(?:" + "|".join(attrs) + ")"]
        one = re.compile(("(?:" + "|".join(alts) + r")\b").encode())
        words = rs.buffer_words(inferable_only=inferable_only)
        assert words is not None and len(words.patterns) == 2
        texts = [b"get_key_buffer(i)", b"xget_key_buffer(i)", b"get_key_buffers(i)", b"_get_key_buffer", b"1get_kv_cache",
                 b"(get_kv_cache)", b"get_kv_cache", b"\xc3\xbcget_kv_cache()", b"self. # c\n  k_buffer", b"k_buffer",
                 b"self.k_buffer_x", b"a.w13_weight", b"a.weightx", b"x.my_weight_scale", b"f(weight)", b""]
        texts += [p.read_bytes() for p in sorted(REPO.glob("castfind/*.py")) + sorted(REPO.glob("fixtures/**/*.py"))]
        hits = 0
        for t in texts:
            assert bool(words.search(t)) is bool(one.search(t)), (inferable_only, t[:80])
            hits += bool(one.search(t))
        assert 20 < hits < len(texts) - 5
