//! Limit tests: a runaway loop ends with `CpuLimit`, unbounded allocation with `MemoryLimit`;
//! the host is then poisoned while other hosts keep working. Only the error kinds are asserted,
//! never timings.

use std::time::Duration;

use super::tests::{fixture, run};
use super::*;

const OK: (&str, &str) = (
    "ok.js",
    "export async function process() { return 'still fine'; }",
);

#[test]
fn host_infinite_loop_hits_cpu_limit() {
    let fx = fixture(
        &[
            (
                "main.js",
                "export async function process() { while (true) {} }",
            ),
            OK,
        ],
        |c| c.cpu_limit = Duration::from_millis(200),
    );
    let err = run(&fx.host, "main.js").unwrap_err();
    assert!(
        matches!(err, HostError::CpuLimit { limit } if limit == Duration::from_millis(200)),
        "{err:?}"
    );
    assert!(fx.host.is_poisoned());
    assert!(matches!(fx.host.drive(), Err(HostError::Poisoned)));
    assert!(matches!(
        fx.host.load_module("ok.js"),
        Err(HostError::Poisoned)
    ));
}

#[test]
fn host_cpu_limit_after_await_and_in_catch_blocks() {
    // the loop runs as a job (after an await) and tries to swallow the interrupt
    let fx = fixture(
        &[(
            "main.js",
            "export async function process() {\n\
               await null;\n\
               for (;;) { try { while (true) {} } catch (e) { /* keep going */ } }\n\
             }",
        )],
        |c| c.cpu_limit = Duration::from_millis(200),
    );
    let err = run(&fx.host, "main.js").unwrap_err();
    assert!(matches!(err, HostError::CpuLimit { .. }), "{err:?}");
    assert!(fx.host.is_poisoned());
}

#[test]
fn host_cpu_limit_in_module_top_level() {
    let fx = fixture(
        &[(
            "main.js",
            "while (true) {}\nexport async function process() {}",
        )],
        |c| c.cpu_limit = Duration::from_millis(200),
    );
    let err = fx.host.load_module("main.js").unwrap_err();
    assert!(matches!(err, HostError::CpuLimit { .. }), "{err:?}");
}

#[test]
fn host_memory_bomb_hits_memory_limit_and_other_hosts_keep_working() {
    let bomb = (
        "main.js",
        "export async function process() { const a = []; while (true) a.push(new Array(1e6).fill(1)); }",
    );
    let healthy = fixture(&[OK], |_| {});
    let bombed = fixture(&[bomb, OK], |c| c.memory_limit = 32 * 1024 * 1024);
    let err = run(&bombed.host, "main.js").unwrap_err();
    assert!(
        matches!(err, HostError::MemoryLimit { limit } if limit == 32 * 1024 * 1024),
        "{err:?}"
    );
    assert!(bombed.host.is_poisoned());
    assert_eq!(run(&healthy.host, "ok.js").unwrap(), "\"still fine\"");
    drop(bombed);
    assert_eq!(run(&healthy.host, "ok.js").unwrap(), "\"still fine\"");
    let fresh = fixture(&[OK], |c| c.memory_limit = 32 * 1024 * 1024);
    assert_eq!(run(&fresh.host, "ok.js").unwrap(), "\"still fine\"");
}

#[test]
fn host_memory_bomb_at_module_top_level() {
    let fx = fixture(
        &[(
            "main.js",
            "const a = []; while (true) a.push(new Array(1e6).fill(1));\nexport async function process() {}",
        )],
        |c| c.memory_limit = 32 * 1024 * 1024,
    );
    let err = fx.host.load_module("main.js").unwrap_err();
    assert!(matches!(err, HostError::MemoryLimit { .. }), "{err:?}");
    assert!(fx.host.is_poisoned());
}
