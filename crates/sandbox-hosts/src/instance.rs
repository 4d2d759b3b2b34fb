//! Who owns an instance number, and what to do with names a dead owner left behind.
//!
//! Every name a sandbox creates carries its instance (`chsbx<i>`, `chsbx<i>-<host>`, `chsbx<i>h<octet>`),
//! and its ZooKeeper listens on `10.250.<i>.1`. A live sandbox holds an exclusive `flock` on
//! `/run/chsbx-instances/<i>.lock` for as long as it runs; the kernel drops the lock when the process
//! dies, however it dies. So once we hold the lock, anything still named for the instance belongs to a
//! sandbox that crashed (SIGKILL, OOM, a killed test run) whose run directory may be gone, and
//! [`reclaim`] removes it rather than refusing to start until someone cleans up by hand.
//!
//! `/run` is a tmpfs, like the namespaces and interfaces the lock guards: a reboot clears both.

use std::fs::File;
use std::net::Ipv4Addr;
use std::path::Path;

use crate::error::{HostsError, IoContext};
use crate::netns::{self, Kind, Records};
use crate::{cleanup, pids, zookeeper};

const LOCK_DIR: &str = "/run/chsbx-instances";
/// Reservations are not instance locks: a reserved instance can still be claimed, by its reserver.
const RESERVATION_DIR: &str = "/run/chsbx-instances/reserved";
/// The instance numbers a sandbox may use: the third octet of its subnet.
pub(crate) const INSTANCES: std::ops::RangeInclusive<u8> = 1..=200;

/// An instance number and the lock that makes it ours until this value is dropped.
pub(crate) struct InstanceLock {
    pub(crate) instance: u8,
    _file: File,
}

/// Locks `wanted`, or the lowest free instance when `None`.
pub(crate) fn claim(wanted: Option<u8>) -> Result<InstanceLock, HostsError> {
    if let Some(i) = wanted
        && !INSTANCES.contains(&i)
    {
        return Err(HostsError::InvalidOptions(format!(
            "instance {i} is not in {}..={}",
            INSTANCES.start(),
            INSTANCES.end()
        )));
    }
    std::fs::create_dir_all(LOCK_DIR).context(|| format!("creating {LOCK_DIR}"))?;
    let candidates: Vec<u8> = match wanted {
        Some(i) => vec![i],
        None => INSTANCES.collect(),
    };
    for instance in candidates {
        let file = lock_file(LOCK_DIR, instance)?;
        if file.try_lock().is_ok() {
            return Ok(InstanceLock {
                instance,
                _file: file,
            });
        }
    }
    Err(match wanted {
        Some(i) => HostsError::InstanceBusy(i),
        None => HostsError::NoFreeInstance,
    })
}

/// A reservation of one instance number, held until dropped; see [`reserve`].
#[must_use = "the reservation ends when this is dropped"]
pub struct Reservation {
    _file: File,
}

/// Waits until no other holder reserves `instance`, then reserves it. For tests that crash a sandbox
/// and must come back to its instance: between the crash and the return the instance lock is free, so
/// another run of the same test on this machine could take it. A sandbox that takes whichever instance
/// is free ([`claim`] with `None`) takes the lowest, so a reserved number far above what runs at once
/// is only ever wanted by another reserver, and this makes that one wait rather than fail.
pub fn reserve(instance: u8) -> Result<Reservation, HostsError> {
    std::fs::create_dir_all(RESERVATION_DIR).context(|| format!("creating {RESERVATION_DIR}"))?;
    let file = lock_file(RESERVATION_DIR, instance)?;
    file.lock()
        .context(|| format!("locking {RESERVATION_DIR}/{instance}.lock"))?;
    Ok(Reservation { _file: file })
}

/// `<dir>/<instance>.lock`, opened for locking (created when missing, never truncated).
fn lock_file(dir: &str, instance: u8) -> Result<File, HostsError> {
    let path = Path::new(dir).join(format!("{instance}.lock"));
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .context(|| format!("opening {}", path.display()))
}

/// Removes what a crashed sandbox left on `lock`'s instance and returns what it found, one line each
/// (empty when nothing was left). Processes go first: the servers inside its namespaces and a
/// ZooKeeper still listening on its bridge address. The names are then written to this run's record
/// before they are deleted, so a crash halfway through leaves them to `cleanup_stale` like our own.
pub(crate) fn reclaim(lock: &InstanceLock, records: &Records) -> Result<Vec<String>, HostsError> {
    let i = lock.instance;
    let host_prefix = format!("{}-", netns::bridge_name(i));
    let veth_prefix = format!("{}h", netns::bridge_name(i));
    let mut found = Vec::new();

    let namespaces = names_in("/run/netns", |n| n.starts_with(&host_prefix));
    let mut processes: Vec<i32> = namespaces.iter().flat_map(|ns| pids_in_netns(ns)).collect();
    processes.extend(listeners(netns::bridge_ip(i), zookeeper::CLIENT_PORT));
    processes.sort_unstable();
    processes.dedup();
    if !processes.is_empty() {
        found.push(format!("processes {processes:?}"));
        pids::stop_leftovers(&processes, pids::STOP_GRACE);
    }

    let mut leftovers: Vec<(Kind, String)> = Vec::new();
    let uts = names_in(crate::identity::UTS_DIR, |n| n.starts_with(&host_prefix));
    let etc = names_in(crate::identity::ETC_NETNS_DIR, |n| n.starts_with(&host_prefix));
    let veths = names_in("/sys/class/net", |n| {
        n.strip_prefix(&veth_prefix)
            .is_some_and(|octet| !octet.is_empty() && octet.bytes().all(|b| b.is_ascii_digit()))
    });
    leftovers.extend(uts.into_iter().map(|n| (Kind::Uts, n)));
    leftovers.extend(etc.into_iter().map(|n| (Kind::Etc, n)));
    leftovers.extend(namespaces.into_iter().map(|n| (Kind::Netns, n)));
    leftovers.extend(veths.into_iter().map(|n| (Kind::Veth, n)));
    if netns::link_exists(&netns::bridge_name(i)) {
        leftovers.push((Kind::Bridge, netns::bridge_name(i)));
    }
    for (kind, name) in &leftovers {
        records.add(*kind, name)?;
        found.push(format!("{} {name}", kind.word()));
    }
    cleanup::delete_recorded(records)?;
    Ok(found)
}

/// Entry names of `dir` that `keep` accepts; a missing directory has none.
fn names_in(dir: &str, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| keep(n))
        .collect();
    names.sort();
    names
}

/// Every process inside the named network namespace (`ip netns pids`).
fn pids_in_netns(netns: &str) -> Vec<i32> {
    let Ok(out) = std::process::Command::new("ip")
        .args(["netns", "pids", netns])
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|&p| p > 1)
        .collect()
}

/// Processes of the root namespace with a TCP socket listening on `addr:port` (IPv4 only: ZooKeeper is
/// started with `preferIPv4Stack`). Found by the socket's inode in /proc/net/tcp, then in /proc/*/fd.
fn listeners(addr: Ipv4Addr, port: u16) -> Vec<i32> {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return Vec::new();
    };
    // /proc/net/tcp prints the address as the in-memory u32 in hex, the port big-endian.
    let local = format!("{:08X}:{port:04X}", u32::from_ne_bytes(addr.octets()));
    const LISTEN: &str = "0A";
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&LISTEN))
                .then(|| fields.get(9).map(|s| format!("socket:[{s}]")))
                .flatten()
        })
        .collect();
    if inodes.is_empty() {
        return Vec::new();
    }
    let mut owners = Vec::new();
    for pid in names_in("/proc", |n| n.bytes().all(|b| b.is_ascii_digit())) {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|target| inodes.iter().any(|i| target == Path::new(i)))
        });
        if holds && let Ok(pid) = pid.parse() {
            owners.push(pid);
        }
    }
    owners
}
