//! The shared `main` of every service binary: layered config (or `--dump-config`), a
//! multi-threaded runtime, and exit codes (2 for bad configuration, 1 for a failure), so each
//! binary's `main` is only its flags and its `serve` function.
//!
//! `--health-check` is the container probe (Docker `HEALTHCHECK`, a Kubernetes exec probe):
//! from the same config it calls `grpc.health.v1.Health/Check` on the process's own gRPC port
//! over loopback, over TLS when the port has it (Kubernetes' built-in gRPC probe cannot speak
//! TLS), and exits 0 only when the answer is `SERVING`.

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
    /// `--health-check`.
    pub health_check: bool,
}

/// A service config that names the gRPC port `--health-check` probes.
pub trait HealthPort {
    /// The server whose health is checked (`None`: the process serves no gRPC port as
    /// configured).
    fn health_port(&self) -> Option<&crate::server::ServerConfig>;
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
    C: DeserializeOwned + Serialize + Default + HealthPort,
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
    if args.health_check {
        return health_check(name, config.health_port());
    }
    let runtime = match runtime(name, tokio::runtime::Builder::new_multi_thread()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    match runtime.block_on(serve(config, env)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A runtime from `builder` with IO and time, or the exit code of a failure (said on stderr).
fn runtime(
    name: &str,
    mut builder: tokio::runtime::Builder,
) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        eprintln!("{name}: cannot start the runtime: {e}");
        ExitCode::FAILURE
    })
}

/// `--health-check`: see the module doc.
fn health_check(name: &str, server: Option<&crate::server::ServerConfig>) -> ExitCode {
    let Some(server) = server else {
        eprintln!("{name}: --health-check: this configuration serves no gRPC port to check");
        return ExitCode::from(2);
    };
    let runtime = match runtime(name, tokio::runtime::Builder::new_current_thread()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    match runtime.block_on(check_health(server)) {
        Ok(status) if status == "SERVING" => {
            eprintln!("{name}: SERVING");
            ExitCode::SUCCESS
        }
        Ok(status) => {
            eprintln!("{name}: {status}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{name}: health check failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The overall health status of the gRPC port `server` describes, asked over loopback.
pub async fn check_health(server: &crate::server::ServerConfig) -> Result<String, String> {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;

    let mut addr = server.listen_addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    let options = crate::client::ClientOptions::default();
    let channel = if server.tls.enabled() {
        let tls = crate::tls::ClientTls::unverified_for_probe().map_err(|e| e.to_string())?;
        options
            .endpoint(&format!("https://{addr}"))
            .map_err(|e| e.to_string())?
            .connect_with_connector_lazy(tls.connector())
    } else {
        options
            .channel_lazy(&format!("http://{addr}"))
            .map_err(|e| e.to_string())?
    };
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    request.set_timeout(std::time::Duration::from_secs(5));
    let mut client = HealthClient::new(channel);
    let call = client.check(request);
    let answer = tokio::time::timeout(std::time::Duration::from_secs(6), call)
        .await
        .map_err(|_| format!("no answer from {addr} within 6 s"))?
        .map_err(|s| format!("{addr}: {}: {}", s.code(), s.message()))?;
    let status = tonic_health::pb::health_check_response::ServingStatus::try_from(
        answer.into_inner().status,
    )
    .map(|s| s.as_str_name().to_owned())
    .unwrap_or_else(|_| "UNKNOWN".into());
    Ok(status)
}
