//! Serves a [`LauncherAdmin`] as the launcher binary does (the shared server builder, an admin
//! token) on 127.0.0.1:0, with a client holding that token; stopped by [`AdminServer::stop`].

#![allow(dead_code)]

use babysitter_common::auth::{AuthConfig, Role, Secret, TokenEntry};
use babysitter_common::client::{AuthedChannel, connect_lazy};
use babysitter_common::server::{ServerBuilder, ServerConfig};
use babysitter_harness_launcher::admin::LauncherAdmin;
use babysitter_harness_launcher::grpc::HarnessLauncherGrpcServer;
use babysitter_proto::harness_launcher::v1::harness_launcher_service_client::HarnessLauncherServiceClient;
use tokio_util::sync::CancellationToken;

pub const ADMIN_TOKEN: &str = "test-admin-token";

pub struct AdminServer {
    pub url: String,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

pub async fn start(admin: LauncherAdmin) -> AdminServer {
    let config = ServerConfig {
        auth: AuthConfig {
            tokens: vec![TokenEntry {
                token: Some(Secret::new(ADMIN_TOKEN)),
                token_file: None,
                role: Role::Admin,
                name: None,
                namespaces: vec![],
            }],
            ..AuthConfig::default()
        },
        ..ServerConfig::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let url = format!(
        "http://{}",
        listener.local_addr().unwrap_or_else(|e| panic!("{e}"))
    );
    let server = ServerBuilder::new("harness-launcher", &config).add_service(
        HarnessLauncherGrpcServer::new(admin).into_service(&config),
        babysitter_proto::FILE_DESCRIPTOR_SET,
    );
    let stop = CancellationToken::new();
    let shutdown = stop.clone();
    let task = tokio::spawn(async move {
        server
            .serve_with_listener(listener, shutdown)
            .await
            .unwrap_or_else(|e| panic!("admin server: {e}"));
    });
    AdminServer { url, stop, task }
}

impl AdminServer {
    /// A client presenting `token` (`None`: no token).
    pub fn client_with(&self, token: Option<&str>) -> HarnessLauncherServiceClient<AuthedChannel> {
        let secret = token.map(Secret::new);
        HarnessLauncherServiceClient::new(
            connect_lazy(&self.url, secret.as_ref()).unwrap_or_else(|e| panic!("{e}")),
        )
    }

    /// A client presenting the admin token.
    pub fn client(&self) -> HarnessLauncherServiceClient<AuthedChannel> {
        self.client_with(Some(ADMIN_TOKEN))
    }

    pub async fn stop(self) {
        self.stop.cancel();
        self.task
            .await
            .unwrap_or_else(|e| panic!("admin server task: {e}"));
    }
}
