//! The v1 gRPC contracts of babysitter-rs: the prost messages, tonic clients and tonic servers of the
//! journal, orchestrator (`RunService`, `WorkerService`), harness-launcher and transport-proxy
//! services, plus the shared `babysitter.common.v1` messages.
//!
//! This crate is the bottom of the dependency graph (proto ← common ← service cores ← adapters ←
//! binaries). It holds wire types only: services convert them to their domain types at their gRPC
//! adapter, and no prost type should reach a service's core.
//!
//! The Rust code is generated from `proto/babysitter/<service>/v1/*.proto` and **checked in** under
//! `src/gen/`, so building this crate needs no protoc and no build script. The `bootstrap`
//! integration test regenerates everything (with the protoc shipped inside `protoc-bin-vendored`)
//! and fails when `src/gen/` has drifted from the `.proto` files. To regenerate after changing a
//! `.proto` file:
//!
//! ```text
//! BABYSITTER_CODEGEN_WRITE=1 cargo nextest run -p babysitter-proto --test bootstrap
//! ```
//!
//! Features: `client` compiles the `*_client` modules (e.g.
//! `journal::v1::journal_service_client::JournalServiceClient`), `server` the `*_server` modules
//! (e.g. `journal::v1::journal_service_server::JournalServiceServer`). Both are on by default;
//! with neither, only the messages remain. `bytes` fields are [`prost::bytes::Bytes`].
//!
//! [`client`] is the one place client transport settings live ([`client::ClientOptions`]:
//! message sizes, compression, timeouts, keepalive) and the constructor of every configured
//! generated client ([`client::GrpcClient`], with the `client` feature).
#![forbid(unsafe_code)]

pub mod client;

/// The encoded `google.protobuf.FileDescriptorSet` of every file in this crate (and the well-known
/// types they import), with source info; register it with `tonic-reflection`.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!("gen/descriptor.bin");

/// Messages shared by several services (`babysitter.common.v1`).
pub mod common {
    /// `babysitter.common.v1`.
    #[allow(
        clippy::all,
        clippy::pedantic,
        clippy::nursery,
        missing_docs,
        rustdoc::all
    )]
    pub mod v1 {
        include!("gen/babysitter.common.v1.rs");
    }
}

/// The journal: append-only, checksummed event log of every run (`babysitter.journal.v1`).
pub mod journal {
    /// `babysitter.journal.v1`: `JournalService`.
    #[allow(
        clippy::all,
        clippy::pedantic,
        clippy::nursery,
        missing_docs,
        rustdoc::all
    )]
    pub mod v1 {
        include!("gen/babysitter.journal.v1.rs");
    }
}

/// The orchestrator: runs and the worker protocol (`babysitter.orchestrator.v1`).
pub mod orchestrator {
    /// `babysitter.orchestrator.v1`: `RunService` and `WorkerService`.
    #[allow(
        clippy::all,
        clippy::pedantic,
        clippy::nursery,
        missing_docs,
        rustdoc::all
    )]
    pub mod v1 {
        include!("gen/babysitter.orchestrator.v1.rs");
    }
}

/// The harness launcher's local control API (`babysitter.harness_launcher.v1`).
pub mod harness_launcher {
    /// `babysitter.harness_launcher.v1`: `HarnessLauncherService`.
    #[allow(
        clippy::all,
        clippy::pedantic,
        clippy::nursery,
        missing_docs,
        rustdoc::all
    )]
    pub mod v1 {
        include!("gen/babysitter.harness_launcher.v1.rs");
    }
}

/// The transport proxy's control API (`babysitter.transport_proxy.v1`).
pub mod transport_proxy {
    /// `babysitter.transport_proxy.v1`: `TransportProxyService`.
    #[allow(
        clippy::all,
        clippy::pedantic,
        clippy::nursery,
        missing_docs,
        rustdoc::all
    )]
    pub mod v1 {
        include!("gen/babysitter.transport_proxy.v1.rs");
    }
}

impl orchestrator::v1::ProcessBundle {
    /// A bundle of one file at `path`, which is also the entry (its `process` export runs): the
    /// shape of every single-module process (tests, benches, a one-file `babysitter run`).
    pub fn single_file(path: &str, source: impl Into<prost::bytes::Bytes>) -> Self {
        Self {
            entry_path: path.to_owned(),
            export_name: String::new(),
            files: vec![orchestrator::v1::ProcessFile {
                path: path.to_owned(),
                content: source.into(),
            }],
        }
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    #[test]
    fn a_single_file_bundle_is_its_own_entry() {
        let b = crate::orchestrator::v1::ProcessBundle::single_file("main.mjs", "export x");
        assert_eq!(
            (b.entry_path.as_str(), b.export_name.as_str()),
            ("main.mjs", "")
        );
        assert_eq!(b.files.len(), 1);
        assert_eq!(b.files[0].path, "main.mjs");
        assert_eq!(&b.files[0].content[..], b"export x");
    }

    #[test]
    fn descriptor_set_names_every_service() {
        let set = prost_types::FileDescriptorSet::decode(super::FILE_DESCRIPTOR_SET).unwrap();
        let mut services: Vec<String> = set
            .file
            .iter()
            .flat_map(|file| {
                file.service
                    .iter()
                    .map(move |service| format!("{}.{}", file.package(), service.name()))
            })
            .collect();
        services.sort();
        assert_eq!(
            services,
            [
                "babysitter.harness_launcher.v1.HarnessLauncherService",
                "babysitter.journal.v1.JournalService",
                "babysitter.orchestrator.v1.RunService",
                "babysitter.orchestrator.v1.WorkerService",
                "babysitter.transport_proxy.v1.TransportProxyService",
            ]
        );
        // reflection needs the imported well-known types too.
        assert!(
            set.file
                .iter()
                .any(|file| file.name() == "google/protobuf/timestamp.proto")
        );
    }
}
