// A 2026-07-28-only MCP server written with the TypeScript SDK v2
// (@modelcontextprotocol/server, legacy: 'reject'): `initialize` is refused with the
// unsupported-protocol-version error. Tools that need the client answer `input_required`
// (multi round-trip: inputRequired.createMessage / elicit / listRoots) and complete on
// the retry.
//   node servers/stateless-only.mjs                       stdio
//   node servers/stateless-only.mjs --http 127.0.0.1:0    Streamable HTTP at /mcp
import { serve } from './v2-common.mjs';

serve({ name: 'interop-stateless-only', mrtr: true, legacy: false });
