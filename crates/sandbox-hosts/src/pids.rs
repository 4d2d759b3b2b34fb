//! PID files under `run_dir/pids`, and stopping processes without ever signalling a PID that is not ours.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::error::{HostsError, IoContext};

/// How long a process is given to exit after SIGTERM before it is killed.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(5);

pub(crate) struct PidDir {
    dir: PathBuf,
}

impl PidDir {
    pub(crate) fn new(run_dir: &Path) -> PidDir {
        PidDir {
            dir: run_dir.join("pids"),
        }
    }

    pub(crate) fn record(&self, what: &str, pid: u32) -> Result<(), HostsError> {
        std::fs::create_dir_all(&self.dir).context(|| format!("creating {}", self.dir.display()))?;
        let path = self.dir.join(format!("{what}.pid"));
        std::fs::write(&path, format!("{pid}\n")).context(|| format!("writing {}", path.display()))
    }

    pub(crate) fn forget(&self, what: &str) {
        let _ = std::fs::remove_file(self.dir.join(format!("{what}.pid")));
    }

    /// Every recorded (name, pid); unreadable files are skipped because there is nothing safe to kill.
    pub(crate) fn list(&self) -> Vec<(String, i32)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let file_name = entry.file_name().to_string_lossy().into_owned();
            let Some(what) = file_name.strip_suffix(".pid") else {
                continue;
            };
            let Ok(text) = std::fs::read_to_string(entry.path()) else {
                continue;
            };
            if let Ok(pid) = text.trim().parse::<i32>()
                && pid > 1
            {
                out.push((what.to_string(), pid));
            }
        }
        out
    }
}

/// Alive means running: a zombie has already stopped serving and only waits to be reaped.
pub(crate) fn is_alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may itself contain ") ".
    match stat.rfind(") ") {
        Some(i) => !matches!(stat.as_bytes().get(i + 2), Some(b'Z') | Some(b'X')),
        None => false,
    }
}

/// A PID from a file may have been reused by an unrelated process since; only a process whose command
/// line mentions our run dir is one we started.
pub(crate) fn belongs_to(pid: i32, marker: &str) -> bool {
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(raw) => String::from_utf8_lossy(&raw).contains(marker),
        Err(_) => false,
    }
}

pub(crate) fn signal(pid: i32, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// SIGTERM every child at once (so their shutdowns overlap), SIGKILL whatever is left after `grace`,
/// and reap them all so none lingers as a zombie.
pub(crate) fn stop_children(children: &mut [&mut Child], grace: Duration) {
    for child in children.iter_mut() {
        if matches!(child.try_wait(), Ok(None)) {
            signal(child.id() as i32, libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + grace;
    loop {
        let mut running = 0;
        for child in children.iter_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                running += 1;
            }
        }
        if running == 0 {
            return;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for child in children.iter_mut() {
        if matches!(child.try_wait(), Ok(None)) {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

/// Same as [`stop_children`] for processes another (dead) process started: we cannot reap them, so we
/// only wait until they stop running. Only PIDs whose command line still names `marker` are signalled.
pub(crate) fn stop_foreign(pids: &[i32], marker: &str, grace: Duration) {
    stop_unreaped(pids, grace, |p| belongs_to(p, marker));
}

/// [`stop_foreign`] for processes found by what they hold (a crashed sandbox's namespace or address,
/// see `instance::reclaim`) rather than by a PID file, so there is no run dir to match.
pub(crate) fn stop_leftovers(pids: &[i32], grace: Duration) {
    stop_unreaped(pids, grace, |_| true);
}

fn stop_unreaped(pids: &[i32], grace: Duration, ours: impl Fn(i32) -> bool) {
    let ours_now: Vec<i32> = pids.iter().copied().filter(|&p| is_alive(p) && ours(p)).collect();
    for &pid in &ours_now {
        signal(pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while ours_now.iter().any(|&p| is_alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &pid in &ours_now {
        if is_alive(pid) && ours(pid) {
            signal(pid, libc::SIGKILL);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while ours_now.iter().any(|&p| is_alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}
