//! The shared `main` of every service binary: layered config (or `--dump-config`), a
//! multi-threaded runtime, and exit codes (2 for bad configuration, 1 for a failure), so each
//! binary's `main` is only its flags and its `serve` function.

use std::fmt::Display;
use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::{ConfigLoader, dump_config};
use crate::env::EnvMap;

/// The flags every service binary shares.
#[derive(Debug, Clone, Default)]
pub struct CommonArgs {
    /// `--config FILE`.
    pub config: Option<PathBuf>,
    /// `--set KEY=VALUE`, repeatable.
    pub set: Vec<String>,
    /// Dedicated flags as a JSON object of config keys (`null` = not given).
    pub flags: serde_json::Value,
    /// `--dump-config`.
    pub dump_config: bool,
}

/// Loads `C` (env prefix `env_prefix`), prints it and exits on `--dump-config`, else runs
/// `serve(config, env)` on a fresh runtime. Messages are prefixed with `name`.
pub fn service_main<C, F, Fut, E>(
    name: &str,
    env_prefix: &str,
    args: CommonArgs,
    serve: F,
) -> ExitCode
where
    C: DeserializeOwned + Serialize + Default,
    F: FnOnce(C, EnvMap) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    let env = EnvMap::from_process();
    let config: C = match ConfigLoader::new(env_prefix)
        .file(args.config)
        .env(env.clone())
        .overrides(args.set)
        .json_override(args.flags)
        .load()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{name}: invalid configuration: {e}");
            return ExitCode::from(2);
        }
    };
    if args.dump_config {
        return match dump_config(&config, env_prefix) {
            Ok(text) => {
                #[allow(clippy::print_stdout)]
                {
                    print!("{text}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{name}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{name}: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(config, env)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e:#}");
            ExitCode::FAILURE
        }
    }
}
