"""Issue 35, a registry factory's platform test: the factory of ``--attention-backend`` builds a platform subclass
under ``if not _is_xpu:`` / its ``else``; the deployment's bindings decide that test (the one evaluator,
``Deployment.holds``), so on cuda the XPU subclass is no selected component and its casts are off the model's path
(fixtures/deploy_factories: a tiny engine written for these tests; its registry's spelling in rules.yaml)."""

from __future__ import annotations

import pytest

from castfind import api
from tests.support import REPO

FIX = REPO / "fixtures" / "deploy_factories"
RULES = str(FIX / "rules.yaml")
GAMMA = str(FIX / "gamma_config.json")
BASE, XPU, WIDE = 9, 14, 19  # the casts of TiledBackend, XpuTiledBackend, WideTiledBackend (backends.py)


def _off(backend: str, **options: object) -> dict[int, str]:
    run = api.scan([str(FIX)], use_cache=False, jobs=1, rules=(RULES,), model_config=GAMMA,
                   attention_backend=backend, all_models=True, **options)
    return {f.line: f.off_path for f in run.report.findings if f.path.endswith("backends.py")}


def test_without_a_platform_both_arms_of_the_factory_are_selected() -> None:
    assert _off("tiled") == {BASE: "", XPU: "", WIDE: "model: WideTiledBackend is not the selected attention backend "
                                                       "(tiled)"}


def test_on_cuda_the_xpu_subclass_is_ruled_out_by_the_platform() -> None:
    off = _off("tiled", platform="cuda")
    assert off[BASE] == ""
    assert off[XPU] == "model: XpuTiledBackend is not the selected attention backend (tiled: --platform cuda rules it out)"


def test_on_xpu_the_subclass_is_selected_and_its_base_with_it() -> None:
    off = _off("tiled", platform="xpu")
    assert (off[BASE], off[XPU]) == ("", "")


@pytest.mark.parametrize("platform", ["cuda", "xpu"])
def test_a_test_no_binding_decides_keeps_both_arms(platform: str) -> None:
    off = _off("tiled-wide", platform=platform)
    assert (off[BASE], off[WIDE]) == ("", "")
    assert off[XPU] == "model: XpuTiledBackend is not the selected attention backend (tiled-wide)"


def test_left_out_by_default_and_counted() -> None:
    run = api.scan([str(FIX)], use_cache=False, jobs=1, rules=(RULES,), model_config=GAMMA, attention_backend="tiled",
                   platform="cuda")
    assert [f.line for f in run.report.findings] == [BASE]
    assert run.report.off_path == {"model": 2}
