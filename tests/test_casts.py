"""castfind.core.casts is the one table of cast methods: the extractor, the rules and the runtime read it.

Adding a method is one line there plus a rule that names it (with its examples); a ``casts:`` key in a
rule file can only override a known method, never add one that castfind would not extract.
"""

from __future__ import annotations

import textwrap

import pytest

from castfind.core import casts, versions
from castfind.core.casts import CastMethod
from castfind.core.rules import RuleError, load_rules, validate
from castfind.read.extract import extract_source
from castfind.ruletest import check_rule
from castfind.runtime.source import SourceIndex, methods_for

# The membership each consumer had before the table existed: the table must reproduce it exactly.
EXTRACTED = {"to", "type", "type_as", "float", "half", "bfloat16", "double", "copy_",
             "int", "long", "short", "byte", "char", "bool", "cfloat", "cdouble"}
RUNTIME_TO_COPY = {"to", "type", "type_as", "float", "half", "bfloat16", "double",
                   "int", "long", "short", "char", "byte", "bool"}


def _extracted(src: str) -> list[str]:
    return [c.method for c in extract_source(src.encode(), "m", "m.py", False).casts]


# --- the table and its consumers agree ----------------------------------------------------------------


def test_the_table_holds_each_method_once_and_the_extractor_records_exactly_those():
    names = [m.name for m in casts.CASTS]
    assert len(names) == len(set(names)) and set(names) == EXTRACTED == casts.names()
    src = "".join(f"y{i} = x.{m}()\n" for i, m in enumerate(sorted(EXTRACTED))) + "z = x.cpu()\n"
    assert sorted(_extracted(src)) == sorted(EXTRACTED)


def test_the_runtime_method_sets_come_from_the_table():
    assert methods_for("aten::_to_copy") == RUNTIME_TO_COPY
    assert methods_for("aten::copy_") == methods_for("aten::copy") == {"copy_"}
    for m in casts.CASTS:  # every extracted method is either located by its aten op or marked as not
        assert (m.name in methods_for(m.aten)) == m.located


def test_rule_set_defaults_are_the_table():
    rs = load_rules()
    assert set(rs.casts) == EXTRACTED
    assert rs.casts["float"].dtype == "float32" and rs.casts["to"].dtype is None
    assert rs.casts["copy_"].operand == "argument" and rs.casts["to"].operand == "receiver"


def test_the_extractor_version_follows_the_table():
    extended = casts.CASTS + (CastMethod("fp8", "receiver", "float8_e4m3fn", casts.TO_COPY),)
    assert versions.EXTRACTOR_VERSION.endswith(casts.digest())
    assert casts.digest(extended) != casts.digest()
    changed = tuple(CastMethod(m.name, m.operand, m.dtype, m.aten, True) for m in casts.CASTS)
    assert casts.digest(changed) != casts.digest()  # cfloat/cdouble located: a different table


# --- a new cast method: one line in the table, one rule with its examples ------------------------------

NEW = CastMethod("fp8", "receiver", "float8_e4m3fn", casts.TO_COPY)
RULE = textwrap.dedent("""\
    rules:
      - id: CF250
        name: whole-kv-cache-fp8-cast
        severity: warning
        message: "{expr} casts the whole {buffer} to {dtype} in {function}"
        cast:
          - fp8
        receiver: {buffer: [kv-cache]}
        hot: true
        fix: "Keep the cache in one dtype."
        examples:
          match: |
            class Backend:
                def forward_decode(self, q, layer):
                    return self.pool.get_key_buffer(layer.layer_id).fp8()  # match
          no_match: |
            class Backend:
                def forward_decode(self, q, layer, rows):
                    return self.pool.get_key_buffer(layer.layer_id)[rows].fp8()
    """)


@pytest.fixture
def with_fp8(monkeypatch):
    """The table with one more line, as a contributor would add it."""
    monkeypatch.setattr(casts, "CASTS", casts.CASTS + (NEW,))


def test_a_rule_naming_a_method_the_table_lacks_is_an_error_at_its_line(tmp_path):
    rule = tmp_path / "fp8.yaml"
    rule.write_text(RULE)
    _, errors = validate([rule])
    assert [(e.path, e.line, e.key) for e in errors] == [(str(rule), 7, "rule CF250.cast")], errors
    assert "unknown cast method 'fp8': castfind does not extract it; known: " in errors[0].reason
    assert "bfloat16" in errors[0].reason


def test_one_line_in_the_table_makes_a_new_method_work_end_to_end(tmp_path, with_fp8):
    from castfind import api

    rule = tmp_path / "fp8.yaml"
    rule.write_text(RULE)
    rs, errors = validate([rule])  # `castfind rules validate`
    assert errors == [] and rs is not None
    assert rs.casts["fp8"] == NEW
    assert _extracted("y = x.fp8()\n") == ["fp8"]  # the extractor records it
    (mine,) = [r for r in rs.rules if r.id == "CF250"]
    assert check_rule(rs, mine) == []  # `castfind rules test`: its examples pass
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text(mine.match_example)
    run = api.scan([str(src)], rules=[str(rule)], use_cache=False, jobs=1)  # the checker flags it
    assert [(f.rule, f.line) for f in run.report.findings] == [("CF250", 3)]
    assert "to float8_e4m3fn" in run.report.findings[0].message
    # The runtime puts a profiled aten::_to_copy in that function on the .fp8() line.
    index = SourceIndex((str(src),))
    located = index.locate("m.py", 2, "forward_decode", "aten::_to_copy", None)
    assert (located.line, located.qualname) == (3, "Backend.forward_decode")


# --- `casts:` in a rule file: overrides of known methods only ------------------------------------------


def test_an_unknown_casts_key_is_a_positioned_error(tmp_path):
    from tests.support import run_castfind

    bad = tmp_path / "bad.yaml"
    bad.write_text("views: [view]\ncasts:\n  to: {operand: receiver}\n  to_fp8: {operand: receiver, dtype: fp8}\n")
    _, errors = validate([bad])
    assert [(e.line, e.key) for e in errors] == [(4, "casts.to_fp8")]
    assert errors[0].reason.startswith("unknown cast method 'to_fp8': castfind does not extract it; known: ")
    with pytest.raises(RuleError, match=f"^{bad}:4: casts.to_fp8: unknown cast method"):
        load_rules([bad])
    r = run_castfind("rules", "validate", "--rules", str(bad))
    assert r.returncode == 2 and f"{bad}:4: casts.to_fp8: unknown cast method 'to_fp8'" in r.stdout, r.stdout


def test_a_casts_override_changes_only_the_keys_it_names(tmp_path):
    user = tmp_path / "user.yaml"
    user.write_text("casts:\n  copy_: {dtype: the dtype of dst}\n  half: {dtype: null}\n  type: {operand: argument}\n")
    rs = load_rules([user])
    assert (rs.casts["copy_"].operand, rs.casts["copy_"].dtype) == ("argument", "the dtype of dst")
    assert rs.casts["half"].dtype is None and rs.casts["half"].operand == "receiver"
    assert rs.casts["type"].operand == "argument" and rs.casts["type"].dtype is None
    assert casts.by_name()["copy_"].dtype == "the destination dtype"  # the table is untouched


def test_a_bad_operand_override_is_a_positioned_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("casts:\n  to:\n    operand: result\n")
    _, errors = validate([bad])
    assert [(e.line, e.key) for e in errors] == [(3, "casts.to.operand")] and "receiver or argument" in errors[0].reason
