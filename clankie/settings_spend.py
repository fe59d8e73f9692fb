"""The settings that govern spend: budgets, per-run caps, cache lifetimes, prices (one group of :class:`clankie.settings.Settings`).

A group is a plain pydantic model whose fields :class:`~clankie.settings.Settings`
inherits; it is never built on its own. The comment after a field is its
description in ``docs/settings-reference.md`` (``scripts/gen-docs``). What
they do: ``docs/spend.md``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from clankie.pricing import PUBLISHED, ModelPrice


class SpendSettings(BaseModel):
    """Budgets, per-run caps, cache lifetimes and the price table (docs/spend.md)."""

    # budgets per UTC day, checked before every model call; 0 means no budget (docs/spend.md, "Budgets"). Each room
    # and each person has one out of the box, above what an honest heavy day costs (docs/spend.md, "The defaults")
    budget_day_tokens: int = Field(default=0, ge=0, le=1 << 50)  # the whole tree: tokens a UTC day (every kind billed)
    budget_day_usd: float = Field(default=0.0, ge=0, le=1e9)  # the whole tree: dollars a UTC day, by the price table
    budget_room_day_tokens: int = Field(default=0, ge=0, le=1 << 50)  # each room: tokens a UTC day
    budget_room_day_usd: float = Field(default=100.0, ge=0, le=1e9)  # each room: dollars a UTC day
    budget_user_day_tokens: int = Field(default=0, ge=0, le=1 << 50)  # each person, in every room: tokens a UTC day
    budget_user_day_usd: float = Field(default=40.0, ge=0, le=1e9)  # each person, in every room: dollars a UTC day
    budget_max_keys: int = Field(default=100_000, ge=100, le=10_000_000)  # rooms and persons whose day totals are held in memory
    budget_ledger_days: int = Field(default=8, ge=2, le=3660)  # days of spend ledger kept under <state>/captain/spend
    # USD per million tokens, merged over Anthropic's published table; e.g. {"claude-x": {"input": 3, "output": 15}}
    model_prices: dict[str, ModelPrice] = Field(default_factory=lambda: dict(PUBLISHED))

    # per-run caps: a run past one ends captain_run_budget_exceeded (docs/spend.md, "Run caps")
    run_max_model_calls: int = Field(default=60, ge=1, le=100_000)  # model requests one run may make (retries and summaries count)
    run_max_tool_calls: int = Field(default=150, ge=0, le=1_000_000)  # tool calls one run may make
    run_max_tokens: int = Field(default=4_000_000, ge=1000, le=1 << 50)  # tokens one run may be billed, every kind

    # prompt cache lifetimes (docs/spend.md, "Cache lifetime by pace")
    cache_lifetime: Literal["pace", "5m", "1h"] = "pace"  # the conversation's cache lifetime: chosen per lane by its pace, or fixed
    cache_pace_gaps: int = Field(default=16, ge=1, le=1000)  # a lane's newest gaps between turns the pace rule reads
    cache_health_min_share: float = Field(default=0.7, ge=0, le=1)  # a warm lane whose cache-read share falls below it is warned about

    @field_validator("model_prices", mode="after")
    @classmethod
    def _over_published(cls, value: Any) -> dict[str, ModelPrice]:
        return {**PUBLISHED, **value}
