//! babysitter-common: the plumbing every babysitter-rs gRPC service shares, and nothing else.
//!
//! It owns the one [`server::ServerBuilder`] (tonic health and reflection, trace context, bearer
//! auth, request deadline and concurrency limit, graceful shutdown that drops readiness before
//! draining), process telemetry ([`telemetry::init_telemetry`]: log filter and format, OTLP
//! export only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, W3C propagation on every hop), layered
//! typed configuration ([`config::ConfigLoader`]: defaults → TOML → `<PREFIX>__…` env →
//! overrides), where a project and a user keep babysitter's files ([`project`]), the error → `tonic::Status` conventions ([`error`]) and validated ids ([`ids`]).
//!
//! Boundaries: it depends on no service; of `babysitter-proto` it uses only the client transport
//! settings ([`client::ClientOptions`]), which [`client`] wraps with auth and trace context.
//! Service crates depend on it. It never reads the process environment itself except in [`env::EnvMap::from_process`],
//! which `main` calls once. Domain logic and each service's error mapping live in the service
//! crates, which use [`error::status`] in their own exhaustive `From<DomainError> for Status`.
#![forbid(unsafe_code)]

pub mod agent_session;
pub mod auth;
pub mod client;
pub mod config;
pub mod env;
pub mod error;
pub mod ids;
pub mod kinds;
pub mod main_support;
pub mod metrics;
pub mod project;
pub mod server;
pub mod telemetry;
pub mod tls;
pub mod worker_api;

pub use env::EnvMap;

/// Re-exported for [`tune_grpc_service!`]; not part of the API.
#[doc(hidden)]
pub use tonic as __tonic;
