// Counts the words of a file and writes the result where the task's io says (and to stdout).
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';

const file = process.argv[2];
const words = readFileSync(file, 'utf8').split(/\s+/).filter(Boolean).length;
const result = { file, words };
const runDir = process.env.BABYSITTER_RUN_DIR;
const effectId = process.env.BABYSITTER_EFFECT_ID;
if (runDir && effectId) {
  const out = join(runDir, 'tasks', effectId, 'output.json');
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, JSON.stringify(result));
}
console.log(JSON.stringify(result));
