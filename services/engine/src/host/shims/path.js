// node:path — the POSIX flavour of Node's path module (processes only run on Linux); `resolve`
// and `relative` resolve against the process folder, which is the embedded `process.cwd()`.
const host = import.meta.host;

const check = (value, name) => {
  if (typeof value !== 'string') {
    const err = new TypeError(`The "${name}" argument must be of type string. Received ${typeof value}`);
    err.code = 'ERR_INVALID_ARG_TYPE';
    throw err;
  }
};

// drops '' and '.' segments and folds '..'; keeps leading '..' when allowAboveRoot
const normalizeString = (path, allowAboveRoot) => {
  const out = [];
  for (const segment of path.split('/')) {
    if (segment === '' || segment === '.') continue;
    if (segment === '..') {
      if (out.length > 0 && out[out.length - 1] !== '..') out.pop();
      else if (allowAboveRoot) out.push('..');
    } else {
      out.push(segment);
    }
  }
  return out.join('/');
};

export const sep = '/';
export const delimiter = ':';

export function isAbsolute(path) {
  check(path, 'path');
  return path.length > 0 && path[0] === '/';
}

export function normalize(path) {
  check(path, 'path');
  if (path.length === 0) return '.';
  const absolute = path[0] === '/';
  const trailing = path[path.length - 1] === '/';
  let out = normalizeString(path, !absolute);
  if (out.length === 0) {
    if (absolute) return '/';
    return trailing ? './' : '.';
  }
  if (trailing) out += '/';
  return absolute ? `/${out}` : out;
}

export function join(...parts) {
  for (const part of parts) check(part, 'path');
  const joined = parts.filter((p) => p.length > 0).join('/');
  return joined.length === 0 ? '.' : normalize(joined);
}

export function resolve(...parts) {
  let resolved = '';
  let absolute = false;
  for (let i = parts.length - 1; i >= -1 && !absolute; i--) {
    const part = i >= 0 ? parts[i] : host.cwd;
    check(part, 'paths[' + i + ']');
    if (part.length === 0) continue;
    resolved = `${part}/${resolved}`;
    absolute = part[0] === '/';
  }
  const out = normalizeString(resolved, !absolute);
  if (absolute) return `/${out}`;
  return out.length > 0 ? out : '.';
}

export function relative(from, to) {
  check(from, 'from');
  check(to, 'to');
  if (from === to) return '';
  const a = resolve(from).split('/').filter(Boolean);
  const b = resolve(to).split('/').filter(Boolean);
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return [...a.slice(i).map(() => '..'), ...b.slice(i)].join('/');
}

export function dirname(path) {
  check(path, 'path');
  if (path.length === 0) return '.';
  const hasRoot = path[0] === '/';
  let end = -1;
  let matchedSlash = true;
  for (let i = path.length - 1; i >= 1; --i) {
    if (path[i] === '/') {
      if (!matchedSlash) {
        end = i;
        break;
      }
    } else {
      matchedSlash = false;
    }
  }
  if (end === -1) return hasRoot ? '/' : '.';
  if (hasRoot && end === 1) return '//';
  return path.slice(0, end);
}

export function basename(path, suffix) {
  check(path, 'path');
  if (suffix !== undefined) check(suffix, 'suffix');
  let start = 0;
  let end = -1;
  let matchedSlash = true;
  if (suffix !== undefined && suffix.length > 0 && suffix.length <= path.length) {
    if (suffix === path) return '';
    let extIdx = suffix.length - 1;
    let firstNonSlashEnd = -1;
    for (let i = path.length - 1; i >= 0; --i) {
      const code = path.charCodeAt(i);
      if (code === 47) {
        if (!matchedSlash) {
          start = i + 1;
          break;
        }
      } else {
        if (firstNonSlashEnd === -1) {
          matchedSlash = false;
          firstNonSlashEnd = i + 1;
        }
        if (extIdx >= 0) {
          if (code === suffix.charCodeAt(extIdx)) {
            if (--extIdx === -1) end = i;
          } else {
            extIdx = -1;
            end = firstNonSlashEnd;
          }
        }
      }
    }
    if (start === end) end = firstNonSlashEnd;
    else if (end === -1) end = path.length;
    return path.slice(start, end);
  }
  for (let i = path.length - 1; i >= 0; --i) {
    if (path.charCodeAt(i) === 47) {
      if (!matchedSlash) {
        start = i + 1;
        break;
      }
    } else if (end === -1) {
      matchedSlash = false;
      end = i + 1;
    }
  }
  return end === -1 ? '' : path.slice(start, end);
}

export function extname(path) {
  check(path, 'path');
  let startDot = -1;
  let startPart = 0;
  let end = -1;
  let matchedSlash = true;
  let preDotState = 0;
  for (let i = path.length - 1; i >= 0; --i) {
    const code = path.charCodeAt(i);
    if (code === 47) {
      if (!matchedSlash) {
        startPart = i + 1;
        break;
      }
      continue;
    }
    if (end === -1) {
      matchedSlash = false;
      end = i + 1;
    }
    if (code === 46) {
      if (startDot === -1) startDot = i;
      else if (preDotState !== 1) preDotState = 1;
    } else if (startDot !== -1) {
      preDotState = -1;
    }
  }
  if (
    startDot === -1 ||
    end === -1 ||
    preDotState === 0 ||
    (preDotState === 1 && startDot === end - 1 && startDot === startPart + 1)
  ) {
    return '';
  }
  return path.slice(startDot, end);
}

export function parse(path) {
  check(path, 'path');
  const root = path[0] === '/' ? '/' : '';
  const base = basename(path);
  const ext = extname(path);
  let dir = dirname(path);
  if (!path.includes('/')) dir = '';
  return { root, dir, base, ext, name: ext ? base.slice(0, base.length - ext.length) : base };
}

export function format(parts) {
  const dir = parts.dir || parts.root || '';
  const base = parts.base || `${parts.name || ''}${parts.ext || ''}`;
  if (!dir) return base;
  return dir === parts.root ? `${dir}${base}` : `${dir}/${base}`;
}

export function toNamespacedPath(path) {
  return path;
}

const path = {
  sep,
  delimiter,
  isAbsolute,
  normalize,
  join,
  resolve,
  relative,
  dirname,
  basename,
  extname,
  parse,
  format,
  toNamespacedPath,
};
path.posix = path;
export const posix = path;
export default path;
