"""A stand-in for Lambda's Python runtime, for the test of the built artifact: one
process is one container.

``python -I -S lambda_runtime.py CODE_DIR HANDLER``: ``CODE_DIR`` (the unpacked
artifact, as ``/var/task``) is the only directory besides the interpreter's standard
library on ``sys.path`` — no site-packages, no ``.pth`` processing, no environment
variables read by the interpreter. ``HANDLER`` is the template's ``module.function``.
Each stdin line ``{"event", "request_id", "remaining_ms"}`` is one invocation; its
result is printed as a line ``{"response": ...}`` (``{"error": ...}`` if the handler
raised, as Lambda reports it). At end of input it prints ``{"outside": [...]}``: every
loaded module whose file is neither in ``CODE_DIR`` nor in the standard library — the
test requires none.

Run as a file, never imported: it must not import anything but the standard library
before the handler.
"""

from __future__ import annotations

import importlib
import json
import sys
import sysconfig
import time
import traceback
from pathlib import Path


class Context:
    """The part of Lambda's context object the handler reads."""

    def __init__(self, request_id: str, remaining_ms: int) -> None:
        self.aws_request_id = request_id
        self._deadline = time.monotonic() + remaining_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def _outside(code: Path) -> list[str]:
    stdlib = [Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib")]
    found = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        if path == Path(__file__).resolve():  # this runtime (__main__, __mp_main__)
            continue
        if not any(path.is_relative_to(root) for root in (code, *stdlib)):
            found.append(f"{name}: {path}")
    return sorted(found)


def main(code_dir: str, handler_name: str) -> None:
    code = Path(code_dir).resolve()
    sys.path.insert(0, str(code))
    module_name, _, function_name = handler_name.rpartition(".")
    handler = getattr(importlib.import_module(module_name), function_name)
    for line in sys.stdin:
        call = json.loads(line)
        context = Context(call["request_id"], call.get("remaining_ms", 60_000))
        try:
            out = {"response": handler(call["event"], context)}
        except Exception as error:
            traceback.print_exc()
            out = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(out), flush=True)
    print(json.dumps({"outside": _outside(code)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
