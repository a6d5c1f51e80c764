//! `babysitter run` (being written).

use std::process::ExitCode;

pub fn main(_args: &[String], _env: &babysitter_common::EnvMap) -> ExitCode {
    eprintln!("babysitter run: not implemented yet");
    ExitCode::FAILURE
}
