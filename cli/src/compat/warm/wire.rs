//! The warm server's protocol: one request and one response per connection, each a
//! length-prefixed frame. Client and server are the same build (the request names it), so the
//! format is private and versionless; what it must get right is that a client can always tell
//! "ran, with this outcome" from "did not run, run it yourself" — the second is safe to retry
//! locally, an answer cut short after the request went out is not.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Largest request the server accepts (argv and environment).
pub const MAX_FRAME: usize = 64 << 20;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    Run {
        /// The client's build (see `warm::build_id`); another build's server does not run it.
        build: String,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: PathBuf,
    },
    Ping,
    Stop,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Response {
    /// The command ran: its exit code, stdout and stderr.
    Ran {
        code: u8,
        out: Vec<u8>,
        err: Vec<u8>,
    },
    /// Nothing was run (busy with another command, another build, shutting down): the client
    /// runs the command itself.
    NotRun(String),
}

const RAN: u8 = 0;
const NOT_RUN: u8 = 1;

/// A request frame (client side).
pub fn write_request(w: &mut impl std::io::Write, request: &Request) -> std::io::Result<()> {
    // One write: the length goes in front of the body once it is known.
    let mut frame = vec![0u8; 4];
    serde_json::to_writer(&mut frame, request).map_err(std::io::Error::other)?;
    let len = u32::try_from(frame.len() - 4)
        .map_err(|_| std::io::Error::other("frame larger than 4 GiB"))?;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    w.write_all(&frame)?;
    w.flush()
}

/// A request (server side), refused past [`MAX_FRAME`] before anything is allocated.
pub async fn read_request(stream: &mut tokio::net::UnixStream) -> std::io::Result<Request> {
    let len = stream.read_u32().await? as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "request of {len} bytes exceeds the {MAX_FRAME}-byte limit"
        )));
    }
    let mut buf = vec![0u8; len];
    stream.read_exact(&mut buf).await?;
    serde_json::from_slice(&buf).map_err(|e| std::io::Error::other(format!("not a request: {e}")))
}

/// A response's bytes: a kind byte, then for [`Response::Ran`] the exit code and stdout and
/// stderr as length-prefixed blobs, for [`Response::NotRun`] the reason as one blob.
pub fn encode_response(response: &Response) -> std::io::Result<Vec<u8>> {
    let blobs: Vec<&[u8]> = match response {
        Response::Ran { out, err, .. } => vec![out, err],
        Response::NotRun(reason) => vec![reason.as_bytes()],
    };
    let mut buf = Vec::with_capacity(10 + blobs.iter().map(|b| b.len()).sum::<usize>());
    match response {
        Response::Ran { code, .. } => buf.extend_from_slice(&[RAN, *code]),
        Response::NotRun(_) => buf.push(NOT_RUN),
    }
    for blob in blobs {
        let len =
            u32::try_from(blob.len()).map_err(|_| std::io::Error::other("output too large"))?;
        buf.extend_from_slice(&len.to_be_bytes());
        buf.extend_from_slice(blob);
    }
    Ok(buf)
}

pub async fn write_response(
    stream: &mut tokio::net::UnixStream,
    response: &Response,
) -> std::io::Result<()> {
    stream.write_all(&encode_response(response)?).await?;
    stream.flush().await
}

/// One length-prefixed blob. No limit but the prefix's (a command's output can be large:
/// `run:events` of a long run); read as it arrives, so a bad length costs no allocation.
fn read_blob(r: &mut impl std::io::Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u64::from(u32::from_be_bytes(len));
    let mut buf = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(r.by_ref(), len), &mut buf)?;
    if buf.len() as u64 != len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("response cut short: {} of {len} bytes", buf.len()),
        ));
    }
    Ok(buf)
}

/// A response (client side).
pub fn read_response(r: &mut impl std::io::Read) -> std::io::Result<Response> {
    let mut kind = [0u8; 1];
    r.read_exact(&mut kind)?;
    match kind[0] {
        RAN => {
            let mut code = [0u8; 1];
            r.read_exact(&mut code)?;
            let out = read_blob(r)?;
            let err = read_blob(r)?;
            Ok(Response::Ran {
                code: code[0],
                out,
                err,
            })
        }
        NOT_RUN => Ok(Response::NotRun(
            String::from_utf8_lossy(&read_blob(r)?).into_owned(),
        )),
        other => Err(std::io::Error::other(format!(
            "unknown response kind {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_round_trip_and_a_cut_one_is_an_error() {
        for response in [
            Response::Ran {
                code: 3,
                out: b"{\"status\":\"waiting\"}\n".to_vec(),
                err: b"warning\n".to_vec(),
            },
            Response::NotRun("busy".into()),
        ] {
            let bytes = encode_response(&response).unwrap();
            assert_eq!(read_response(&mut bytes.as_slice()).unwrap(), response);
            // Any prefix of it is an error, never a shorter answer.
            for cut in 0..bytes.len() {
                assert!(
                    read_response(&mut &bytes[..cut]).is_err(),
                    "{response:?} cut at {cut}"
                );
            }
        }
        // A length far beyond what follows: an error, not a 4 GiB allocation.
        let mut cut = vec![RAN, 0];
        cut.extend_from_slice(&u32::MAX.to_be_bytes());
        cut.extend_from_slice(b"abc");
        let err = read_response(&mut cut.as_slice()).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof, "{err}");
        assert!(read_response(&mut [9u8].as_slice()).is_err());
    }
}
