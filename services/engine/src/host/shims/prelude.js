// Installs the globals a babysitter process may touch: console (→ tracing), process (env from
// the run's config), the seeded Math.random, a minimal URL for file: URLs when QuickJS has none,
// and a seeded globalThis.crypto. A module (precompiled to bytecode with the engine) whose
// default export is `install(host, env)`.
export default function install(host, env) {
  'use strict';
  const define = (obj, key, value) =>
    Object.defineProperty(obj, key, { value, writable: true, configurable: true, enumerable: false });

  // --- randomness: one seeded PRNG per run, so replays see the same values
  define(Math, 'random', function random() {
    return host.random();
  });

  // --- Node-like byte arrays (Buffer is not available): a Uint8Array whose toString takes an
  // encoding
  host.toBytes = function toBytes(values) {
    const bytes = new Uint8Array(values);
    define(bytes, 'toString', function toString(encoding) {
      return host.encode(Array.from(this), encoding === undefined ? 'utf8' : String(encoding));
    });
    return bytes;
  };

  // --- console → tracing (target babysitter::process)
  const show = (value, nested) => {
    if (typeof value === 'string') return nested ? JSON.stringify(value) : value;
    if (value instanceof Error) return value.stack ? `${value.name}: ${value.message}\n${value.stack}` : String(value);
    if (typeof value === 'function') return `[Function ${value.name || '(anonymous)'}]`;
    if (typeof value === 'bigint') return `${value}n`;
    if (typeof value === 'symbol' || value === undefined) return String(value);
    if (value !== null && typeof value === 'object') {
      try {
        const json = JSON.stringify(value);
        if (json !== undefined) return json;
      } catch (_) {
        return '[object]';
      }
    }
    return String(value);
  };
  const format = (args) => args.map((a) => show(a, false)).join(' ');
  const console = {};
  for (const level of ['log', 'info', 'warn', 'error', 'debug', 'trace']) {
    define(console, level, (...args) => host.log(level, format(args)));
  }
  define(globalThis, 'console', console);

  // --- process
  const envCopy = Object.freeze(Object.assign({}, env));
  const proc = {
    env: envCopy,
    platform: 'linux',
    argv: [],
    execArgv: [],
    cwd: () => host.cwd,
    nextTick: (fn, ...args) => queueMicrotask(() => fn(...args)),
  };
  define(globalThis, 'process', proc);

  // --- URL (QuickJS has none): enough for file: URLs and import.meta.url arithmetic
  const removeDots = (pathname) => {
    const out = [];
    const segments = pathname.split('/');
    for (let i = 0; i < segments.length; i++) {
      const s = segments[i];
      const last = i === segments.length - 1;
      if (s === '.' || s === '%2e') {
        if (last) out.push('');
      } else if (s === '..' || s === '.%2e' || s === '%2e.' || s === '%2e%2e') {
        if (out.length > 1) out.pop();
        if (last) out.push('');
      } else {
        out.push(s);
      }
    }
    return out.join('/');
  };
  class URL {
    constructor(input, base) {
      input = String(input).trim();
      const scheme = /^([a-zA-Z][a-zA-Z0-9+.-]*):(.*)$/s.exec(input);
      if (scheme) {
        this._parse(scheme[1].toLowerCase() + ':', scheme[2]);
        return;
      }
      if (base === undefined) throw new TypeError(`Invalid URL: ${input}`);
      const b = base instanceof URL ? base : new URL(base);
      this.protocol = b.protocol;
      this._slashes = b._slashes;
      this.host = b.host;
      this.hostname = b.hostname;
      this.port = b.port;
      this.username = '';
      this.password = '';
      let rest = input;
      let hash = '';
      let search = b.search;
      const h = rest.indexOf('#');
      if (h >= 0) {
        hash = rest.slice(h);
        rest = rest.slice(0, h);
      }
      const q = rest.indexOf('?');
      if (q >= 0) {
        search = rest.slice(q);
        rest = rest.slice(0, q);
      }
      if (rest.startsWith('//')) {
        this._parse(b.protocol, input);
        return;
      }
      if (rest === '') {
        this.pathname = b.pathname;
      } else if (rest.startsWith('/')) {
        this.pathname = removeDots(rest);
        if (q < 0) search = '';
      } else {
        const dir = b.pathname.slice(0, b.pathname.lastIndexOf('/') + 1);
        this.pathname = removeDots(dir + rest);
        if (q < 0) search = '';
      }
      this.search = search === '?' ? '' : search;
      this.hash = hash === '#' ? '' : hash;
    }
    _parse(protocol, rest) {
      this.protocol = protocol;
      this.username = '';
      this.password = '';
      let hash = '';
      let search = '';
      const h = rest.indexOf('#');
      if (h >= 0) {
        hash = rest.slice(h);
        rest = rest.slice(0, h);
      }
      const q = rest.indexOf('?');
      if (q >= 0) {
        search = rest.slice(q);
        rest = rest.slice(0, q);
      }
      this._slashes = rest.startsWith('//');
      if (this._slashes) {
        const end = rest.indexOf('/', 2);
        const authority = end < 0 ? rest.slice(2) : rest.slice(2, end);
        rest = end < 0 ? '' : rest.slice(end);
        const at = authority.lastIndexOf('@');
        const hostPart = at >= 0 ? authority.slice(at + 1) : authority;
        this.host = hostPart.toLowerCase();
        const colon = this.host.lastIndexOf(':');
        this.hostname = colon > this.host.lastIndexOf(']') ? this.host.slice(0, colon) : this.host;
        this.port = colon > this.host.lastIndexOf(']') ? this.host.slice(colon + 1) : '';
        this.pathname = removeDots(rest || '/');
      } else {
        this.host = '';
        this.hostname = '';
        this.port = '';
        this.pathname = rest;
      }
      this.search = search === '?' ? '' : search;
      this.hash = hash === '#' ? '' : hash;
    }
    get origin() {
      return this.protocol === 'file:' || !this._slashes ? 'null' : `${this.protocol}//${this.host}`;
    }
    get href() {
      return `${this.protocol}${this._slashes ? '//' + this.host : ''}${this.pathname}${this.search}${this.hash}`;
    }
    toString() {
      return this.href;
    }
    toJSON() {
      return this.href;
    }
  }
  if (typeof globalThis.URL !== 'function') define(globalThis, 'URL', URL);
  host.URL = globalThis.URL;

  // --- Web crypto subset, seeded like Math.random
  if (typeof globalThis.crypto === 'undefined') {
    define(globalThis, 'crypto', {
      randomUUID: () => host.randomUUID(),
      getRandomValues(array) {
        if (!ArrayBuffer.isView(array)) throw new TypeError('getRandomValues expects a typed array');
        const view = new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
        view.set(host.randomBytes(view.length));
        return array;
      },
    });
  }
}
