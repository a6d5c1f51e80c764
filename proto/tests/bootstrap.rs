//! Keeps the checked-in generated code in `proto/src/gen/` equal to what the `.proto` files produce.
//!
//! The test runs the code generator (tonic-prost-build with the protoc shipped inside the
//! `protoc-bin-vendored` crate) over every `.proto` file under `proto/babysitter/` into a scratch
//! directory and compares the result with `proto/src/gen/` byte for byte. It fails on any
//! difference, naming the files that drifted.
//!
//! To regenerate after editing a `.proto` file:
//!
//! ```text
//! BABYSITTER_CODEGEN_WRITE=1 cargo nextest run -p babysitter-proto --test bootstrap
//! ```
//!
//! and commit `proto/src/gen/` together with the `.proto` change.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Set to `1` to write the generated files into `proto/src/gen/` instead of comparing.
const WRITE_ENV: &str = "BABYSITTER_CODEGEN_WRITE";

const REGENERATE_HINT: &str = "regenerate with `BABYSITTER_CODEGEN_WRITE=1 cargo nextest run -p babysitter-proto --test bootstrap` \
     and commit proto/src/gen/";

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.proto` file under `dir`, sorted, so the output does not depend on directory order.
fn proto_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in fs::read_dir(&current)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "proto") {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Runs protoc and tonic-prost-build into `out_dir`: one `<package>.rs` per proto package plus
/// `descriptor.bin`, the file descriptor set (with imports and source info) served by reflection.
fn generate(out_dir: &Path) -> io::Result<()> {
    let root = crate_dir();
    let protos = proto_files(&root.join("babysitter"))?;
    assert!(
        !protos.is_empty(),
        "no .proto files under {}",
        root.join("babysitter").display()
    );

    let protoc = protoc_bin_vendored::protoc_bin_path().map_err(io::Error::other)?;
    let well_known = protoc_bin_vendored::include_path().map_err(io::Error::other)?;

    // The protoc path goes through the config, never through the process environment.
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);

    tonic_prost_build::configure()
        .out_dir(out_dir)
        .file_descriptor_set_path(out_dir.join("descriptor.bin"))
        .emit_rerun_if_changed(false)
        .build_client(true)
        .build_server(true)
        .build_transport(true)
        // Clients and servers sit behind the crate's `client` / `server` features.
        .client_mod_attribute(".", r#"#[cfg(feature = "client")]"#)
        .server_mod_attribute(".", r#"#[cfg(feature = "server")]"#)
        // Payloads (`bytes` fields) are `prost::bytes::Bytes`: cheap to clone and slice.
        .bytes(".")
        .compile_with_config(config, &protos, &[root, well_known])
}

/// The files of `dir` (not recursive) by name.
fn read_files(dir: &Path) -> io::Result<BTreeMap<String, Vec<u8>>> {
    let mut files = BTreeMap::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            let name = entry.file_name().to_string_lossy().into_owned();
            files.insert(name, fs::read(entry.path())?);
        }
    }
    Ok(files)
}

#[test]
fn generated_code_is_up_to_date() -> io::Result<()> {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("babysitter-proto-codegen-{}", std::process::id()));
    if fs::symlink_metadata(&scratch).is_ok() {
        fs::remove_dir_all(&scratch)?;
    }
    fs::create_dir_all(&scratch)?;
    generate(&scratch)?;
    let fresh = read_files(&scratch)?;
    fs::remove_dir_all(&scratch)?;

    let gen_dir = crate_dir().join("src").join("gen");
    let checked_in = match read_files(&gen_dir) {
        Ok(files) => files,
        Err(err) if err.kind() == io::ErrorKind::NotFound => BTreeMap::new(),
        Err(err) => return Err(err),
    };

    if std::env::var(WRITE_ENV).as_deref() == Ok("1") {
        fs::create_dir_all(&gen_dir)?;
        for name in checked_in.keys().filter(|name| !fresh.contains_key(*name)) {
            fs::remove_file(gen_dir.join(name))?;
        }
        for (name, content) in &fresh {
            if checked_in.get(name) != Some(content) {
                fs::write(gen_dir.join(name), content)?;
            }
        }
        return Ok(());
    }

    let mut drift = Vec::new();
    for (name, content) in &fresh {
        match checked_in.get(name) {
            None => drift.push(format!("missing: src/gen/{name}")),
            Some(old) if old != content => drift.push(format!("differs: src/gen/{name}")),
            Some(_) => {}
        }
    }
    for name in checked_in.keys().filter(|name| !fresh.contains_key(*name)) {
        drift.push(format!("stale (no longer generated): src/gen/{name}"));
    }
    assert!(
        drift.is_empty(),
        "proto/src/gen is out of date with the .proto files:\n  {}\n{REGENERATE_HINT}",
        drift.join("\n  ")
    );
    Ok(())
}
