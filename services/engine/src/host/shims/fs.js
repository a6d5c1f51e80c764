// node:fs — read-only, inside the process folder (relative paths resolve against it). Reads go
// to Rust, which checks the canonical path; every write throws EROFS. Without Buffer, reads
// without an encoding return a Uint8Array whose toString(encoding) decodes it.
const host = import.meta.host;

const toPath = (path) => {
  if (path !== null && typeof path === 'object' && path.protocol === 'file:' && typeof path.pathname === 'string') {
    return decodeURIComponent(path.pathname);
  }
  if (typeof path !== 'string') {
    const err = new TypeError('The "path" argument must be of type string or an instance of URL');
    err.code = 'ERR_INVALID_ARG_TYPE';
    throw err;
  }
  return path;
};

const encodingOf = (options) =>
  typeof options === 'string' ? options : (options && options.encoding) || undefined;

const readOnly = (syscall, path) => {
  const shown = typeof path === 'string' ? ` '${path}'` : '';
  const err = new Error(`EROFS: read-only file system, ${syscall}${shown} (the embedded engine's fs is read-only)`);
  err.code = 'EROFS';
  err.errno = -30;
  err.syscall = syscall;
  if (typeof path === 'string') err.path = path;
  return err;
};

class Stats {
  constructor(raw) {
    this._kind = raw.kind;
    this.size = raw.size;
    this.mtimeMs = raw.mtimeMs;
    this.mtime = new Date(raw.mtimeMs);
  }
  isFile() {
    return this._kind === 'file';
  }
  isDirectory() {
    return this._kind === 'dir';
  }
  isSymbolicLink() {
    return this._kind === 'symlink';
  }
}

class Dirent {
  constructor(raw, parentPath) {
    this.name = raw.name;
    this.parentPath = parentPath;
    this.path = parentPath;
    this._kind = raw.kind;
  }
  isFile() {
    return this._kind === 'file';
  }
  isDirectory() {
    return this._kind === 'dir';
  }
  isSymbolicLink() {
    return this._kind === 'symlink';
  }
}

export const constants = Object.freeze({ F_OK: 0, R_OK: 4, W_OK: 2, X_OK: 1 });

export function readFileSync(path, options) {
  const encoding = encodingOf(options);
  const read = host.fsRead(toPath(path), encoding === undefined ? null : String(encoding));
  return encoding === undefined ? host.toBytes(read) : read;
}

export function existsSync(path) {
  try {
    return host.fsExists(toPath(path));
  } catch (_) {
    return false;
  }
}

export function readdirSync(path, options) {
  const dir = toPath(path);
  const entries = host.fsReaddir(dir);
  if (options && typeof options === 'object' && options.withFileTypes) {
    return entries.map((e) => new Dirent(e, dir));
  }
  return entries.map((e) => e.name);
}

const stat = (follow) => (path, options) => {
  try {
    return new Stats(host.fsStat(toPath(path), follow));
  } catch (err) {
    if (options && options.throwIfNoEntry === false && err && err.code === 'ENOENT') return undefined;
    throw err;
  }
};
export const statSync = stat(true);
export const lstatSync = stat(false);

export function accessSync(path, mode) {
  if (mode !== undefined && (mode & constants.W_OK) !== 0) throw readOnly('access', toPath(path));
  host.fsStat(toPath(path), true);
}

const refuseSync = (syscall) =>
  function refused(path) {
    throw readOnly(syscall, path);
  };
export const writeFileSync = refuseSync('open');
export const appendFileSync = refuseSync('open');
export const mkdirSync = refuseSync('mkdir');
export const mkdtempSync = refuseSync('mkdtemp');
export const rmSync = refuseSync('rm');
export const rmdirSync = refuseSync('rmdir');
export const unlinkSync = refuseSync('unlink');
export const renameSync = refuseSync('rename');
export const copyFileSync = refuseSync('copyfile');
export const cpSync = refuseSync('cp');
export const symlinkSync = refuseSync('symlink');
export const linkSync = refuseSync('link');
export const chmodSync = refuseSync('chmod');
export const truncateSync = refuseSync('open');
export const utimesSync = refuseSync('utime');
export const openSync = refuseSync('open');
export const createWriteStream = refuseSync('open');

// callback API: the same operations, completed on the microtask queue
const lastCallback = (args) => (typeof args[args.length - 1] === 'function' ? args.pop() : undefined);
const callbackStyle = (fn) =>
  function callbackStyle(...args) {
    const callback = lastCallback(args);
    let result;
    let error = null;
    try {
      result = fn(...args);
    } catch (err) {
      error = err;
    }
    if (callback) queueMicrotask(() => (error ? callback(error) : callback(null, result)));
    else if (error) throw error;
  };
const refuseCallback = (syscall) =>
  function refused(path, ...rest) {
    const callback = lastCallback(rest);
    const err = readOnly(syscall, path);
    if (!callback) throw err;
    queueMicrotask(() => callback(err));
  };
export const readFile = callbackStyle(readFileSync);
export const readdir = callbackStyle(readdirSync);
export const access = callbackStyle(accessSync);
export const writeFile = refuseCallback('open');
export const appendFile = refuseCallback('open');
export const mkdir = refuseCallback('mkdir');
export const rm = refuseCallback('rm');
export const unlink = refuseCallback('unlink');
export const rename = refuseCallback('rename');
export const copyFile = refuseCallback('copyfile');

// promise API (also `node:fs/promises`)
const promised = (fn) =>
  async function promised(...args) {
    return fn(...args);
  };
const refusePromise = (syscall) =>
  async function refused(path) {
    throw readOnly(syscall, path);
  };
export const promises = {
  readFile: promised(readFileSync),
  readdir: promised(readdirSync),
  stat: promised(statSync),
  lstat: promised(lstatSync),
  access: promised(accessSync),
  writeFile: refusePromise('open'),
  appendFile: refusePromise('open'),
  mkdir: refusePromise('mkdir'),
  mkdtemp: refusePromise('mkdtemp'),
  rm: refusePromise('rm'),
  rmdir: refusePromise('rmdir'),
  unlink: refusePromise('unlink'),
  rename: refusePromise('rename'),
  copyFile: refusePromise('copyfile'),
  cp: refusePromise('cp'),
  symlink: refusePromise('symlink'),
  chmod: refusePromise('chmod'),
  truncate: refusePromise('open'),
  utimes: refusePromise('utime'),
  open: refusePromise('open'),
  constants,
};

const statCallback = callbackStyle(statSync);
const lstatCallback = callbackStyle(lstatSync);
export { statCallback as stat, lstatCallback as lstat };

export default {
  constants,
  readFileSync,
  existsSync,
  readdirSync,
  statSync,
  lstatSync,
  accessSync,
  writeFileSync,
  appendFileSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  rmdirSync,
  unlinkSync,
  renameSync,
  copyFileSync,
  cpSync,
  symlinkSync,
  linkSync,
  chmodSync,
  truncateSync,
  utimesSync,
  openSync,
  createWriteStream,
  readFile,
  readdir,
  stat: statCallback,
  lstat: lstatCallback,
  access,
  writeFile,
  appendFile,
  mkdir,
  rm,
  unlink,
  rename,
  copyFile,
  promises,
};
