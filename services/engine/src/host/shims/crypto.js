// node:crypto — hashing (sha1 / sha2 family, computed in Rust) and randomness drawn from the
// run's seeded PRNG, so replays are deterministic. md5 and hmac are not available.
const host = import.meta.host;

const HASHES = ['sha1', 'sha224', 'sha256', 'sha384', 'sha512'];

const bytesOf = (data, encoding) => {
  if (typeof data === 'string') {
    if (encoding === undefined || encoding === 'utf8' || encoding === 'utf-8') return data;
    return host.decode(data, String(encoding));
  }
  if (data instanceof ArrayBuffer) return Array.from(new Uint8Array(data));
  if (ArrayBuffer.isView(data)) return Array.from(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  const err = new TypeError('The "data" argument must be of type string or an instance of Uint8Array');
  err.code = 'ERR_INVALID_ARG_TYPE';
  throw err;
};

class Hash {
  constructor(algorithm, parts) {
    const name = String(algorithm).toLowerCase().replace(/^sha-/, 'sha');
    if (!HASHES.includes(name)) {
      const err = new Error(
        `Digest method not supported: '${algorithm}' is not available in the embedded engine (supported: ${HASHES.join(', ')})`,
      );
      err.code = 'ERR_CRYPTO_INVALID_DIGEST';
      throw err;
    }
    this._algorithm = name;
    this._parts = parts || [];
    this._done = false;
  }
  update(data, encoding) {
    if (this._done) throw Object.assign(new Error('Digest already called'), { code: 'ERR_CRYPTO_HASH_FINALIZED' });
    this._parts.push(bytesOf(data, encoding));
    return this;
  }
  digest(encoding) {
    if (this._done) throw Object.assign(new Error('Digest already called'), { code: 'ERR_CRYPTO_HASH_FINALIZED' });
    this._done = true;
    const bytes = host.hash(this._algorithm, this._parts);
    return encoding === undefined ? host.toBytes(bytes) : host.encode(bytes, String(encoding));
  }
  copy() {
    return new Hash(this._algorithm, this._parts.slice());
  }
}

export function createHash(algorithm) {
  return new Hash(algorithm);
}

export function getHashes() {
  return HASHES.slice();
}

export function randomUUID() {
  return host.randomUUID();
}

export function randomBytes(size, callback) {
  const bytes = host.toBytes(host.randomBytes(size));
  if (typeof callback === 'function') {
    queueMicrotask(() => callback(null, bytes));
    return undefined;
  }
  return bytes;
}

export function randomInt(min, max, callback) {
  if (max === undefined || typeof max === 'function') {
    callback = max;
    max = min;
    min = 0;
  }
  if (!Number.isSafeInteger(min) || !Number.isSafeInteger(max) || max <= min) {
    throw new RangeError('randomInt expects safe integers with min < max');
  }
  const value = min + Math.floor(host.random() * (max - min));
  if (typeof callback === 'function') {
    queueMicrotask(() => callback(null, value));
    return undefined;
  }
  return value;
}

export function getRandomValues(array) {
  return globalThis.crypto.getRandomValues(array);
}

export const webcrypto = globalThis.crypto;

export default { createHash, getHashes, randomUUID, randomBytes, randomInt, getRandomValues, webcrypto };
