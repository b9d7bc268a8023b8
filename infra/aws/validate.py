"""Validate the SAM template offline: cfn-lint on the template, then the SAM transform
in-process (samtranslator) and cfn-lint again on its output — the second lint catches
what only appears after the transform (a circular dependency, say).

``python infra/aws/validate.py [template.yaml]``: prints the findings, exits 1 on any;
``--self-test`` also checks that a role ↔ function cycle (an error only the second
lint sees) is caught. ``aws-sam-translator`` pins pydantic ``~=2.13``, so this runs in
its own venv (``.ci/run``), not the project's; :func:`findings` with
``transform=False`` needs only cfn-lint.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from cfnlint.api import lint
from cfnlint.decode import decode_str

__all__ = ["CYCLE", "findings", "transformed", "with_cycle"]

TEMPLATE = Path(__file__).with_name("template.yaml")


REGION = "us-east-1"  # the transform fills AWS::Region / AWS::Partition from a session


def _no_managed_policies() -> dict[str, str]:
    # Asked for only when a template names an AWS managed policy; this one names none,
    # so nothing is looked up (and nothing goes online).
    return {}


def transformed(text: str) -> dict[str, Any]:
    """The template after the SAM transform (code locations replaced by a placeholder:
    the transform wants ``s3://`` URIs, which only ``sam package`` produces)."""
    import boto3
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    template, problems = decode_str(text)
    if template is None:
        raise ValueError(f"unreadable template: {problems}")
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") == "AWS::Serverless::Function":
            resource["Properties"]["CodeUri"] = "s3://placeholder-bucket/perdure.zip"
    plain = json.loads(json.dumps(template))  # the decoder's node types → plain values
    translator = Translator(None, Parser(), boto_session=boto3.session.Session(region_name=REGION))
    result: dict[str, Any] = translator.translate(
        plain, parameter_values={}, get_managed_policy_map=_no_managed_policies
    )
    return result


def findings(text: str, *, transform: bool = True) -> list[str]:
    """cfn-lint's findings on the template and (``transform``) on its transformed output."""
    found = [f"template: {m}" for m in lint(text)]
    if not found and transform:
        found += [f"transformed: {m}" for m in lint(json.dumps(transformed(text)))]
    return found


CYCLE = (
    '                Resource: !Sub "arn:${AWS::Partition}:lambda:${AWS::Region}:'
    '${AWS::AccountId}:function:${AWS::StackName}-actor"\n'
)


def with_cycle(text: str) -> str:
    """The template with the scheduler role naming the function by reference while the
    function's environment names the role: a circular dependency."""
    if CYCLE not in text:
        raise ValueError("the scheduler role's invoke statement moved")
    return text.replace(CYCLE, "                Resource: !GetAtt ActorFunction.Arn\n")


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--self-test"]
    path = Path(args[0]) if args else TEMPLATE
    text = path.read_text()
    problems = findings(text)
    for problem in problems:
        print(problem)
    print(f"{path}: {'ok' if not problems else f'{len(problems)} finding(s)'}")
    if "--self-test" in sys.argv and not any("E3004" in f for f in findings(with_cycle(text))):
        print("self-test: a role-function cycle was not caught")
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
