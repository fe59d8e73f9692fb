"""The browser host: governed screenshots of public web pages (``python -m hosts.browser``).

Only this package imports Playwright. See ``docs/hosts.md``.
"""
