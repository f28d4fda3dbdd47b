"""Operand guards (issue 34, item 5; fixtures/operand_guards): a cast under a test of its own operand's dtype is
judged with the dtype the operand's allocation declares. A test false for it means the cast never runs there
(a warning that says why, not an error); a test that holds, an unknown dtype, a device test castfind cannot
read, a test of another variable or of another tensor's dtype leave the finding as it was."""

from __future__ import annotations

import pytest

from castfind import api
from castfind.analysis.cost import canonical_literal
from castfind.analysis.operand_guards import never_runs, operand_test
from castfind.read.facts import Guard
from tests.support import REPO

FIX = REPO / "fixtures" / "operand_guards"
BF16 = "torch.bfloat16"


@pytest.mark.parametrize(("test", "value"), [
    ("w.dtype == torch.bfloat16", True),
    ("w.dtype != torch.bfloat16", False),
    ("torch.bfloat16 == w.dtype", True),
    ("w.dtype is torch.float16", False),
    ("w.dtype in (torch.bfloat16, torch.float16)", True),
    ("w.dtype not in [torch.float32]", True),
    ("not w.dtype == torch.bfloat16", False),
    ("x.is_cuda and w.dtype != torch.bfloat16", False),  # one false operand of `and` decides
    ("x.is_cuda or w.dtype == torch.bfloat16", True),  # one true operand of `or` decides
    ("x.is_cuda or w.dtype != torch.bfloat16", None),
    ("w.is_cuda", None),  # the device: unknown
    ('w.device.type == "cuda"', None),
    ("x.dtype != torch.bfloat16", None),  # another variable
    ("w.bias.dtype != torch.bfloat16", None),  # the dtype of something else
    ("w.dtype != self.dtype", None),  # not a literal dtype
    ("w.dtype ==", None),  # not Python: unknown, never a crash
])
def test_a_test_is_read_with_three_values(test: str, value: bool | None) -> None:
    assert operand_test(test, "w", BF16, canonical_literal) is value


def test_a_cast_never_runs_on_the_false_side_of_its_guard() -> None:
    taken = Guard("w.dtype != torch.bfloat16", False, line=3)
    early = Guard("w.dtype == torch.bfloat16", True, line=5)  # `if ...: return` above the cast
    assert never_runs([taken], "w", BF16, canonical_literal) == taken
    assert never_runs([early], "w", BF16, canonical_literal) == early
    assert never_runs([taken, early], "w", "torch.float16", canonical_literal) is None
    assert never_runs([Guard("x.is_cuda", False, line=1)], "w", BF16, canonical_literal) is None


@pytest.fixture(scope="module")
def scanned() -> api.ScanRun:
    return api.scan([str(FIX)], use_cache=False, jobs=1)


def test_the_fixture_layers_are_judged_with_their_declared_dtypes(scanned) -> None:
    """One finding per function; x.float() beside a weight cast is no whole buffer."""
    got = {f.function: (f.rule, f.severity) for f in scanned.report.findings}
    assert got == {
        "Bf16Fallback.forward": ("CF102", "warning"),
        "EarlyReturn.forward": ("CF102", "warning"),
        "DeviceAndDtype.forward": ("CF102", "warning"),
        "Fp16Weight.forward": ("CF102", "error"),
        "DeviceOrDtype.forward": ("CF102", "error"),
        "NoDtype.forward": ("CF102", "error"),
        "OtherVariable.forward": ("CF102", "error"),
        "OtherDtype.forward": ("CF102", "error"),
        # A parameter's cast, judged with what its caller hands (helpers.py).
        "mm_fp32_out": ("CF102", "warning"),
        "mm_any": ("CF102", "error"),
    }
    by_fn = {f.function: f for f in scanned.report.findings}
    fallback = by_fn["Bf16Fallback.forward"]
    assert fallback.cost is not None and fallback.cost.verdict == "never"
    assert fallback.cost.note.startswith("never runs here: `self.weight.dtype != torch.bfloat16` "
                                         "(opguard/layers.py:17) is false for self.weight, declared torch.bfloat16")
    assert fallback.message.endswith(f"({fallback.cost.note})")
    early = by_fn["EarlyReturn.forward"].cost
    assert early is not None and "`not (self.weight.dtype in (torch.bfloat16, torch.float16))`" in early.note
    helper = by_fn["mm_fp32_out"].cost
    assert helper is not None and helper.note == ("never runs here: `not (w.dtype == torch.bfloat16)` "
                                                  "(opguard/helpers.py:9) is false for w, declared torch.bfloat16")
    for fn in ("mm_any", "Fp16Weight.forward", "DeviceOrDtype.forward", "NoDtype.forward", "OtherVariable.forward",
               "OtherDtype.forward"):
        cost = by_fn[fn].cost
        assert cost is None or cost.verdict != "never", fn


def test_callers_that_hand_weights_of_two_dtypes_leave_it_as_it_was(tmp_path) -> None:
    """A second caller hands mm_fp32_out an fp16 weight: the operand's dtype is no longer one, so the
    fallback's cast is judged as before (an error)."""
    import shutil

    root = tmp_path / "mixed"
    shutil.copytree(FIX, root)
    helpers = root / "opguard" / "helpers.py"
    helpers.write_text(helpers.read_text() + (
        "\n\nclass Fp16ToFastPath(nn.Module):\n    def __init__(self, n, d):\n        super().__init__()\n"
        "        self.weight = nn.Parameter(torch.empty(n, d, dtype=torch.float16))\n\n"
        "    def forward(self, x):\n        return mm_fp32_out(x, self.weight)\n"))
    found = api.scan([str(root)], use_cache=False, jobs=1).report.findings
    got = {f.function: f.severity for f in found if f.path == "opguard/helpers.py"}
    assert got == {"mm_fp32_out": "error", "mm_any": "error"}
