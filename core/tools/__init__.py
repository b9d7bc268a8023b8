"""Tool logic over core ports (no registry here: the harness registers tools)."""

from __future__ import annotations

__all__: list[str] = []
