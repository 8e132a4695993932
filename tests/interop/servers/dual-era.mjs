// A dual-era MCP server written with the TypeScript SDK v2 (@modelcontextprotocol/server):
// the session era (initialize, 2025-11-25 and older) and the stateless era (2026-07-28)
// on one endpoint, from one factory. Its tools that need the client use the session-era
// push APIs (requestSampling, elicitInput, listRoots): they work for session-era callers
// and fail (tool error) for stateless-era ones, as in most servers that gained 2026
// support by upgrading the SDK.
//   node servers/dual-era.mjs                       stdio (serveStdio: the first message picks the era)
//   node servers/dual-era.mjs --http 127.0.0.1:0    Streamable HTTP at /mcp
import { serve } from './v2-common.mjs';

serve({ name: 'interop-dual-era', mrtr: false, legacy: true });
