//! Links the `babysitter` binary as a position-dependent executable on Linux, and embeds the
//! plugin source (`plugins/babysitter/`) so `harness:install-plugin` and `plugin:generate` work
//! from an installed binary, away from the repository.
//!
//! Every `babysitter` command is a fresh process, and a PIE binary of this size starts by
//! applying ~38,000 relative relocations — a third of the start-up CPU time of a short command
//! (`run:iterate`, `task:list`, `task:post` are called hundreds of times per run). Linked with
//! `-no-pie` the addresses are fixed at link time and the loader has nothing to relocate. The
//! code is still compiled position-independent, so only the link changes.
//!
//! The plugin source is listed by walking its directory here, so a file added to it is embedded
//! without anyone keeping a list.

use std::path::{Path, PathBuf};

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bin=babysitter=-no-pie");
    }
    println!("cargo:rerun-if-changed=build.rs");
    embed_plugin_source();
}

fn embed_plugin_source() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest_dir.join("../plugins/babysitter");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    files.sort();
    let mut out = String::from(
        "/// The plugin source: (path relative to `plugins/babysitter/`, contents, executable).\n\
         pub static FILES: &[(&str, &[u8], bool)] = &[\n",
    );
    for (rel, abs, exec) in &files {
        out.push_str(&format!(
            "    ({rel:?}, include_bytes!({:?}), {exec}),\n",
            abs.display().to_string()
        ));
    }
    out.push_str("];\n");
    let dest =
        PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("plugin_source.rs");
    std::fs::write(&dest, out).expect("write plugin_source.rs");
}

fn walk(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf, bool)>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("plugin source {}: {e}", dir.display()));
    for entry in entries {
        let entry = entry.expect("read plugin source entry");
        let path = entry.path();
        println!("cargo:rerun-if-changed={}", path.display());
        let meta = entry.metadata().expect("plugin source metadata");
        if meta.is_dir() {
            walk(root, &path, files);
        } else {
            let rel = path
                .strip_prefix(root)
                .expect("under the root")
                .to_string_lossy()
                .replace('\\', "/");
            #[cfg(unix)]
            let exec = {
                use std::os::unix::fs::PermissionsExt as _;
                meta.permissions().mode() & 0o111 != 0
            };
            #[cfg(not(unix))]
            let exec = rel.ends_with(".sh");
            let abs = path.canonicalize().expect("canonical path");
            files.push((rel, abs, exec));
        }
    }
}
