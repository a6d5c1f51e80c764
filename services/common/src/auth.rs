//! Bearer-token authentication for every babysitter gRPC server.
//!
//! Tokens come from config (`[server.auth]`): each entry gives the token inline or as a file
//! (`token-file`, read once at start, surrounding whitespace trimmed) and a [`Role`]. The
//! [`AuthLayer`] compares the `authorization: Bearer …` header with every configured token in
//! constant time, rejects a missing or wrong token with `Unauthenticated`, and records the
//! caller's [`Role`] in the request extensions, where handlers read it with [`caller_role`] /
//! [`require_role`]. Services listed in `public-services` (health and reflection by default) are
//! reachable without a token.
//!
//! With no tokens configured, authentication is disabled: every caller is treated as
//! [`Role::Admin`] and the server logs a warning at start.
//!
//! Tokens never appear in logs, error text, `Debug` output or `--dump-config`.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::error::{ErrorKind, status};

/// Health and reflection: reachable without a token unless configured otherwise.
pub const DEFAULT_PUBLIC_SERVICES: [&str; 3] = [
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Creates and watches runs (CLI, CI).
    Client,
    /// Takes and completes tasks (harness-launcher).
    Worker,
    /// Everything, including admin RPCs.
    Admin,
}

impl Role {
    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Worker => "worker",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that never prints: `Debug` shows `<redacted>` and it serializes as `"<redacted>"`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself; keep it out of logs and errors.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A token file's content, surrounding whitespace trimmed; the error names the file only.
    pub fn from_file(path: &std::path::Path) -> Result<Self, String> {
        std::fs::read_to_string(path)
            .map(|t| Self(t.trim().to_owned()))
            .map_err(|e| format!("cannot read token file {}: {e}", path.display()))
    }

    /// [`Secret::from_file`] of an optional path.
    pub fn from_optional_file(path: Option<&std::path::Path>) -> Result<Option<Self>, String> {
        path.map(Self::from_file).transpose()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str("<redacted>")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret)
    }
}

/// One accepted token: exactly one of `token` and `token-file`, and its role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TokenEntry {
    /// The token inline. Prefer `token-file` outside tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    /// A file holding the token (surrounding whitespace is trimmed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// The role of callers presenting this token.
    pub role: Role,
    /// Who presents it (journaled with their decisions, e.g. as a breakpoint's approver).
    /// Default: the role's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespaces this token may see and act in; empty = every namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
}

/// The authenticated caller, recorded in the request extensions next to its [`Role`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub role: Role,
    /// Empty = every namespace.
    pub namespaces: Vec<String>,
}

impl Principal {
    /// Everyone, when authentication is disabled.
    pub fn anonymous_admin() -> Self {
        Self {
            name: "anonymous".into(),
            role: Role::Admin,
            namespaces: Vec::new(),
        }
    }

    /// Whether this caller may see and act in `namespace`.
    pub fn allows(&self, namespace: &str) -> bool {
        self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == namespace)
    }
}

/// `[server.auth]`: accepted tokens and services open without one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct AuthConfig {
    /// Accepted tokens. Empty disables authentication (a warning is logged at start).
    pub tokens: Vec<TokenEntry>,
    /// Fully qualified gRPC services reachable without a token.
    pub public_services: Vec<String>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            tokens: Vec::new(),
            public_services: DEFAULT_PUBLIC_SERVICES.map(String::from).to_vec(),
        }
    }
}

/// Why the auth configuration could not be turned into an [`Authenticator`]. No variant holds a
/// token.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// A token file could not be read.
    #[error("cannot read token file {} (tokens[{index}]): {source}", path.display())]
    TokenFile {
        /// Position in `tokens`.
        index: usize,
        /// The file.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// An entry gives both or neither of `token` and `token-file`.
    #[error("tokens[{index}]: give exactly one of `token` and `token-file`")]
    TokenSource {
        /// Position in `tokens`.
        index: usize,
    },
    /// A token is empty or holds characters other than visible ASCII.
    #[error("tokens[{index}]: token must be non-empty visible ascii without spaces")]
    BadToken {
        /// Position in `tokens`.
        index: usize,
    },
    /// A client token is not valid in an `authorization` header.
    #[error("bearer token is not valid visible ascii")]
    BadClientToken,
}

/// Resolved tokens, cheap to clone and shared by every connection.
#[derive(Clone)]
pub struct Authenticator {
    inner: Arc<AuthInner>,
}

struct AuthInner {
    tokens: Vec<(Vec<u8>, Principal)>,
    public_services: Vec<String>,
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticator")
            .field("tokens", &self.inner.tokens.len())
            .field("public_services", &self.inner.public_services)
            .finish()
    }
}

/// Why a request was refused (the text goes to the client; it never holds the token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    /// No `authorization` header.
    #[error("missing bearer token")]
    Missing,
    /// The header is not `Bearer <token>`.
    #[error("malformed authorization header, expected `Bearer <token>`")]
    Malformed,
    /// The token matches no configured token.
    #[error("invalid bearer token")]
    Invalid,
}

impl Authenticator {
    /// Reads token files and validates the entries.
    pub fn from_config(config: &AuthConfig) -> Result<Self, AuthError> {
        let mut tokens = Vec::with_capacity(config.tokens.len());
        for (index, entry) in config.tokens.iter().enumerate() {
            let token = match (&entry.token, &entry.token_file) {
                (Some(token), None) => token.expose().trim().to_owned(),
                (None, Some(path)) => std::fs::read_to_string(path)
                    .map_err(|source| AuthError::TokenFile {
                        index,
                        path: path.clone(),
                        source,
                    })?
                    .trim()
                    .to_owned(),
                _ => return Err(AuthError::TokenSource { index }),
            };
            if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(AuthError::BadToken { index });
            }
            let principal = Principal {
                name: entry
                    .name
                    .clone()
                    .unwrap_or_else(|| entry.role.as_str().to_owned()),
                role: entry.role,
                namespaces: entry.namespaces.clone(),
            };
            tokens.push((token.into_bytes(), principal));
        }
        Ok(Self {
            inner: Arc::new(AuthInner {
                tokens,
                public_services: config.public_services.clone(),
            }),
        })
    }

    /// An authenticator that accepts everyone as [`Role::Admin`].
    pub fn disabled() -> Self {
        Self {
            inner: Arc::new(AuthInner {
                tokens: Vec::new(),
                public_services: Vec::new(),
            }),
        }
    }

    /// Whether any token is configured.
    pub fn is_enabled(&self) -> bool {
        !self.inner.tokens.is_empty()
    }

    /// Whether `path` (`/pkg.Service/Method`) belongs to a public service.
    pub fn is_public(&self, path: &str) -> bool {
        let service = service_of(path);
        self.inner.public_services.iter().any(|s| s == service)
    }

    /// The role of the caller presenting `headers`: `Admin` when disabled, else the role of the
    /// matching token.
    pub fn authenticate(&self, headers: &http::HeaderMap) -> Result<Role, AuthFailure> {
        self.principal(headers).map(|p| p.role)
    }

    /// The caller presenting `headers`: [`Principal::anonymous_admin`] when disabled.
    pub fn principal(&self, headers: &http::HeaderMap) -> Result<Principal, AuthFailure> {
        if !self.is_enabled() {
            return Ok(Principal::anonymous_admin());
        }
        let value = headers
            .get(http::header::AUTHORIZATION)
            .ok_or(AuthFailure::Missing)?;
        let value = value.to_str().map_err(|_| AuthFailure::Malformed)?;
        let (scheme, token) = value.trim().split_once(' ').ok_or(AuthFailure::Malformed)?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(AuthFailure::Malformed);
        }
        let presented = token.trim().as_bytes();
        // Compare against every token so the time taken does not tell which one matched.
        let mut found = None;
        for (token, principal) in &self.inner.tokens {
            if constant_time_eq(token, presented) && found.is_none() {
                found = Some(principal.clone());
            }
        }
        found.ok_or(AuthFailure::Invalid)
    }
}

/// Compares two byte strings in time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let len = a.len().max(b.len());
    let mut diff = a.len() ^ b.len();
    for i in 0..len {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

/// The caller's role, as recorded by the [`AuthLayer`] (absent when the layer did not run, or
/// for public services).
pub fn caller_role<T>(request: &Request<T>) -> Option<Role> {
    request.extensions().get::<Role>().copied()
}

/// The caller as recorded by the [`AuthLayer`]; `None` when the layer did not run.
pub fn caller<T>(request: &Request<T>) -> Option<Principal> {
    request.extensions().get::<Principal>().cloned()
}

/// The caller's role if it is one of `allowed` (admin is always allowed), else
/// `PermissionDenied` (or `Unauthenticated` when no role was recorded).
pub fn require_role<T>(request: &Request<T>, allowed: &[Role]) -> Result<Role, Status> {
    match caller_role(request) {
        Some(role) if role == Role::Admin || allowed.contains(&role) => Ok(role),
        Some(role) => Err(status(
            ErrorKind::PermissionDenied,
            format!("role {role} may not call this method"),
            false,
            &[],
        )),
        None => Err(status(
            ErrorKind::Unauthenticated,
            "no authenticated caller",
            false,
            &[],
        )),
    }
}

/// The service a gRPC request path (`/pkg.Service/Method`) addresses.
pub(crate) fn service_of(path: &str) -> &str {
    path.trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or_default()
}

/// Tower layer that authenticates every request not addressed to a public service.
#[derive(Debug, Clone)]
pub struct AuthLayer {
    auth: Authenticator,
}

impl AuthLayer {
    /// A layer checking requests against `auth`.
    pub fn new(auth: Authenticator) -> Self {
        Self { auth }
    }
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthService {
            inner,
            auth: self.auth.clone(),
        }
    }
}

/// The service made by [`AuthLayer`].
#[derive(Debug, Clone)]
pub struct AuthService<S> {
    inner: S,
    auth: Authenticator,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, ResBody> tower::Service<http::Request<B>> for AuthService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        if self.auth.is_public(req.uri().path()) {
            return Box::pin(self.inner.call(req));
        }
        match self.auth.principal(req.headers()) {
            Ok(principal) => {
                req.extensions_mut().insert(principal.role);
                req.extensions_mut().insert(principal);
                Box::pin(self.inner.call(req))
            }
            Err(failure) => {
                tracing::debug!(path = %req.uri().path(), reason = %failure, "request refused");
                let status = status(ErrorKind::Unauthenticated, failure.to_string(), false, &[]);
                Box::pin(std::future::ready(Ok(status.into_http())))
            }
        }
    }
}

/// Client interceptor adding `authorization: Bearer <token>` to every request.
#[derive(Clone)]
pub struct BearerAuthInterceptor {
    header: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl fmt::Debug for BearerAuthInterceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerAuthInterceptor")
            .field("token", &self.header.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl BearerAuthInterceptor {
    /// Sends `token` (none when `None`, for servers with auth disabled).
    pub fn new(token: Option<&Secret>) -> Result<Self, AuthError> {
        let header = match token {
            None => None,
            Some(token) => {
                let mut value =
                    MetadataValue::try_from(format!("Bearer {}", token.expose().trim()))
                        .map_err(|_| AuthError::BadClientToken)?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        Ok(Self { header })
    }
}

impl Interceptor for BearerAuthInterceptor {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(header) = &self.header {
            request
                .metadata_mut()
                .insert("authorization", header.clone());
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use tower::{Layer, Service, ServiceExt};

    use super::*;

    fn config(entries: Vec<TokenEntry>) -> AuthConfig {
        AuthConfig {
            tokens: entries,
            ..AuthConfig::default()
        }
    }

    fn inline(token: &str, role: Role) -> TokenEntry {
        TokenEntry {
            token: Some(Secret::new(token)),
            token_file: None,
            role,
            name: None,
            namespaces: Vec::new(),
        }
    }

    fn headers(value: Option<&str>) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        if let Some(v) = value {
            h.insert(http::header::AUTHORIZATION, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn matches_tokens_to_roles() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(file, "  worker-secret-from-file  ").unwrap();
        let auth = Authenticator::from_config(&config(vec![
            inline("client-secret", Role::Client),
            TokenEntry {
                token: None,
                token_file: Some(file.path().to_owned()),
                role: Role::Worker,
                name: None,
                namespaces: Vec::new(),
            },
        ]))
        .unwrap();
        assert!(auth.is_enabled());
        assert_eq!(
            auth.authenticate(&headers(Some("Bearer client-secret"))),
            Ok(Role::Client)
        );
        assert_eq!(
            auth.authenticate(&headers(Some("bearer worker-secret-from-file"))),
            Ok(Role::Worker)
        );
        assert_eq!(auth.authenticate(&headers(None)), Err(AuthFailure::Missing));
        assert_eq!(
            auth.authenticate(&headers(Some("Basic abc"))),
            Err(AuthFailure::Malformed)
        );
        assert_eq!(
            auth.authenticate(&headers(Some("client-secret"))),
            Err(AuthFailure::Malformed)
        );
        assert_eq!(
            auth.authenticate(&headers(Some("Bearer client-secreT"))),
            Err(AuthFailure::Invalid)
        );
        assert_eq!(
            auth.authenticate(&headers(Some("Bearer client-secret2"))),
            Err(AuthFailure::Invalid)
        );
        assert_eq!(
            auth.authenticate(&headers(Some("Bearer "))),
            Err(AuthFailure::Malformed)
        );
        assert_eq!(
            auth.authenticate(&headers(Some("Bearer  x"))),
            Err(AuthFailure::Invalid)
        );
    }

    #[test]
    fn disabled_without_tokens() {
        let auth = Authenticator::from_config(&AuthConfig::default()).unwrap();
        assert!(!auth.is_enabled());
        assert_eq!(auth.authenticate(&headers(None)), Ok(Role::Admin));
    }

    #[test]
    fn config_errors_never_hold_the_token() {
        let err = Authenticator::from_config(&config(vec![inline("has space", Role::Admin)]))
            .unwrap_err();
        assert!(matches!(err, AuthError::BadToken { index: 0 }));
        assert!(!err.to_string().contains("has space"));
        let both = TokenEntry {
            token: Some(Secret::new("x")),
            token_file: Some("/x".into()),
            role: Role::Admin,
            name: None,
            namespaces: Vec::new(),
        };
        assert!(matches!(
            Authenticator::from_config(&config(vec![both])),
            Err(AuthError::TokenSource { index: 0 })
        ));
        let missing = TokenEntry {
            token: None,
            token_file: Some("/nonexistent/token".into()),
            role: Role::Admin,
            name: None,
            namespaces: Vec::new(),
        };
        let err = Authenticator::from_config(&config(vec![missing])).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/token"), "{err}");
        let entry = inline("super-secret", Role::Admin);
        assert!(!format!("{entry:?}").contains("super-secret"));
        assert!(!toml::to_string(&entry).unwrap().contains("super-secret"));
    }

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn public_services_are_matched_by_path() {
        let auth = Authenticator::from_config(&config(vec![inline("t", Role::Admin)])).unwrap();
        assert!(auth.is_public("/grpc.health.v1.Health/Check"));
        assert!(auth.is_public("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"));
        assert!(!auth.is_public("/grpc.health.v1.HealthX/Check"));
        assert!(!auth.is_public("/babysitter.journal.v1.JournalService/Append"));
    }

    #[test]
    fn require_role_checks_the_recorded_role() {
        let mut req = Request::new(());
        assert_eq!(
            require_role(&req, &[Role::Worker]).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        req.extensions_mut().insert(Role::Client);
        let err = require_role(&req, &[Role::Worker]).unwrap_err();
        assert_eq!(err.code(), tonic::Code::PermissionDenied);
        req.extensions_mut().insert(Role::Admin);
        assert_eq!(require_role(&req, &[Role::Worker]).unwrap(), Role::Admin);
    }

    #[tokio::test]
    async fn layer_rejects_without_calling_the_service_and_records_the_role() {
        let auth =
            Authenticator::from_config(&config(vec![inline("w-token", Role::Worker)])).unwrap();
        let inner = tower::service_fn(|req: http::Request<()>| async move {
            let role = req.extensions().get::<Role>().copied();
            Ok::<_, std::convert::Infallible>(http::Response::new(
                role.map(|r| r.to_string()).unwrap_or_default(),
            ))
        });
        let mut svc = AuthLayer::new(auth).layer(inner);

        let req = http::Request::builder()
            .uri("/babysitter.x.v1.X/Do")
            .body(())
            .unwrap();
        let resp = svc.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(resp.headers().get("grpc-status").unwrap(), "16");
        assert_eq!(resp.body(), "", "inner service not called");

        let req = http::Request::builder()
            .uri("/babysitter.x.v1.X/Do")
            .header("authorization", "Bearer nope-token")
            .body(())
            .unwrap();
        let resp = svc.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(resp.headers().get("grpc-status").unwrap(), "16");
        let message = resp
            .headers()
            .get("grpc-message")
            .unwrap()
            .to_str()
            .unwrap();
        assert!(!message.contains("nope-token"), "{message}");

        let req = http::Request::builder()
            .uri("/babysitter.x.v1.X/Do")
            .header("authorization", "Bearer w-token")
            .body(())
            .unwrap();
        let resp = svc.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(resp.body(), "worker");

        let req = http::Request::builder()
            .uri("/grpc.health.v1.Health/Check")
            .body(())
            .unwrap();
        let resp = svc.ready().await.unwrap().call(req).await.unwrap();
        assert!(
            resp.headers().get("grpc-status").is_none(),
            "health is public"
        );
    }

    #[test]
    fn bearer_interceptor_sets_the_header() {
        let token = Secret::new("abc");
        let mut i = BearerAuthInterceptor::new(Some(&token)).unwrap();
        let req = i.call(Request::new(())).unwrap();
        assert_eq!(req.metadata().get("authorization").unwrap(), "Bearer abc");
        assert!(!format!("{i:?}").contains("abc"));
        let mut none = BearerAuthInterceptor::new(None).unwrap();
        assert!(
            none.call(Request::new(()))
                .unwrap()
                .metadata()
                .get("authorization")
                .is_none()
        );
    }
}
