// The npm packages used by tests/oidc/*.mjs. Those scripts live outside this folder, so a
// bare `import 'oidc-provider'` from there would not find tests/interop/node_modules;
// they import everything through this file instead (bare specifiers resolve from here,
// and always to the packages' ESM builds, so `instanceof` checks see one copy).
export { default as Provider, errors as oidcErrors } from 'oidc-provider';
export * as jose from 'jose';
export { default as express } from 'express';
export { z } from 'zod';

export { Client } from '@modelcontextprotocol/sdk/client/index.js';
export { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
export { UnauthorizedError, auth, discoverAuthorizationServerMetadata } from '@modelcontextprotocol/sdk/client/auth.js';
export { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
export { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
export { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
export { mcpAuthMetadataRouter, getOAuthProtectedResourceMetadataUrl } from '@modelcontextprotocol/sdk/server/auth/router.js';
export { InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js';

// puppeteer-core (tests/oidc/chromium_flow.mjs) is loaded on demand only, so that the other
// scripts do not load it with every import of this file.
export const loadPuppeteer = async () => (await import('puppeteer-core')).default;
