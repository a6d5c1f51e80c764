//! The `babysitter` binary's allocator, chosen once per process before `main`.
//!
//! Long-lived processes (the warm server, `babysitter run`, `babysitter up`, a command that runs
//! locally because the warm server is off) allocate and free many small objects: mimalloc is
//! faster there than glibc's malloc (glibc's was ~20 % of the warm server's CPU). A run or task
//! command that is forwarded to the warm server is a thin client: it sends its argv and prints
//! the answer, and mimalloc's start-up (reserving and mapping its first arena, initialising its
//! bitmaps, purging at exit) cost about 1 ms of its ~3 ms — a third of every forwarded call.
//! Those processes use the system allocator.
//!
//! Both allocators cannot be mixed in one process (memory must be freed by the allocator that
//! gave it), so the choice is made once, before the first allocation, and never changes: glibc
//! calls the functions in `.init_array` with `argc`, `argv` and `envp` before `main` (the
//! standard library reads its arguments the same way), and [`choose`] settles the choice there.
//! Should anything allocate before it runs, that first allocation settles it instead (for
//! mimalloc), and `choose` leaves it be: the choice is a compare-and-swap from "unset", taken
//! once.
//!
//! The client's guess may be wrong (no server answers: the command then runs locally with the
//! system allocator); that costs speed on that one call, never correctness.
//!
//! This is the workspace's one crate with `unsafe` code (a global allocator is an `unsafe`
//! trait; the hook before `main` reads raw pointers): it is denied here as everywhere, and
//! allowed on the two items that need it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

const UNSET: u8 = 0;
const MIMALLOC: u8 = 1;
const SYSTEM: u8 = 2;

static CHOICE: AtomicU8 = AtomicU8::new(UNSET);

/// The run and task commands the CLI forwards to its warm server (`compat::warm` in the CLI):
/// the loop's commands, none of which reads stdin. A process started with one of them is a thin
/// client unless the server is turned off.
pub const THIN_CLIENT_COMMANDS: &[&str] = &[
    "run:iterate",
    "run:status",
    "run:events",
    "task:list",
    "task:show",
    "task:post",
];

/// The global allocator: mimalloc or the system's, as chosen for this process.
#[derive(Debug)]
pub struct Chosen;

#[inline]
fn system() -> bool {
    match CHOICE.load(Ordering::Relaxed) {
        SYSTEM => true,
        MIMALLOC => false,
        _ => settle(MIMALLOC) == SYSTEM,
    }
}

/// Whether this process allocates with the system's allocator (settling the choice, for
/// mimalloc, if nothing did yet).
pub fn system_in_use() -> bool {
    system()
}

/// Sets the choice unless it is set already; returns the one in force.
fn settle(choice: u8) -> u8 {
    match CHOICE.compare_exchange(UNSET, choice, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => choice,
        Err(set) => set,
    }
}

#[allow(unsafe_code)]
// SAFETY: every call goes to the allocator chosen for the whole process, which never changes
// once an allocation was made (see the module docs), so a block is always freed or resized by
// the allocator that made it; both allocators uphold `GlobalAlloc`'s contract.
unsafe impl GlobalAlloc for Chosen {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if system() {
            unsafe { System.alloc(layout) }
        } else {
            unsafe { mimalloc::MiMalloc.alloc(layout) }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if system() {
            unsafe { System.alloc_zeroed(layout) }
        } else {
            unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if system() {
            unsafe { System.dealloc(ptr, layout) }
        } else {
            unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if system() {
            unsafe { System.realloc(ptr, layout, new_size) }
        } else {
            unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
        }
    }
}

/// Whether a process started with these arguments (the command first) and this value of
/// `BABYSITTER_WARM` is a thin client of the warm server: one of [`THIN_CLIENT_COMMANDS`] with
/// the server not turned off. Reads only; allocates nothing.
pub fn thin_client<'a>(mut args: impl Iterator<Item = &'a [u8]>, env_warm: Option<&[u8]>) -> bool {
    let Some(command) = args.next() else {
        return false;
    };
    if !THIN_CLIENT_COMMANDS.iter().any(|c| c.as_bytes() == command) {
        return false;
    }
    let off = env_warm.is_some_and(|v| {
        let v = v.trim_ascii();
        [b"0".as_slice(), b"false", b"off", b"no"]
            .iter()
            .any(|o| v.eq_ignore_ascii_case(o))
    });
    !off
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
mod before_main {
    use std::ffi::{CStr, c_char, c_int};

    /// Called by glibc before `main` with the process's arguments and environment (see the
    /// module docs); settles [`super::CHOICE`].
    extern "C" fn choose(argc: c_int, argv: *const *const c_char, envp: *const *const c_char) {
        let argc = usize::try_from(argc).unwrap_or(0);
        // SAFETY: glibc passes `main`'s own argv (argc pointers to NUL-terminated strings) and
        // environment (NUL-terminated strings up to a null pointer); both live for the
        // process.
        let args = (1..argc).filter_map(|i| {
            let p = unsafe { *argv.add(i) };
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_bytes())
        });
        let mut warm = None;
        if !envp.is_null() {
            let mut i = 0;
            loop {
                let p = unsafe { *envp.add(i) };
                if p.is_null() {
                    break;
                }
                let entry = unsafe { CStr::from_ptr(p) }.to_bytes();
                if let Some(v) = entry.strip_prefix(b"BABYSITTER_WARM=") {
                    warm = Some(v);
                }
                i += 1;
            }
        }
        let choice = if super::thin_client(args, warm) {
            super::SYSTEM
        } else {
            super::MIMALLOC
        };
        super::settle(choice);
    }

    #[used]
    #[unsafe(link_section = ".init_array")]
    static CHOOSE: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = choose;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(args: &[&str], warm: Option<&str>) -> bool {
        thin_client(args.iter().map(|a| a.as_bytes()), warm.map(str::as_bytes))
    }

    #[test]
    fn forwarded_commands_are_thin_clients_unless_the_server_is_off() {
        assert!(client(&["run:iterate", "runs/x"], None));
        assert!(client(&["task:post", "runs/x", "e1"], Some("1")));
        assert!(!client(&["task:list", "runs/x"], Some(" Off ")));
        assert!(!client(&["task:list", "runs/x"], Some("0")));
        assert!(!client(&["run:create"], None), "not forwarded");
        assert!(!client(&["warm", "serve"], None));
        assert!(!client(&["run", "p.mjs"], None));
        assert!(!client(&[], None));
    }

    #[test]
    fn the_choice_made_for_this_process_is_in_force() {
        // The test binary has no `.init_array` hook of ours that sees a forwarded command:
        // whichever settled first (the hook or the first allocation), it is settled now and a
        // later choice does not change it.
        let before = CHOICE.load(Ordering::Acquire);
        assert_ne!(before, UNSET);
        assert_eq!(
            settle(if before == SYSTEM { MIMALLOC } else { SYSTEM }),
            before
        );
        assert_eq!(CHOICE.load(Ordering::Acquire), before);
    }
}
