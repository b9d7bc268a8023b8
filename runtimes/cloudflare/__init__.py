"""The Cloudflare host: the harness inside a Python Workers Durable Object.

Modules here are importable on CPython as well as in Pyodide: nothing imports ``js``,
``pyodide`` or ``workers`` at module top level, so the storage facade, the wake logic
and the front door's routing are tested on CPython with Python stand-ins of the
Durable Object API, and again in real Pyodide under Node (``tests/pyodide``).
"""
