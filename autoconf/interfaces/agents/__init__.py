"""An MCP server for agents (``autoconf-gpu mcp``, stdio): the estimate, recommend, check and catalog tools,
taking the REST API's flat body (from_config included) and answering as the REST API and the CLI do.
"""
