"""The captain: every Discord text room is a durable lane (ADR 0118); see ``docs/captain.md``."""
