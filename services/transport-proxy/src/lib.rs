//! babysitter-transport-proxy: lets a harness speak its own LLM protocol to an upstream that
//! speaks another one, without losing anything in translation.
//!
//! Why it is shaped this way: every protocol is decoded into one lossless [`canonical`] model
//! (system prompts, images also inside tool results, tools and tool choice, the parallel-tool
//! flag, reasoning with opaque signatures, a *total* stop-reason table, usage with set-not-add
//! merging) and encoded from it. Adding a protocol then costs one decoder and one encoder per
//! direction instead of one translator per pair, and the fidelity rules of the spec
//! (`transport-proxy.md` §3.2, §11, §12) live in one place.
//!
//! Layout (details in `OVERVIEW.md`):
//! * [`canonical`] — the model, the stop-reason table and usage merging (pure, no IO);
//! * [`anthropic`], [`openai_chat`], [`responses`], [`gemini`] — serde types of each wire
//!   protocol, request/response conversion to and from canonical, and one explicit streaming
//!   state machine per direction; [`protocol`] dispatches on the protocol;
//! * [`forward`], [`upstream`], [`pipeline`] — the request path: route, translate, call the
//!   upstream with retries and timeouts, stream back;
//! * [`server`] — the axum front; [`error`] — errors in each protocol's own envelope;
//! * [`config`] — typed routes and upstreams (secrets never logged); [`agent_mux`] — the
//!   reference's env-only contract;
//! * [`control`], [`grpc`], [`routes_state`] — the control API and its optional durable table;
//! * [`sigstore`], [`cost`], [`metrics`], [`checks`], [`sse`] — supporting pieces.
#![forbid(unsafe_code)]

pub mod agent_mux;
pub mod anthropic;
pub mod canonical;
pub mod checks;
pub mod config;
pub mod control;
pub mod cost;
pub mod error;
pub mod forward;
pub mod gemini;
pub mod grpc;
pub mod metrics;
pub mod openai_chat;
pub mod pipeline;
pub mod protocol;
pub mod responses;
pub mod routes_state;
#[cfg(feature = "test-support")]
pub mod scripted;
pub mod server;
pub mod sigstore;
pub mod sse;
pub mod upstream;
