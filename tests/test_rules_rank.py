"""Ranking policy lives in the rule files: each buffer kind's ``weight`` and ``rank.entry_points``.

A finding's static score is its kind's weight + its loop depth (at most 3) + the largest bonus of a
``rank.entry_points`` pattern matching the first function of its hot path; the defaults give the
scores castfind always gave (KV and state pools 3, whole weights 2, other kinds 1; +2 from a decode step).
"""

from __future__ import annotations

import pytest

from castfind.core.rules import RuleError, load_rules, validate

# (YAML text, line, key, a word of the reason)
CASES = {
    "weight-string": ("buffers:\n  mine:\n    attributes: [a]\n    weight: heavy\n", 4, "buffers.mine.weight", "number"),
    "weight-bool": ("buffers:\n  kv-cache:\n    weight: true\n", 3, "buffers.kv-cache.weight", "number"),
    "weight-list": ("buffers:\n  kv-cache:\n    weight: [3]\n", 3, "buffers.kv-cache.weight", "number"),
    "weight-nan": ("buffers:\n  kv-cache:\n    weight: .nan\n", 3, "buffers.kv-cache.weight", "finite"),
    "rank-list": ("rank: ['*.forward_decode']\n", 1, "rank", "mapping"),
    "rank-unknown-key": ("rank:\n  buffers: {}\n", 2, "rank.buffers", "unknown"),
    "rank-entry-points-list": ("rank:\n  entry_points: ['*.forward_decode']\n", 2, "rank.entry_points", "mapping"),
    "rank-bonus-string": ("rank:\n  entry_points:\n    '*.forward': high\n", 3, "rank.entry_points.*.forward", "number"),
    "rank-bonus-bool": ("rank:\n  entry_points:\n    '*.forward': false\n", 3, "rank.entry_points.*.forward", "number"),
    "rank-pattern-number": ("rank:\n  entry_points:\n    3: 1.0\n", 3, "rank.entry_points.3", "string"),
    "rank-duplicate-pattern": ("rank:\n  entry_points:\n    a: 1\n    a: 2\n", 4, "rank.entry_points.a", "duplicate"),
}


@pytest.mark.parametrize("text,line,key,word", CASES.values(), ids=list(CASES))
def test_bad_ranking_is_a_positioned_error(tmp_path, text, line, key, word):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    _, errors = validate([bad])
    assert any(e.path == str(bad) and e.line == line and e.key == key and word in e.reason for e in errors), \
        [str(e) for e in errors]
    with pytest.raises(RuleError):
        load_rules([bad])


def test_the_defaults_are_the_scores_castfind_always_gave():
    rs = load_rules()
    assert {k: v.weight for k, v in rs.buffers.items()} == {"kv-cache": 3.0, "state-pool": 3.0, "weight": 2.0}
    assert rs.entry_point_rank == {"*.forward_decode": 2.0}
    assert rs.kind_weight("my-kind") == 1.0
    assert rs.entry_bonus("sglang.Runner.forward_decode") == 2.0 and rs.entry_bonus("sglang.Runner.forward") == 0.0


def test_later_files_override_weights_and_bonuses(tmp_path):
    user = tmp_path / "user.yaml"
    user.write_text("buffers:\n  kv-cache:\n    weight: 5\n    getters: [get_pages]\n  mine:\n    attributes: [m]\n"
                    "rank:\n  entry_points:\n    '*.forward_decode': 0.5\n    '*.forward_extend': 1\n")
    rs = load_rules([user])
    assert rs.buffers["kv-cache"].weight == 5.0 and "get_pages" in rs.buffers["kv-cache"].getters
    assert rs.buffers["state-pool"].weight == 3.0 and rs.buffers["mine"].weight == 1.0
    assert rs.entry_point_rank == {"*.forward_decode": 0.5, "*.forward_extend": 1.0}
    assert rs.entry_bonus("B.forward_extend") == 1.0


def test_a_kind_extended_or_replaced_without_a_weight_keeps_it(tmp_path):
    user = tmp_path / "user.yaml"
    user.write_text("buffers:\n  kv-cache:\n    replace: true\n    getters: [get_pages]\n"
                    "  weight:\n    attributes: [qweight]\n")
    rs = load_rules([user])
    assert rs.buffers["kv-cache"].getters == ("get_pages",) and rs.buffers["kv-cache"].weight == 3.0
    assert rs.buffers["weight"].weight == 2.0


def test_the_largest_matching_bonus_counts_not_the_sum(tmp_path):
    user = tmp_path / "user.yaml"
    user.write_text("rank:\n  entry_points:\n    '*.forward*': 1\n")
    rs = load_rules([user])
    assert rs.entry_bonus("B.forward_decode") == 2.0 and rs.entry_bonus("B.forward") == 1.0


CODE = """\
class B:
    def forward_decode(self, q, layer):
        for _ in range(2):
            k = self.pool.get_key_buffer(layer.layer_id).to(q.dtype)
        return k

    def forward_extend(self, q, layer):
        return self.lm_head.weight.to(q.dtype)
"""


def _scores(tmp_path, *rules: str) -> dict[int, float]:
    from castfind import api

    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "m.py").write_text(CODE)
    run = api.scan([str(src)], rules=list(rules), use_cache=False, jobs=1)
    return {f.line: f.score for f in run.report.findings}


def test_the_score_comes_from_the_rule_files(tmp_path):
    # Defaults: kv-cache 3 + loop depth 1 + decode 2; a weight 2 + depth 0, not from a decode step.
    assert _scores(tmp_path) == {4: 6.0, 8: 2.0}
    user = tmp_path / "user.yaml"
    user.write_text("buffers:\n  kv-cache:\n    weight: 10\n  weight:\n    weight: 0.5\n"
                    "rank:\n  entry_points:\n    '*.forward_decode': 0\n    '*.forward_extend': 4\n")
    assert _scores(tmp_path, str(user)) == {4: 11.0, 8: 4.5}
