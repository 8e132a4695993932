// The TypeScript SDK v2 client package for tests/oidc/sdk_flow_v2.mjs, which lives outside
// this folder (a bare import from there would not find tests/interop/node_modules). Kept
// apart from oidc_deps.mjs so the v1 scripts never load the v2 SDK.
export { Client, StreamableHTTPClientTransport, UnauthorizedError } from '@modelcontextprotocol/client';
