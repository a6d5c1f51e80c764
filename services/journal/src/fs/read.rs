//! Reading many run files at once (a cold replay reads every result file of the run): one
//! descriptor for the run directory, each file opened relative to it (no walk of the run's
//! path per file) and read through one scratch buffer (no size probe, no buffer per file).

use std::fs;
use std::path::Path;

use bytes::Bytes;

use crate::error::{JournalError, Result};

/// The files `rels` (paths relative to the run directory `dir`), in order; a missing one is
/// [`JournalError::RunFileNotFound`] in its place.
pub(super) fn run_files(dir: &Path, run_id: &str, rels: Vec<String>) -> Result<Vec<Result<Bytes>>> {
    let run = fs::File::open(dir).map_err(|e| JournalError::io(dir.display(), e))?;
    let mut scratch = Vec::new();
    Ok(rels
        .into_iter()
        .map(|rel| read_relative(&run, dir, run_id, rel, &mut scratch))
        .collect())
}

/// One run file read relative to its open run directory (`dir` names it in errors).
fn read_relative(
    run: &fs::File,
    dir: &Path,
    run_id: &str,
    rel: String,
    scratch: &mut Vec<u8>,
) -> Result<Bytes> {
    let opened = rustix::fs::openat(
        run,
        rel.as_str(),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    );
    let io = |e: rustix::io::Errno| JournalError::io(dir.join(&rel).display(), e.into());
    let fd = match opened {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => {
            return Err(JournalError::RunFileNotFound {
                run_id: run_id.to_owned(),
                path: rel,
            });
        }
        Err(e) => return Err(io(e)),
    };
    // `scratch` stays initialised (zeroed once, grown as needed): the file is read into it.
    let mut len = 0;
    loop {
        if len == scratch.len() {
            scratch.resize((scratch.len() * 2).max(16 << 10), 0);
        }
        match rustix::io::read(&fd, &mut scratch[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(io(e)),
        }
    }
    Ok(Bytes::copy_from_slice(&scratch[..len]))
}
