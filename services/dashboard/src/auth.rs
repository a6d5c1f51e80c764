//! Who is looking: the services' bearer tokens, presented by a browser as a cookie.
//!
//! The login form posts a token; a token whose role may call `RunService` (client or admin, the
//! roles `RunService` requires for reading runs and for `ResolveBreakpoint` / `CancelRun` /
//! `HaltRun`) is set as an `HttpOnly; SameSite=Strict` cookie, so page scripts never see it and
//! no other site's request carries it. Scripts and tools may send `Authorization: Bearer`
//! instead. With no tokens configured (local `up`, `observe`) everyone is the anonymous admin and
//! there is no login.
//!
//! Actions also need a CSRF token: the page reads it from `/api/session` (a same-origin read a
//! foreign page cannot make) and sends it in `x-babysitter-csrf`; it is a digest of a secret
//! made at start and the caller's token, so it is bound to the session and useless elsewhere.
//! A custom header already forces a CORS preflight, which this server never grants; the `Origin`
//! check refuses a cross-origin request outright.

use babysitter_common::auth::{Authenticator, Principal, Role};
use http::{HeaderMap, HeaderValue, header};
use sha2::{Digest as _, Sha256};

pub const COOKIE: &str = "babysitter_dashboard";
pub const CSRF_HEADER: &str = "x-babysitter-csrf";

#[derive(Debug)]
pub struct Gate {
    auth: Authenticator,
    secret: [u8; 32],
    /// Set `Secure` on the cookie (the port is TLS).
    secure: bool,
}

/// Why a request is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// No (valid) credentials: the login page.
    Unauthenticated,
    /// A valid token whose role may not use the dashboard.
    Forbidden,
}

impl Gate {
    pub fn new(auth: Authenticator, secure: bool) -> Self {
        Self {
            auth,
            secret: random_secret(),
            secure,
        }
    }

    pub fn enabled(&self) -> bool {
        self.auth.is_enabled()
    }

    /// The token a request presents: its `Authorization` bearer, else the dashboard cookie.
    fn token(headers: &HeaderMap) -> Option<String> {
        if let Some(v) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            && let Some((scheme, t)) = v.trim().split_once(' ')
            && scheme.eq_ignore_ascii_case("bearer")
        {
            return Some(t.trim().to_owned());
        }
        cookie(headers, COOKIE)
    }

    /// The caller, who must hold a role that may call `RunService`.
    pub fn principal(&self, headers: &HeaderMap) -> Result<Principal, Refused> {
        let token = Self::token(headers).unwrap_or_default();
        self.check(&token)
    }

    /// The principal of `token` (what the login form posts).
    pub fn check(&self, token: &str) -> Result<Principal, Refused> {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(&format!("Bearer {token}")) {
            h.insert(header::AUTHORIZATION, v);
        }
        let who = self
            .auth
            .principal(&h)
            .map_err(|_| Refused::Unauthenticated)?;
        match who.role {
            Role::Client | Role::Admin => Ok(who),
            Role::Worker => Err(Refused::Forbidden),
        }
    }

    /// The CSRF token of the session presenting `headers`.
    pub fn csrf(&self, headers: &HeaderMap) -> String {
        let mut h = Sha256::new();
        h.update(self.secret);
        h.update(Self::token(headers).unwrap_or_default().as_bytes());
        hex::encode(h.finalize())
    }

    /// Whether a state-changing request is same-origin and carries its session's CSRF token.
    pub fn same_origin(&self, headers: &HeaderMap) -> bool {
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
        let origin_ok = match headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
            None => true,
            Some(origin) => host.is_some_and(|h| {
                origin
                    .split_once("://")
                    .is_some_and(|(_, rest)| rest.eq_ignore_ascii_case(h))
            }),
        };
        let sent = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
        origin_ok && sent.is_some_and(|s| constant_eq(s.as_bytes(), self.csrf(headers).as_bytes()))
    }

    /// The `Set-Cookie` value of a login (`None`: clear it).
    pub fn set_cookie(&self, token: Option<&str>) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        match token {
            Some(t) => format!("{COOKIE}={t}; Path=/; HttpOnly; SameSite=Strict{secure}"),
            None => format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
        }
    }
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 32 bytes from the OS (the CSRF secret); a time-and-pid digest only if it has none.
fn random_secret() -> [u8; 32] {
    use std::io::Read as _;
    let mut buf = [0u8; 32];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf));
    if read.is_err() {
        let seed = format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
        buf.copy_from_slice(&Sha256::digest(seed.as_bytes()));
    }
    buf
}
