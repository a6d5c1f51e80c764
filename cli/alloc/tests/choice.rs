//! The choice is made before `main`, from the process's own arguments and environment: only a
//! started process can show it.

use std::process::Command;

fn choice(args: &[&str], warm: Option<&str>) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_babysitter-alloc-choice"));
    cmd.args(args).env_remove("BABYSITTER_WARM");
    if let Some(w) = warm {
        cmd.env("BABYSITTER_WARM", w);
    }
    let out = cmd.output().expect("start the probe");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn a_forwarded_command_gets_the_system_allocator_and_everything_else_mimalloc() {
    assert_eq!(choice(&["task:list", "runs/r", "--json"], None), "system");
    assert_eq!(choice(&["run:iterate", "runs/r"], Some("1")), "system");
    assert_eq!(choice(&["task:post", "runs/r"], Some("off")), "mimalloc");
    assert_eq!(choice(&["warm", "serve"], None), "mimalloc");
    assert_eq!(choice(&["run", "process.mjs"], None), "mimalloc");
    assert_eq!(choice(&[], None), "mimalloc");
}
