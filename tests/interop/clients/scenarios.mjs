// The interop scenarios, shared by the two TypeScript clients (ts-v1.mjs, ts-v2.mjs;
// py_client.py implements the same list). Each SDK supplies an adapter:
//
//   adapter.open({ handlers }) -> conn   (connect + initialize / discover)
//   handlers = { sampling(params) -> CreateMessageResult, elicitation(params) -> ElicitResult,
//                roots() -> { roots }, log(params), updated(uri) }
//   conn = { era, version,
//            listTools() -> [name], callTool(name, args, { onprogress, logLevel }) -> CallToolResult,
//            listResources() -> [uri], readResource(uri) -> ReadResourceResult,
//            setLogLevel(level), subscribe(uri) -> { close() }, close() }
//
// Output: one JSON object per check on stdout. Every wait is bounded.
import { randomBytes } from 'node:crypto';

export const CALL_TIMEOUT_MS = Number(process.env.INTEROP_CALL_TIMEOUT_MS ?? 10000);
export const NOTIFY_WAIT_MS = Number(process.env.INTEROP_NOTIFY_WAIT_MS ?? 3000);
export const UPDATE_WAIT_MS = Number(process.env.INTEROP_UPDATE_WAIT_MS ?? 3000);
const SCENARIO_TIMEOUT_MS = 20000;

export const SCENARIOS = ['connect', 'sampling', 'elicitation', 'roots', 'progress', 'logging', 'resources', 'concurrent-duplicate-ids'];

/** Parses the common command line. */
export function parseClientArgs(argv = process.argv.slice(2)) {
  const o = { url: null, transport: 'streamable', stdio: null, era: 'session', scenarios: null };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--url') o.url = argv[++i];
    else if (a === '--transport') o.transport = argv[++i];
    else if (a === '--stdio') o.stdio = argv[++i];
    else if (a === '--era') o.era = argv[++i];
    else if (a === '--scenarios') o.scenarios = argv[++i].split(',');
    else throw new Error(`unknown argument: ${a}`);
  }
  if (!o.url === !o.stdio) throw new Error('give exactly one of --url URL or --stdio "<command line>"');
  if (!['streamable', 'sse'].includes(o.transport)) throw new Error(`--transport must be streamable or sse`);
  return o;
}

/** Splits a command line like a shell would (quotes, backslashes), without running a shell. */
export function splitCommand(s) {
  const out = [];
  let cur = '';
  let has = false;
  let q = null;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (q) {
      if (c === q) q = null;
      else if (c === '\\' && q === '"' && i + 1 < s.length) cur += s[++i];
      else cur += c;
    } else if (c === '"' || c === "'") {
      q = c;
      has = true;
    } else if (c === '\\' && i + 1 < s.length) {
      cur += s[++i];
      has = true;
    } else if (/\s/.test(c)) {
      if (has || cur) out.push(cur);
      cur = '';
      has = false;
    } else cur += c;
  }
  if (has || cur) out.push(cur);
  return out;
}

export function withTimeout(promise, ms, what) {
  let t;
  return Promise.race([
    promise,
    new Promise((_, rej) => {
      t = setTimeout(() => rej(new Error(`timed out after ${ms} ms: ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(t));
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Resolves when pred() is true (checked every 20 ms), or false after ms. */
export async function waitFor(pred, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (pred()) return true;
    await sleep(20);
  }
  return pred();
}

export function toolText(r) {
  return (r?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

function errMsg(e) {
  const s = e?.message ?? String(e);
  const code = e?.code !== undefined && !s.includes(String(e.code)) ? ` (code ${e.code})` : '';
  return (s + code).slice(0, 500);
}

const short = (v) => {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return s === undefined ? 'undefined' : s.length > 300 ? `${s.slice(0, 300)}…` : s;
};

/** Fresh per-connection handler state. */
function makeState() {
  const st = {
    sampling: [],
    elicitation: [],
    rootsCalls: 0,
    roots: [{ uri: `file:///interop-${randomBytes(4).toString('hex')}`, name: 'r' }],
    logs: [],
    updated: [],
  };
  st.handlers = {
    sampling: async (params) => {
      const m = params?.messages?.at?.(-1);
      const c = Array.isArray(m?.content) ? m.content[0] : m?.content;
      const prompt = c?.text;
      st.sampling.push({ prompt, maxTokens: params?.maxTokens });
      return { role: 'assistant', content: { type: 'text', text: `sampled:${prompt}` }, model: 'interop-model', stopReason: 'endTurn' };
    },
    elicitation: async (params) => {
      st.elicitation.push({ message: params?.message, schema: params?.requestedSchema });
      return { action: 'accept', content: { name: 'x' } };
    },
    roots: async () => {
      st.rootsCalls++;
      return { roots: st.roots };
    },
    log: (params) => st.logs.push(params),
    updated: (uri) => st.updated.push(uri),
  };
  return st;
}

/**
 * Runs the scenarios against the target; prints the checks. `meta` = { client, era }.
 */
export async function runScenarios(adapter, opts, meta) {
  const only = opts.scenarios ? new Set(opts.scenarios) : null;
  const emit = (scenario, check, status, detail = '') =>
    process.stdout.write(`${JSON.stringify({ ...meta, scenario, check, status, detail: short(detail) })}\n`);

  const st = makeState();
  let conn = null;
  let tools = [];
  let connectError = null;
  let toolsError = null;
  try {
    conn = await withTimeout(adapter.open({ handlers: st.handlers, state: st }), SCENARIO_TIMEOUT_MS, 'connect');
  } catch (e) {
    connectError = errMsg(e);
  }
  if (!only || only.has('connect')) {
    if (conn) emit('connect', 'connected', 'pass', `era=${conn.era} version=${conn.version}`);
    else emit('connect', 'connected', 'fail', connectError);
  }
  if (conn) {
    try {
      tools = await withTimeout(conn.listTools(), CALL_TIMEOUT_MS, 'tools/list');
      if (!only || only.has('connect')) {
        emit('connect', 'tools listed', tools.length > 0 ? 'pass' : 'fail', tools.join(','));
      }
    } catch (e) {
      toolsError = errMsg(e);
      if (!only || only.has('connect')) emit('connect', 'tools listed', 'fail', toolsError);
    }
  }

  const has = (t) => tools.includes(t);
  const ctx = { conn, st, has, emit, adapter, opts };
  for (const name of SCENARIOS.slice(1)) {
    if (only && !only.has(name)) continue;
    const fn = SCENARIO_FNS[name];
    const checks = fn.checks;
    if (!conn) {
      for (const c of checks) emit(name, c, 'fail', `not connected: ${connectError}`);
      continue;
    }
    if (toolsError) {
      for (const c of checks) emit(name, c, 'fail', `tools/list failed: ${toolsError}`);
      continue;
    }
    if (fn.needs && !fn.needs.every(has)) {
      for (const c of checks) emit(name, c, 'skip', `server lacks tool(s) ${fn.needs.filter((t) => !has(t)).join(',')}`);
      continue;
    }
    const done = new Set();
    let over = false; // a scenario that timed out may still run: it reports nothing more
    const scoped = { ...ctx, emit: (check, status, detail) => {
      if (over || done.has(check)) return;
      done.add(check);
      emit(name, check, status, detail);
    } };
    try {
      await withTimeout(fn(scoped), SCENARIO_TIMEOUT_MS, name);
    } catch (e) {
      for (const c of checks) if (!done.has(c)) emit(name, c, 'fail', `scenario threw: ${errMsg(e)}`);
      done.add('*');
    }
    over = true;
    for (const c of checks) if (!done.has(c) && !done.has('*')) emit(name, c, 'fail', 'check not reached');
  }
  if (conn) await withTimeout(conn.close(), 5000, 'close').catch(() => {});
}

async function call(conn, name, args, extra = {}) {
  return withTimeout(conn.callTool(name, args, extra), CALL_TIMEOUT_MS, `tools/call ${name}`);
}

async function sampling({ conn, st, emit }) {
  let r;
  let err = null;
  try {
    r = await call(conn, 'sample', { prompt: 'hi' });
  } catch (e) {
    err = errMsg(e);
  }
  const got = st.sampling.find((s) => s.prompt === 'hi');
  emit('handler called', got ? 'pass' : 'fail', got ? `prompt=${got.prompt} maxTokens=${got.maxTokens}` : `handler calls: ${JSON.stringify(st.sampling)}; ${err ?? toolText(r)}`);
  const t = toolText(r);
  emit('result', !err && !r.isError && t.includes('sampled:hi') ? 'pass' : 'fail', err ?? `${r.isError ? 'isError: ' : ''}${t}`);
}
sampling.needs = ['sample'];
sampling.checks = ['handler called', 'result'];

async function elicitation({ conn, st, emit }) {
  let r;
  let err = null;
  try {
    r = await call(conn, 'elicit', { message: 'who?' });
  } catch (e) {
    err = errMsg(e);
  }
  const got = st.elicitation.find((s) => s.message === 'who?');
  emit('handler called', got ? 'pass' : 'fail', got ? `message=${got.message}` : `handler calls: ${JSON.stringify(st.elicitation)}; ${err ?? toolText(r)}`);
  const t = toolText(r);
  const ok = !err && !r.isError && t.includes('action=accept') && /"name":\s*"x"/.test(t);
  emit('result', ok ? 'pass' : 'fail', err ?? `${r.isError ? 'isError: ' : ''}${t}`);
}
elicitation.needs = ['elicit'];
elicitation.checks = ['handler called', 'result'];

async function roots({ conn, st, emit }) {
  let r;
  let err = null;
  try {
    r = await call(conn, 'roots', {});
  } catch (e) {
    err = errMsg(e);
  }
  emit('handler called', st.rootsCalls > 0 ? 'pass' : 'fail', `calls=${st.rootsCalls}${st.rootsCalls ? '' : `; ${err ?? toolText(r)}`}`);
  const t = toolText(r);
  const ok = !err && !r.isError && t.includes(st.roots[0].uri);
  emit('result', ok ? 'pass' : 'fail', err ?? `${r.isError ? 'isError: ' : ''}${t}`);
}
roots.needs = ['roots'];
roots.checks = ['handler called', 'result'];

async function progress({ conn, emit }) {
  const seen = [];
  const wireFrom = conn.wire?.length ?? 0;
  let r;
  let err = null;
  try {
    r = await call(conn, 'progress', { steps: 3 }, { onprogress: (p) => seen.push(p.progress) });
  } catch (e) {
    err = errMsg(e);
  }
  await waitFor(() => seen.length >= 3, 300);
  const ok = (v) => v.length === 3 && v.every((x, i) => i === 0 || x > v[i - 1]);
  if (ok(seen)) {
    emit('notifications', 'pass', `progress values: ${JSON.stringify(seen)}`);
  } else {
    // What the transport delivered for the call (all before its response): the SDK may
    // drop a notification that arrives in the same read as the response.
    const onWire = (conn.wire ?? []).slice(wireFrom).filter((m) => m.method === 'notifications/progress').map((m) => m.params?.progress);
    emit(
      'notifications',
      ok(onWire) ? 'pass' : 'fail',
      `progress values: ${JSON.stringify(seen)}${conn.wire ? `; delivered by the transport: ${JSON.stringify(onWire)}` : ''}${ok(onWire) ? ' (the SDK missed some: notification read with the response)' : ''}`,
    );
  }
  const t = toolText(r);
  emit('result', !err && !r.isError && t === 'done 3' ? 'pass' : 'fail', err ?? t);
}
progress.needs = ['progress'];
progress.checks = ['notifications', 'result'];

async function logging({ conn, st, emit }) {
  const tag = randomBytes(3).toString('hex');
  let logLevel;
  if (conn.era === 'session') {
    try {
      await withTimeout(conn.setLogLevel('info'), CALL_TIMEOUT_MS, 'logging/setLevel');
      emit('set level', 'pass', 'logging/setLevel info');
    } catch (e) {
      emit('set level', 'fail', errMsg(e));
    }
  } else {
    logLevel = 'info';
    emit('set level', 'pass', 'per-request _meta logLevel info');
  }
  const dataOf = (p) => (typeof p?.data === 'string' ? p.data : JSON.stringify(p?.data));
  // Log messages seen by the SDK's handler, or (see progress) delivered by the transport.
  const seenLog = (needle) =>
    st.logs.find((p) => dataOf(p).includes(needle)) ??
    (conn.wire ?? []).find((m) => m.method === 'notifications/message' && dataOf(m.params).includes(needle))?.params;
  const r1 = await call(conn, 'log', { level: 'warning', message: `warn-${tag}` }, { logLevel });
  const got = await waitFor(() => seenLog(`warn-${tag}`), NOTIFY_WAIT_MS);
  const inSdk = st.logs.some((p) => dataOf(p).includes(`warn-${tag}`));
  emit('warning delivered', got ? 'pass' : 'fail', got ? `level=${seenLog(`warn-${tag}`).level}${inSdk ? '' : ' (delivered by the transport; the SDK handler missed it)'}` : `tool: ${toolText(r1)}; logs seen: ${JSON.stringify(st.logs)}`);
  const r2 = await call(conn, 'log', { level: 'debug', message: `debug-${tag}` }, { logLevel });
  // Anything sent for that call has arrived by now on stdio and on the call's stream;
  // a short grace period covers messages that travel on another stream.
  await sleep(got ? 300 : 800);
  const leaked = seenLog(`debug-${tag}`);
  emit('debug filtered', !leaked && toolText(r2) === 'logged' ? 'pass' : 'fail', leaked ? `debug message delivered: ${JSON.stringify(leaked)}` : toolText(r2));
}
logging.needs = ['log'];
logging.checks = ['set level', 'warning delivered', 'debug filtered'];

async function resources({ conn, st, emit }) {
  let uris = [];
  try {
    uris = await withTimeout(conn.listResources(), CALL_TIMEOUT_MS, 'resources/list');
    emit('list', uris.includes('test://static') ? 'pass' : 'fail', uris.join(','));
  } catch (e) {
    emit('list', 'fail', errMsg(e));
  }
  try {
    const r = await withTimeout(conn.readResource('test://static'), CALL_TIMEOUT_MS, 'resources/read');
    const t = r?.contents?.[0]?.text;
    emit('read', t === 'static text' ? 'pass' : 'fail', short(t ?? r));
  } catch (e) {
    emit('read', 'fail', errMsg(e));
  }
  let sub;
  try {
    sub = await withTimeout(conn.subscribe('test://watched'), CALL_TIMEOUT_MS, 'subscribe');
    emit('subscribe', 'pass', conn.era === 'session' ? 'resources/subscribe' : 'subscriptions/listen acknowledged');
  } catch (e) {
    emit('subscribe', 'fail', errMsg(e));
    emit('updated', 'fail', 'not subscribed');
    return;
  }
  try {
    const before = st.updated.length;
    const r = await call(conn, 'touch', { uri: 'test://watched' });
    const got = await waitFor(() => st.updated.slice(before).includes('test://watched'), UPDATE_WAIT_MS);
    emit('updated', got ? 'pass' : 'fail', got ? 'notifications/resources/updated test://watched' : `no update within ${UPDATE_WAIT_MS / 1000} s (touch: ${toolText(r)}; updates seen: ${JSON.stringify(st.updated)})`);
  } finally {
    await withTimeout(Promise.resolve(sub?.close?.()), 3000, 'unsubscribe').catch(() => {});
  }
}
resources.needs = ['touch'];
resources.checks = ['list', 'read', 'subscribe', 'updated'];

async function concurrent({ adapter, emit, has }) {
  const N = 3;
  const PER = 10;
  const conns = await Promise.all(
    Array.from({ length: N }, () => withTimeout(adapter.open({ handlers: makeState().handlers }), CALL_TIMEOUT_MS, 'connect')),
  );
  try {
    const calls = [];
    for (let i = 0; i < N; i++) {
      for (let j = 0; j < PER; j++) {
        const useSlow = has('slow') && j % 2 === 1;
        const ms = 50 + i * PER + j;
        const [tool, args, want] = useSlow ? ['slow', { ms }, `slept ${ms}`] : ['echo', { message: `c${i}-m${j}` }, `c${i}-m${j}`];
        calls.push(
          call(conns[i], tool, args).then(
            (r) => ({ want, got: toolText(r) }),
            (e) => ({ want, got: `error: ${errMsg(e)}` }),
          ),
        );
      }
    }
    const res = await Promise.all(calls);
    const bad = res.filter((x) => x.got !== x.want);
    emit('answers match', bad.length === 0 ? 'pass' : 'fail', bad.length ? `${bad.length}/${res.length} wrong, e.g. ${JSON.stringify(bad.slice(0, 3))}` : `${res.length} calls over ${N} connections`);
  } finally {
    await Promise.all(conns.map((c) => withTimeout(c.close(), 5000, 'close').catch(() => {})));
  }
}
concurrent.needs = ['echo'];
concurrent.checks = ['answers match'];

const SCENARIO_FNS = {
  sampling,
  elicitation,
  roots,
  progress,
  logging,
  resources,
  'concurrent-duplicate-ids': concurrent,
};

/** Main wrapper: runs, and exits 0 unless the client could not run at all. */
export async function main(makeAdapter, client) {
  let opts;
  try {
    opts = parseClientArgs();
  } catch (e) {
    process.stderr.write(`${e.message}\n`);
    process.exit(2);
  }
  const adapter = makeAdapter(opts);
  await runScenarios(adapter, opts, { client, era: opts.era });
  // SDK transports (stdio children, SSE streams) may keep the loop alive: exit once
  // stdout is flushed.
  process.stdout.write('', () => process.exit(0));
}
