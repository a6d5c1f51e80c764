// The embedded `@a5c-ai/babysitter-sdk`: what process files import. Everything comes from the
// engine runtime (runtime.js), so the registry is shared by every module of the run.
const sdk = globalThis.__bs_engine.sdk;
export const defineTask = sdk.defineTask;
export const globalTaskRegistry = sdk.globalTaskRegistry;
export const DuplicateTaskIdError = sdk.DuplicateTaskIdError;
export const InvalidTaskDefinitionError = sdk.InvalidTaskDefinitionError;
export const EffectCancelledError = sdk.EffectCancelledError;
export const RunHaltedError = sdk.RunHaltedError;
export const InvalidSleepTargetError = sdk.InvalidSleepTargetError;
export const RunFailedError = sdk.RunFailedError;
export default { defineTask, globalTaskRegistry };
