// Quickstart: a small babysitter process that runs end to end with `babysitter run`, with no
// API keys — shell and node tasks, a parallel fan-out, a breakpoint and a short sleep.
import { defineTask } from '@a5c-ai/babysitter-sdk';

export const shell = defineTask('quickstart.shell', (args) => ({
  kind: 'shell',
  title: args.title,
  shell: { command: args.command, expectedExitCode: 0, timeout: 30000 },
}));

export const count = defineTask('quickstart.count', (args, taskCtx) => ({
  kind: 'node',
  title: `count words in ${args.file}`,
  node: { entry: 'examples/quickstart/scripts/count.mjs', args: [args.file] },
  io: { outputJsonPath: `tasks/${taskCtx.effectId}/output.json` },
}));

export async function process(inputs, ctx) {
  ctx.log('quickstart', `greeting ${inputs.name}`);
  const hello = await ctx.task(shell, { title: 'say hello', command: `echo "hello, ${inputs.name}"` });

  // A parallel fan-out: the three counts are requested in one iteration and run concurrently.
  const counts = await ctx.parallel.map(inputs.files, (file) => ctx.task(count, { file }, { label: `count-${file}` }));

  const approval = await ctx.breakpoint(
    { question: `Publish a report of ${counts.length} files?`, options: ['Approve', 'Reject'] },
    { label: 'Publish report' },
  );

  // A short durable timer (the run can be stopped and resumed across it).
  await ctx.sleepUntil(Date.now() + 1500, { label: 'cool-down' });

  const total = counts.reduce((sum, c) => sum + c.words, 0);
  const report = await ctx.task(shell, { title: 'write report', command: `echo "total words: ${total}"` });
  return {
    greeting: hello.stdout.trim(),
    words: Object.fromEntries(counts.map((c) => [c.file, c.words])),
    published: approval.approved,
    report: report.stdout.trim(),
  };
}
