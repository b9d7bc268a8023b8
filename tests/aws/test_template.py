"""infra/aws/template.yaml lints clean, and the lint catches a deliberate error. The
SAM transform and the second lint (which catches a role ↔ function cycle) run in their
own venv in .ci/run (``infra/aws/validate.py --self-test``): the transform pins an older
pydantic than the project's."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "aws" / "template.yaml"


def _validate() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "validate", ROOT / "infra" / "aws" / "validate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_template_lints_clean() -> None:
    assert _validate().findings(TEMPLATE.read_text(), transform=False) == []


def test_a_bad_property_is_caught_by_the_lint() -> None:
    text = TEMPLATE.read_text().replace("BillingMode: PAY_PER_REQUEST", "BillingMode: FREE")
    found = _validate().findings(text, transform=False)
    assert found and all(f.startswith("template:") for f in found), found
