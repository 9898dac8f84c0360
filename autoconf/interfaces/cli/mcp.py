"""``autoconf-gpu mcp``: the MCP server on stdio (tools estimate, recommend, check, catalog; docs/mcp.md)."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    subparsers.add_parser("mcp", help="serve the estimate, recommend, check and catalog tools over MCP (stdio)")


def run(args: argparse.Namespace) -> int:
    from autoconf.interfaces.agents.server import serve_stdio

    serve_stdio()
    return 0
