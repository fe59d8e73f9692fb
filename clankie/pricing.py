"""What tokens cost: the price table per model and the dollars of one call's usage (pure).

Prices are US dollars per million tokens, as Anthropic publishes them. A
model's cache prices default to the published multipliers of its input
price: a cache read costs 0.1x, a cache write with the 5-minute lifetime
1.25x and with the 1-hour lifetime 2x. A model id is priced by the longest
table key it starts with (``claude-sonnet-4-5-20250929`` by
``claude-sonnet-4-5``), else by ``*``, which is priced like the dearest
model so an unknown one is never under-counted against a dollar budget.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

CACHE_READ = 0.1  # of the input price, per token read from the cache
CACHE_WRITE_5M = 1.25  # ... per token written with the 5-minute lifetime
CACHE_WRITE_1H = 2.0  # ... per token written with the 1-hour lifetime
FALLBACK = "*"
PER = 1_000_000


class ModelPrice(BaseModel):
    """One model's prices in USD per million tokens; the cache prices default to the published multipliers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0, le=10_000)
    output: float = Field(ge=0, le=10_000)
    cache_read: float | None = Field(default=None, ge=0, le=10_000)
    cache_write_5m: float | None = Field(default=None, ge=0, le=10_000)
    cache_write_1h: float | None = Field(default=None, ge=0, le=10_000)

    def usd(self, *, input: int, output: int, cache_read: int, cache_write_5m: int, cache_write_1h: int) -> float:
        """What these token counts cost (``input`` is the uncached remainder, as the API bills it)."""
        read = self.cache_read if self.cache_read is not None else self.input * CACHE_READ
        w5 = self.cache_write_5m if self.cache_write_5m is not None else self.input * CACHE_WRITE_5M
        w1 = self.cache_write_1h if self.cache_write_1h is not None else self.input * CACHE_WRITE_1H
        return (input * self.input + output * self.output + cache_read * read + cache_write_5m * w5
                + cache_write_1h * w1) / PER


def _p(input: float, output: float) -> ModelPrice:
    return ModelPrice(input=input, output=output)


PUBLISHED: dict[str, ModelPrice] = {
    "claude-opus-4-5": _p(5.0, 25.0),
    "claude-opus-4-1": _p(15.0, 75.0),
    "claude-opus-4": _p(15.0, 75.0),
    "claude-sonnet-4-5": _p(3.0, 15.0),
    "claude-sonnet-4": _p(3.0, 15.0),
    "claude-3-7-sonnet": _p(3.0, 15.0),
    "claude-haiku-4-5": _p(1.0, 5.0),
    "claude-3-5-haiku": _p(0.8, 4.0),
    "claude-3-haiku": _p(0.25, 1.25),
    FALLBACK: _p(15.0, 75.0),
}
"""Anthropic's published prices (USD per million tokens, input/output) for the models Clankie may run."""


def price_of(table: Mapping[str, ModelPrice], model: str) -> ModelPrice:
    """The price of ``model``: the longest key it starts with, else ``*`` (else the published fallback)."""
    best = max((k for k in table if k != FALLBACK and model.startswith(k)), key=len, default=None)
    if best is not None:
        return table[best]
    return table.get(FALLBACK, PUBLISHED[FALLBACK])
