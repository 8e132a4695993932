//! The pinned layout (`--pin`): the load generator on one CPU, the servers on the
//! other.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

/// The CPU of the load generator, and the one of every server.
pub(crate) const GENERATOR_CPU: usize = 0;
pub(crate) const SERVER_CPU: usize = 1;

static PINNED: AtomicBool = AtomicBool::new(false);
/// CPUs of the machine, counted before the generator was pinned to one.
static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// CPUs of the machine (not only those this process may use once pinned).
pub(crate) fn machine_cpus() -> usize {
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(0, |n| n.get()))
}

/// Pins this process (the threads it starts from now on) to [`GENERATOR_CPU`];
/// servers started afterwards go to [`SERVER_CPU`].
pub(crate) fn generator() -> Result<()> {
    if machine_cpus() < 2 {
        bail!("the pinned layout needs 2 CPUs");
    }
    let which = Command::new("taskset").arg("-V").output();
    if !which.is_ok_and(|o| o.status.success()) {
        bail!("`taskset` (util-linux) is needed to pin the servers");
    }
    let mut set = nix::sched::CpuSet::new();
    set.set(GENERATOR_CPU).context("CPU set")?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .context("cannot pin the load generator")?;
    PINNED.store(true, Ordering::Relaxed);
    Ok(())
}

pub(crate) fn pinned() -> bool {
    PINNED.load(Ordering::Relaxed)
}

/// The command that starts `program`: on [`SERVER_CPU`] when pinned (through
/// `taskset`, which execs it: the pid is the server's; what it starts inherits
/// the CPU).
pub(crate) fn server_command(program: &Path) -> Command {
    if !pinned() {
        return Command::new(program);
    }
    let mut cmd = Command::new("taskset");
    cmd.arg("-c").arg(SERVER_CPU.to_string()).arg(program);
    cmd
}
