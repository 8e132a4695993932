//! Gantry: an MCP gateway.
