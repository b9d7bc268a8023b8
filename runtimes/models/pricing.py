"""Per-token prices configured by the operator (USD), shared by the model adapters."""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.harness.messages import Usage

__all__ = ["Pricing"]


@dataclass(frozen=True, slots=True)
class Pricing:
    """USD per token. Cache prices default to the input price when not given.

    ``input`` applies to uncached input tokens only (:class:`Usage` counts cache reads and
    writes separately), so :meth:`cost` never charges a token twice.
    """

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cache_read", "cache_write"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"Pricing.{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"Pricing.{name} must be a finite price >= 0, got {value!r}")

    @property
    def cache_read_price(self) -> float:
        return self.input if self.cache_read is None else self.cache_read

    @property
    def cache_write_price(self) -> float:
        return self.input if self.cache_write is None else self.cache_write

    def cost(self, usage: Usage) -> float:
        """The cost of ``usage`` in USD (its own ``cost`` field is ignored)."""
        return (
            usage.input * self.input
            + usage.output * self.output
            + usage.cache_read * self.cache_read_price
            + usage.cache_write * self.cache_write_price
        )
