// node:fs/promises — the promise half of the read-only fs shim.
import { promises } from 'node:fs';

export const {
  readFile,
  readdir,
  stat,
  lstat,
  access,
  writeFile,
  appendFile,
  mkdir,
  mkdtemp,
  rm,
  rmdir,
  unlink,
  rename,
  copyFile,
  cp,
  symlink,
  chmod,
  truncate,
  utimes,
  open,
  constants,
} = promises;

export default promises;
