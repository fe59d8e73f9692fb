"""Clankie's shared kernel: settings, paths, wire protocol, framing, IPC, clock, errors, logs."""

__version__ = "0.1.0"
