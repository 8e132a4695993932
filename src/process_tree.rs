//! Finding a process's descendants from `/proc` (Linux), so that processes which
//! left their process group (`setsid`, double forks) can still be found and stopped.
//! A process is identified by its pid *and* its start time, so a pid reused by an
//! unrelated process is never signalled.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::HashMap;

/// A process: its pid and its start time (clock ticks since boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Proc {
    /// Process id.
    pub pid: i32,
    start: u64,
}

/// `(ppid, state, start time)` of a process, from `/proc/PID/stat`.
fn stat(pid: i32) -> Option<(i32, char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let ppid = fields.get(1)?.parse().ok()?;
    // Field 22 of stat (starttime) is the 20th after the command name.
    let start = fields.get(19)?.parse().ok()?;
    Some((ppid, state, start))
}

/// Every live descendant of `root` (children, grandchildren, …), whatever their
/// process group or session.
pub fn descendants(root: i32) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: HashMap<i32, Vec<Proc>> = HashMap::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some((ppid, state, start)) = stat(pid) {
            if state != 'Z' {
                children.entry(ppid).or_default().push(Proc { pid, start });
            }
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    // Bounded: a pid is visited at most once even if /proc changed under the walk.
    while let Some(p) = frontier.pop() {
        if let Some(kids) = children.remove(&p) {
            for k in kids {
                frontier.push(k.pid);
                out.push(k);
            }
        }
    }
    out
}

impl Proc {
    /// Whether this very process still runs (not a zombie, not a reused pid).
    pub fn alive(&self) -> bool {
        stat(self.pid).is_some_and(|(_, state, start)| state != 'Z' && start == self.start)
    }

    /// Sends `sig` if this very process still runs.
    pub fn signal(&self, sig: Signal) {
        if self.alive() {
            let _ = kill(Pid::from_raw(self.pid), sig);
        }
    }
}

/// Stops `procs` that still run: SIGTERM, then SIGKILL for those alive after
/// `grace`. Returns how many had to be stopped.
pub async fn stop_all(procs: &[Proc], grace: std::time::Duration) -> usize {
    let alive: Vec<Proc> = procs.iter().copied().filter(Proc::alive).collect();
    if alive.is_empty() {
        return 0;
    }
    for p in &alive {
        p.signal(Signal::SIGTERM);
    }
    let deadline = tokio::time::Instant::now() + grace;
    while alive.iter().any(Proc::alive) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for p in &alive {
        p.signal(Signal::SIGKILL);
    }
    alive.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn finds_and_stops_a_grandchild_that_left_the_group() {
        // sh starts a sleep in a new session (setsid) and waits for it.
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", "setsid sleep 30 & wait"])
            .spawn()
            .unwrap();
        let root = i32::try_from(child.id().unwrap()).unwrap();
        let end = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        let family = loop {
            let f = descendants(root);
            if !f.is_empty() || tokio::time::Instant::now() > end {
                break f;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        assert_eq!(family.len(), 1, "{family:?}");
        assert!(family.iter().all(Proc::alive));
        assert_eq!(
            stop_all(&family, std::time::Duration::from_secs(2)).await,
            1
        );
        let _ = child.wait().await;
        assert!(!family.iter().any(Proc::alive));
        assert_eq!(
            stop_all(&family, std::time::Duration::from_secs(1)).await,
            0
        );
    }
}
