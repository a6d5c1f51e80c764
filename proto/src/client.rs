//! How every babysitter gRPC client is built: one [`ClientOptions`] holding the transport
//! settings (message sizes, compression, connect and request timeouts, HTTP/2 keepalive), a
//! configured [`Endpoint`] / lazily connected [`Channel`] from a URI, and — with the `client`
//! feature — the generated clients of every service configured from a channel ([`GrpcClient`]).
//!
//! The message-size defaults equal the server default ([`DEFAULT_MAX_MESSAGE_SIZE`], which
//! `babysitter_common::server::ServerConfig` uses too), so a client built here can receive
//! whatever a default-configured server may send: tonic's own client default is 4 MiB.
//!
//! What this module does not do: bearer tokens and W3C trace-context propagation are an
//! interceptor in `babysitter_common::client` (`connect_lazy`, `client`), which wraps a channel
//! made here. This crate stays free of auth and telemetry dependencies.
//!
//! ```ignore
//! use babysitter_proto::client::{ClientOptions, GrpcClient};
//! use babysitter_proto::journal::v1::journal_service_client::JournalServiceClient;
//!
//! let options = ClientOptions::default();
//! let journal: JournalServiceClient<_> = options.connect_lazy("http://127.0.0.1:50051")?;
//! // or over a channel you already have (an intercepted one, an in-memory one):
//! let journal = JournalServiceClient::configured(channel, &options);
//! ```

use std::fmt;
use std::time::Duration;

use tonic::codec::CompressionEncoding;
use tonic::transport::{Channel, Endpoint};

/// Largest message, in bytes, a babysitter client or server decodes or encodes unless configured
/// otherwise: 64 MiB — above the largest single thing a service accepts (a 32 MiB process bundle,
/// a 16 MiB journal event with its envelope), so the transport never refuses what the service
/// would take. Lower it with `server.max-decoding-message-size` to bound a request's memory.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 64 * 1024 * 1024;

/// Transport settings of a gRPC client. `Default` is what every babysitter client uses unless a
/// caller says otherwise; change a field with struct update syntax:
///
/// ```
/// # use babysitter_proto::client::ClientOptions;
/// let options = ClientOptions {
///     max_decoding_message_size: 64 * 1024 * 1024,
///     ..ClientOptions::default()
/// };
/// assert_eq!(options.max_encoding_message_size, 64 * 1024 * 1024);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// Largest response message accepted, in bytes (after decompression). Default:
    /// [`DEFAULT_MAX_MESSAGE_SIZE`], the server's default encoding limit.
    pub max_decoding_message_size: usize,
    /// Largest request message sent, in bytes; a bigger one fails locally with `OutOfRange`
    /// instead of being sent to a server that would refuse it. Default:
    /// [`DEFAULT_MAX_MESSAGE_SIZE`], the server's default decoding limit.
    pub max_encoding_message_size: usize,
    /// Response encodings advertised, most preferred first (our servers can send zstd and
    /// gzip; a server only compresses with an encoding listed here). Default: none. Tonic
    /// compresses every message with a fresh encoder, about 27 µs for zstd even for a 200-byte
    /// message (release build, measured for this choice), and most of our messages are small
    /// control-plane calls, often over loopback (`babysitter up`); list `[Zstd, Gzip]` for a
    /// link that carries large reads over a slow network.
    pub accept_compressed: Vec<CompressionEncoding>,
    /// Encoding of request messages. Default: none, for the same reason, and because a server
    /// that does not accept the encoding answers `Unimplemented` (ours accept zstd and gzip).
    pub send_compressed: Option<CompressionEncoding>,
    /// Longest wait for a TCP connection (each (re)connect). Default: 5 s.
    pub connect_timeout: Duration,
    /// Client-side limit on each call until its response headers arrive (`None`: none, the
    /// default). Off by default because long polls (`WorkerService.PollTasks`) legitimately wait;
    /// prefer per-call deadlines (`Request::set_timeout`) where a bound is wanted.
    pub request_timeout: Option<Duration>,
    /// HTTP/2 ping interval, so a dead peer behind a NAT or load balancer that drops idle flows
    /// is noticed (`None`: no pings). Default: 30 s.
    pub http2_keepalive_interval: Option<Duration>,
    /// How long to wait for a ping answer before the connection is closed. Default: 20 s.
    pub http2_keepalive_timeout: Duration,
    /// Ping even when no call is open, so a long-lived link is known dead before the next call
    /// needs it. Default: true.
    pub keepalive_while_idle: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            max_decoding_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            max_encoding_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            accept_compressed: Vec::new(),
            send_compressed: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: None,
            http2_keepalive_interval: Some(Duration::from_secs(30)),
            http2_keepalive_timeout: Duration::from_secs(20),
            keepalive_while_idle: true,
        }
    }
}

/// A URI that cannot be a gRPC endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidEndpoint {
    /// The URI as given.
    pub uri: String,
    /// Why it was refused.
    pub reason: String,
}

impl fmt::Display for InvalidEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a usable grpc endpoint: {}",
            self.uri, self.reason
        )
    }
}

impl std::error::Error for InvalidEndpoint {}

impl ClientOptions {
    /// An endpoint for `uri` (`http://127.0.0.1:50051`) with these connection settings (connect
    /// timeout, request timeout, keepalive, `TCP_NODELAY`).
    pub fn endpoint(&self, uri: &str) -> Result<Endpoint, InvalidEndpoint> {
        let invalid = |reason: String| InvalidEndpoint {
            uri: uri.to_owned(),
            reason,
        };
        if !(uri.starts_with("http://") || uri.starts_with("https://")) {
            return Err(invalid("it must start with http:// or https://".into()));
        }
        let mut endpoint = Endpoint::from_shared(uri.to_owned())
            .map_err(|e| invalid(e.to_string()))?
            .connect_timeout(self.connect_timeout)
            // Small request/response exchanges: do not wait to fill a segment.
            .tcp_nodelay(true)
            .keep_alive_timeout(self.http2_keepalive_timeout)
            .keep_alive_while_idle(self.keepalive_while_idle);
        if let Some(interval) = self.http2_keepalive_interval {
            endpoint = endpoint.http2_keep_alive_interval(interval);
        }
        if let Some(timeout) = self.request_timeout {
            endpoint = endpoint.timeout(timeout);
        }
        Ok(endpoint)
    }

    /// A lazily connecting channel to `uri`: nothing is dialled until the first call, which then
    /// reports an unreachable peer as `Unavailable` (callers already retry that). Lazy so a
    /// service starts even when its peer is not up yet.
    ///
    /// Needs a Tokio runtime (the channel spawns its connection task).
    pub fn channel_lazy(&self, uri: &str) -> Result<Channel, InvalidEndpoint> {
        Ok(self.endpoint(uri)?.connect_lazy())
    }
}

#[cfg(feature = "client")]
pub use generated::GrpcClient;

#[cfg(feature = "client")]
mod generated {
    use tonic::codegen::{Body, Bytes, StdError};
    use tonic::transport::Channel;

    use super::{ClientOptions, InvalidEndpoint};
    use crate::harness_launcher::v1::harness_launcher_service_client::HarnessLauncherServiceClient;
    use crate::journal::v1::journal_service_client::JournalServiceClient;
    use crate::orchestrator::v1::run_service_client::RunServiceClient;
    use crate::orchestrator::v1::worker_service_client::WorkerServiceClient;
    use crate::transport_proxy::v1::transport_proxy_service_client::TransportProxyServiceClient;

    /// A generated client of this crate, built over a transport `T` (a [`Channel`], an
    /// intercepted channel, an in-memory connection) with the message-size and compression
    /// settings of a [`ClientOptions`].
    ///
    /// Implemented for every service's client: `JournalServiceClient`, `RunServiceClient`,
    /// `WorkerServiceClient`, `HarnessLauncherServiceClient`, `TransportProxyServiceClient`.
    pub trait GrpcClient<T>: Sized {
        /// The client over `inner`, configured by `options`. (The connection settings of
        /// `options` apply where the channel is made: [`ClientOptions::endpoint`].)
        fn configured(inner: T, options: &ClientOptions) -> Self;
    }

    impl ClientOptions {
        /// A configured generated client over `inner`; the client type picks the service:
        /// `let c: RunServiceClient<_> = options.client(channel);`.
        pub fn client<C: GrpcClient<T>, T>(&self, inner: T) -> C {
            C::configured(inner, self)
        }

        /// A configured generated client over a lazily connecting channel to `uri`
        /// ([`ClientOptions::channel_lazy`]).
        pub fn connect_lazy<C: GrpcClient<Channel>>(
            &self,
            uri: &str,
        ) -> Result<C, InvalidEndpoint> {
            Ok(C::configured(self.channel_lazy(uri)?, self))
        }
    }

    /// The generated clients share their builder methods by name, not by trait.
    macro_rules! grpc_client {
        ($($client:ident),+ $(,)?) => {$(
            impl<T> GrpcClient<T> for $client<T>
            where
                T: tonic::client::GrpcService<tonic::body::Body>,
                T::Error: Into<StdError>,
                T::ResponseBody: Body<Data = Bytes> + Send + 'static,
                <T::ResponseBody as Body>::Error: Into<StdError> + Send,
            {
                fn configured(inner: T, options: &ClientOptions) -> Self {
                    let mut client = $client::new(inner)
                        .max_decoding_message_size(options.max_decoding_message_size)
                        .max_encoding_message_size(options.max_encoding_message_size);
                    for encoding in &options.accept_compressed {
                        client = client.accept_compressed(*encoding);
                    }
                    if let Some(encoding) = options.send_compressed {
                        client = client.send_compressed(encoding);
                    }
                    client
                }
            }
        )+};
    }

    grpc_client!(
        JournalServiceClient,
        RunServiceClient,
        WorkerServiceClient,
        HarnessLauncherServiceClient,
        TransportProxyServiceClient,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_uris_without_a_scheme() {
        let e = ClientOptions::default()
            .endpoint("127.0.0.1:1")
            .unwrap_err();
        assert!(e.to_string().contains("http://"), "{e}");
        assert!(ClientOptions::default().endpoint("http://[::1").is_err());
    }

    #[test]
    fn endpoint_carries_the_connect_timeout() {
        let options = ClientOptions {
            connect_timeout: Duration::from_millis(1500),
            ..ClientOptions::default()
        };
        let endpoint = options.endpoint("http://127.0.0.1:50051").unwrap();
        assert_eq!(
            endpoint.get_connect_timeout(),
            Some(Duration::from_millis(1500))
        );
        assert!(endpoint.get_tcp_nodelay());
    }
}
