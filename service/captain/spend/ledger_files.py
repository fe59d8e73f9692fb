"""The file adapter of the spend ledger: one JSONL file per UTC day, ``<state>/captain/spend/<day>.jsonl``.

It satisfies :class:`clankie.store.spend_ports.SpendLedgerStore` (the contract the PostgreSQL adapter passes too,
``tests/clankie/store/test_contract_spend.py``). A line is handed to the kernel whole before :meth:`append`
returns (:func:`clankie.appender.append_once`), so a killed service loses nothing; a torn or garbled line is
skipped when read. The shard a line is about does not matter on one machine.
"""

from __future__ import annotations

from pathlib import Path

from clankie.appender import append_once
from clankie.jsonl import encode_line, read_lines
from clankie.paths import ensure_private_dir
from clankie.store.ports import Shard
from clankie.store.spend_ports import Record


class FileSpendLedger:
    """The day files in ``directory`` (created with the first line)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, day: str) -> Path:
        return self.directory / f"{day}.jsonl"

    def append(self, day: str, record: Record, shard: Shard | None) -> None:
        ensure_private_dir(self.directory)
        append_once(self.path(day), encode_line(record))

    def lines(self, day: str) -> list[Record]:
        return read_lines(self.path(day))

    def days(self) -> list[str]:
        try:
            return sorted(p.stem for p in self.directory.glob("*.jsonl"))
        except OSError:
            return []

    def delete(self, day: str) -> None:
        self.path(day).unlink()
