//! `gantry` serves from two processes, so that no backend process outlives it
//! however it ends (README "Health, metrics, logs and shutdown"):
//!
//! - the **supervisor** (the process you start, whose pid you see) is a child
//!   subreaper: it starts the worker, forwards SIGTERM / SIGINT / SIGHUP / SIGQUIT to
//!   it, reaps every orphan that is re-parented to it (backend grandchildren whose
//!   parent died, `setsid` daemons), and once the worker has exited stops whatever
//!   descendant is left, then exits with the worker's status;
//! - the **worker** (this same executable, marked by [`WORKER_ENV`]) is the gateway.
//!   It asks the kernel to send it SIGTERM when the supervisor dies, so even a
//!   `kill -9` of the supervisor ends in a clean shutdown that stops every backend;
//!   a `kill -9` (or OOM kill) of the worker leaves its backends to the supervisor,
//!   which stops them.
//!
//! Everything here is safe Rust over `nix` (no `unsafe`, no `pre_exec`).

use crate::process_tree;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::process::ExitCode;
use std::time::Duration;

/// Set in the worker's environment: the supervisor's pid.
pub const WORKER_ENV: &str = "GANTRY_SUPERVISOR_PID";

/// How long leftover descendants get between SIGTERM and SIGKILL.
const LEFTOVER_GRACE: Duration = Duration::from_secs(2);

/// Whether this process is the worker of a supervisor.
pub fn is_worker() -> bool {
    std::env::var_os(WORKER_ENV).is_some()
}

/// In the worker: be sent SIGTERM when the supervisor dies. Fails if the supervisor
/// is already gone (the worker must not run unsupervised then).
pub fn attach_worker() -> Result<(), String> {
    let Some(sup) = std::env::var(WORKER_ENV)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
    else {
        return Ok(());
    };
    nix::sys::prctl::set_pdeathsig(Some(Signal::SIGTERM))
        .map_err(|e| format!("cannot ask to be told of the supervisor's death: {e}"))?;
    // Checked after asking: a supervisor that died just before is not missed.
    if nix::unistd::getppid().as_raw() != sup {
        return Err("the supervising gantry process is gone".into());
    }
    Ok(())
}

/// Runs the supervisor: starts this executable again as the worker (same arguments,
/// same environment plus [`WORKER_ENV`]) and returns its exit status.
pub fn run() -> ExitCode {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!(error = %e, "cannot become a child subreaper; orphaned backend processes go to init");
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("gantry: cannot locate the gantry executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let me = std::process::id();
    let worker = match std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(WORKER_ENV, me.to_string())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gantry: cannot start the gateway process: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Ok(worker) = i32::try_from(worker.id()).map(Pid::from_raw) else {
        return ExitCode::FAILURE;
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gantry: cannot start the runtime: {e}");
            let _ = kill(worker, Signal::SIGTERM);
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(supervise(worker, me))
}

async fn supervise(worker: Pid, me: u32) -> ExitCode {
    use tokio::signal::unix::{signal, SignalKind};
    let mut waiter = tokio::task::spawn_blocking(move || wait_for(worker));
    let kinds = [
        (SignalKind::terminate(), Signal::SIGTERM),
        (SignalKind::interrupt(), Signal::SIGINT),
        (SignalKind::hangup(), Signal::SIGHUP),
        (SignalKind::quit(), Signal::SIGQUIT),
    ];
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for (kind, sig) in kinds {
        match signal(kind) {
            Ok(mut s) => {
                let tx = tx.clone();
                tokio::spawn(async move {
                    while s.recv().await.is_some() {
                        if tx.send(sig).is_err() {
                            break;
                        }
                    }
                });
            }
            Err(e) => tracing::warn!(error = %e, ?sig, "cannot forward this signal"),
        }
    }
    let status = loop {
        tokio::select! {
            done = &mut waiter => break done.unwrap_or(ExitCode::FAILURE),
            Some(sig) = rx.recv() => { let _ = kill(worker, sig); }
        }
    };
    // What the worker left behind (it stops its backends itself; this is for a
    // worker that was killed, and for daemons that escaped their backend).
    let me = i32::try_from(me).unwrap_or(0);
    let left = process_tree::descendants(me);
    if !left.is_empty() {
        let reaper = tokio::task::spawn_blocking(|| reap_for(LEFTOVER_GRACE * 2));
        let n = process_tree::stop_all(&left, LEFTOVER_GRACE).await;
        if n > 0 {
            tracing::warn!(processes = n, "stopped processes the gateway left behind");
        }
        let _ = reaper.await;
    }
    status
}

/// Waits for the worker, reaping every other child (adopted orphans) on the way.
fn wait_for(worker: Pid) -> ExitCode {
    loop {
        match waitpid(None::<Pid>, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == worker => {
                return ExitCode::from(u8::try_from(code).unwrap_or(1));
            }
            Ok(WaitStatus::Signaled(pid, sig, _)) if pid == worker => {
                return ExitCode::from(128u8.saturating_add(sig as u8));
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return ExitCode::FAILURE,
        }
    }
}

/// Reaps children until there are none left or about `within` has passed.
fn reap_for(within: Duration) {
    const NAP: Duration = Duration::from_millis(20);
    let mut naps = within.as_millis() / NAP.as_millis();
    while naps > 0 {
        match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {
                naps -= 1;
                std::thread::sleep(NAP);
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return,
        }
    }
}
