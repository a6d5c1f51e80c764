// node:url — file URL conversions and the URL class (QuickJS's own, or the prelude's minimal one).
import { resolve } from 'node:path';

const host = import.meta.host;

export const URL = host.URL;

const invalid = (message, code) => {
  const err = new TypeError(message);
  err.code = code;
  return err;
};

export function fileURLToPath(input) {
  const url = typeof input === 'string' ? new URL(input) : input;
  if (url === null || typeof url !== 'object' || typeof url.href !== 'string') {
    throw invalid('The "path" argument must be of type string or an instance of URL', 'ERR_INVALID_ARG_TYPE');
  }
  if (url.protocol !== 'file:') throw invalid('The URL must be of scheme file', 'ERR_INVALID_URL_SCHEME');
  if (url.hostname !== '' && url.hostname !== 'localhost') {
    throw invalid('File URL host must be "localhost" or empty on linux', 'ERR_INVALID_FILE_URL_HOST');
  }
  if (/%2f/i.test(url.pathname)) {
    throw invalid('File URL path must not include encoded / characters', 'ERR_INVALID_FILE_URL_PATH');
  }
  return decodeURIComponent(url.pathname);
}

// percent-encodes everything outside the URL path character set (as import.meta.url does)
const encodePath = (path) =>
  Array.from(path, (ch) => (/[A-Za-z0-9\-._~!$&'()*+,;=:@/]/.test(ch) ? ch : encodeURIComponent(ch))).join('');

export function pathToFileURL(path) {
  if (typeof path !== 'string') {
    throw invalid('The "path" argument must be of type string', 'ERR_INVALID_ARG_TYPE');
  }
  let absolute = resolve(path);
  if (path.endsWith('/') && !absolute.endsWith('/')) absolute += '/';
  return new URL(`file://${encodePath(absolute)}`);
}

export default { URL, fileURLToPath, pathToFileURL };
