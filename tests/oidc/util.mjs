// Small helpers shared by the tests/oidc scripts: command line, timeouts, stdout discipline,
// child processes that announce themselves with one JSON line.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

/**
 * Parses `--name value` / `--flag` arguments. `spec` maps an option name to
 * 'string' | 'list' (repeatable) | 'bool'. Unknown options are an error.
 */
export function parseArgs(spec, argv = process.argv.slice(2)) {
  const out = {};
  for (const [name, kind] of Object.entries(spec)) if (kind === 'list') out[name] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const name = arg.startsWith('--') ? arg.slice(2) : undefined;
    const kind = name && spec[name];
    if (!kind) throw new Error(`unknown argument: ${arg}`);
    if (kind === 'bool') {
      out[name] = true;
      continue;
    }
    if (i + 1 >= argv.length) throw new Error(`${arg} needs a value`);
    const value = argv[++i];
    if (kind === 'list') out[name].push(value);
    else out[name] = value;
  }
  return out;
}

/** Everything console.* prints goes to stderr: stdout carries only the JSON line(s). */
export function consoleToStderr() {
  for (const m of ['log', 'info', 'debug']) console[m] = (...a) => console.error(...a);
}

/** Writes one JSON line to stdout. */
export function printLine(obj) {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
}

/** Rejects after `ms` with "<what> timed out after <ms> ms". */
export function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** fetch with a timeout (AbortSignal), keeping any signal the caller passed. */
export function fetchWithTimeout(input, init = {}, ms = 10000) {
  const signals = [AbortSignal.timeout(ms)];
  if (init.signal) signals.push(init.signal);
  return fetch(input, { ...init, signal: AbortSignal.any(signals) });
}

/**
 * Exits when stdin reaches EOF (the parent died or closed the pipe) and on SIGTERM/SIGINT,
 * after `cleanup` (bounded to 2 s). `watchStdin` false: signals only.
 */
export function exitOnEofAndSignals(cleanup, { watchStdin = true } = {}) {
  let stopping = false;
  const stop = (why) => {
    if (stopping) return;
    stopping = true;
    process.stderr.write(`stopping (${why})\n`);
    const force = setTimeout(() => process.exit(0), 2000);
    force.unref();
    Promise.resolve()
      .then(cleanup)
      .catch(() => {})
      .finally(() => process.exit(0));
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  if (watchStdin) {
    process.stdin.on('end', () => stop('stdin EOF'));
    process.stdin.on('error', () => stop('stdin error'));
    process.stdin.resume();
  }
}

/**
 * Spawns `node script args` (the same Node binary as this process) with piped stdio and
 * resolves with { child, line } once it printed its first stdout line (parsed as JSON).
 * stderr is forwarded to `log` (a function) line by line.
 */
export async function spawnJsonLine(script, args, { timeoutMs = 20000, log, env } = {}) {
  const child = spawn(process.execPath, [script, ...args], { stdio: ['pipe', 'pipe', 'pipe'], env: env ?? process.env });
  const name = script.split('/').pop();
  const tail = []; // the last stderr lines, for the error message
  createInterface({ input: child.stderr }).on('line', (l) => {
    tail.push(l);
    if (tail.length > 8) tail.shift();
    log?.(`[${name}] ${l}`);
  });
  const lines = createInterface({ input: child.stdout });
  const first = new Promise((resolve, reject) => {
    lines.once('line', (l) => {
      try {
        resolve(JSON.parse(l));
      } catch (e) {
        reject(new Error(`${name} printed a non-JSON line: ${l}`));
      }
    });
    child.once('exit', (code, sig) =>
      // let the last stderr lines arrive first
      setTimeout(() => reject(new Error(`${name} exited (${code ?? sig}) before printing its JSON line:\n${tail.join('\n')}`)), 50),
    );
    child.once('error', reject);
  });
  try {
    const line = await withTimeout(first, timeoutMs, `${name} start`);
    return { child, line, lines };
  } catch (e) {
    child.kill('SIGTERM');
    throw e;
  }
}

/** Runs `node script args` to completion; resolves { code, stdout, stderr } (bounded). */
export function runNode(script, args, { timeoutMs = 30000 } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${script} ${args.join(' ')} timed out after ${timeoutMs} ms\n${stderr}`));
    }, timeoutMs);
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}
