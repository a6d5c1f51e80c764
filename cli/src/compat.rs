//! babysitter-compatible commands (being written).

use std::process::ExitCode;

pub fn main(_args: &[String], _env: &babysitter_common::EnvMap) -> ExitCode {
    eprintln!("babysitter: command not implemented yet");
    ExitCode::FAILURE
}
