//! Links the `babysitter` binary as a position-dependent executable on Linux.
//!
//! Every `babysitter` command is a fresh process, and a PIE binary of this size starts by
//! applying ~38,000 relative relocations — a third of the start-up CPU time of a short command
//! (`run:iterate`, `task:list`, `task:post` are called hundreds of times per run). Linked with
//! `-no-pie` the addresses are fixed at link time and the loader has nothing to relocate. The
//! code is still compiled position-independent, so only the link changes.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bin=babysitter=-no-pie");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
