"""The tldraw host: described diagrams in, PNG + SVG + ``.tldr`` out.

The pure engine lives in :mod:`hosts.tldraw.engine`; this package init stays
empty so importing the host process does not pay for the renderer twice.
"""
