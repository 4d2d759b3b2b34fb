//! The sandbox's private L2 network: one bridge in the root namespace and one network namespace per host,
//! joined by a veth pair. Nothing is routed: no default route, no NAT, no ip_forward change, so traffic
//! only ever reaches addresses created here.
//!
//! Every created name is written to `run_dir/netns.list` *before* it is created, so a crash at any point
//! leaves a record that [`crate::cleanup_stale`] can act on. The same list records each host's UTS
//! namespace and hosts file (see [`crate::identity`]), which outlive their processes just the same.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{HostsError, IoContext};

pub(crate) fn bridge_name(instance: u8) -> String {
    format!("chsbx{instance}")
}

pub(crate) fn netns_name(instance: u8, host: &str) -> String {
    format!("chsbx{instance}-{host}")
}

/// Interface names are limited to 15 bytes, so the root-side veth is named after the address octet,
/// not the host name: `chsbx200h254` is the longest.
pub(crate) fn veth_name(instance: u8, octet: u8) -> String {
    format!("chsbx{instance}h{octet}")
}

/// The instance a created name belongs to: the digits after `chsbx` in every name above.
pub(crate) fn instance_of(name: &str) -> Option<u8> {
    let rest = name.strip_prefix("chsbx")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    rest[..digits].parse().ok()
}

pub(crate) fn bridge_ip(instance: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 250, instance, 1)
}

pub(crate) fn host_ip(instance: u8, octet: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 250, instance, octet)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Bridge,
    Netns,
    Veth,
    /// A persistent UTS namespace, named by the host's netns (see `identity::uts_file`).
    Uts,
    /// The `/etc/netns/<netns>/` directory with the host's hosts file.
    Etc,
}

impl Kind {
    pub(crate) fn word(self) -> &'static str {
        match self {
            Kind::Bridge => "bridge",
            Kind::Netns => "netns",
            Kind::Veth => "veth",
            Kind::Uts => "uts",
            Kind::Etc => "etc",
        }
    }
}

pub(crate) struct Records {
    path: PathBuf,
}

impl Records {
    pub(crate) fn new(run_dir: &Path) -> Records {
        Records {
            path: run_dir.join("netns.list"),
        }
    }

    pub(crate) fn read(&self) -> Vec<(Kind, String)> {
        let Ok(text) = std::fs::read_to_string(&self.path) else {
            return Vec::new();
        };
        text.lines()
            .filter_map(|line| {
                let (kind, name) = line.split_once(' ')?;
                let kind = match kind {
                    "bridge" => Kind::Bridge,
                    "netns" => Kind::Netns,
                    "veth" => Kind::Veth,
                    "uts" => Kind::Uts,
                    "etc" => Kind::Etc,
                    _ => return None,
                };
                Some((kind, name.to_string()))
            })
            .collect()
    }

    fn write(&self, entries: &[(Kind, String)]) -> Result<(), HostsError> {
        let text: String = entries
            .iter()
            .map(|(k, n)| format!("{} {n}\n", k.word()))
            .collect();
        let tmp = self.path.with_extension("list.tmp");
        std::fs::write(&tmp, text).context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &self.path).context(|| format!("renaming to {}", self.path.display()))
    }

    pub(crate) fn add(&self, kind: Kind, name: &str) -> Result<(), HostsError> {
        let mut entries = self.read();
        if !entries.iter().any(|(k, n)| *k == kind && n == name) {
            entries.push((kind, name.to_string()));
            self.write(&entries)?;
        }
        Ok(())
    }

    /// The instances the recorded names belong to.
    pub(crate) fn instances(&self) -> Vec<u8> {
        let mut found: Vec<u8> = self.read().iter().filter_map(|(_, n)| instance_of(n)).collect();
        found.sort_unstable();
        found.dedup();
        found
    }

    /// Drops every name of instance `i` from the record without deleting it.
    pub(crate) fn forget_instance(&self, i: u8) -> Result<(), HostsError> {
        let mut entries = self.read();
        entries.retain(|(_, n)| instance_of(n) != Some(i));
        self.write(&entries)
    }

    pub(crate) fn remove(&self, kind: Kind, name: &str) -> Result<(), HostsError> {
        let mut entries = self.read();
        let before = entries.len();
        entries.retain(|(k, n)| !(*k == kind && n == name));
        if entries.len() != before {
            self.write(&entries)?;
        }
        Ok(())
    }
}

fn ip(args: &[&str]) -> Result<(), HostsError> {
    run("ip", args, "iproute2")
}

/// Runs a system tool (`package` names where it comes from, for the error) and fails with its stderr.
pub(crate) fn run(program: &str, args: &[&str], package: &str) -> Result<(), HostsError> {
    let out = Command::new(program)
        .args(args)
        .output()
        .context(|| format!("running `{program}` (is {package} installed?)"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(HostsError::Command {
        command: format!("{program} {}", args.join(" ")),
        status: out.status.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

pub(crate) fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

pub(crate) fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

pub(crate) fn create_bridge(records: &Records, instance: u8) -> Result<(), HostsError> {
    let bridge = bridge_name(instance);
    if link_exists(&bridge) {
        return Err(HostsError::InvalidOptions(format!(
            "network interface {bridge} appeared after instance {instance} was reclaimed: something other \
             than a sandbox made it; delete it or pick another instance"
        )));
    }
    records.add(Kind::Bridge, &bridge)?;
    // A bridge without an explicit MAC takes the lowest of its ports' MACs, so removing a host could
    // change it and leave every other namespace with a stale ARP entry for the bridge (ZooKeeper then
    // times out for a minute). A fixed, locally administered address avoids that.
    let mac = format!("02:00:0a:fa:{instance:02x}:01");
    ip(&["link", "add", &bridge, "address", &mac, "type", "bridge"])?;
    ip(&[
        "addr",
        "add",
        &format!("{}/24", bridge_ip(instance)),
        "dev",
        &bridge,
    ])?;
    ip(&["link", "set", &bridge, "up"])
}

/// Checked before anything is recorded: a recorded name is one this sandbox may delete.
pub(crate) fn check_host_free(instance: u8, netns: &str, veth: &str) -> Result<(), HostsError> {
    if netns_exists(netns) || link_exists(veth) {
        return Err(HostsError::InvalidOptions(format!(
            "network namespace {netns} or interface {veth} appeared after instance {instance} was \
             reclaimed: something other than a sandbox made it; delete it or pick another instance"
        )));
    }
    Ok(())
}

pub(crate) fn create_host(
    records: &Records,
    instance: u8,
    netns: &str,
    veth: &str,
    addr: Ipv4Addr,
) -> Result<(), HostsError> {
    records.add(Kind::Netns, netns)?;
    records.add(Kind::Veth, veth)?;
    ip(&["netns", "add", netns])?;
    // The peer is created directly inside the namespace as `eth0`, like a pod's interface.
    ip(&[
        "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns,
    ])?;
    ip(&["-n", netns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
    ip(&["-n", netns, "link", "set", "eth0", "up"])?;
    ip(&["-n", netns, "link", "set", "lo", "up"])?;
    ip(&["link", "set", veth, "master", &bridge_name(instance), "up"])
}

/// Deleting the namespace destroys its `eth0` and with it the root-side veth; the explicit link delete
/// only matters when the namespace was never created.
pub(crate) fn delete_host(records: &Records, netns: &str, veth: &str) -> Result<(), HostsError> {
    delete_netns(records, netns)?;
    delete_veth(records, veth)
}

pub(crate) fn delete_netns(records: &Records, netns: &str) -> Result<(), HostsError> {
    if netns_exists(netns) {
        ip(&["netns", "del", netns])?;
    }
    records.remove(Kind::Netns, netns)
}

pub(crate) fn delete_veth(records: &Records, veth: &str) -> Result<(), HostsError> {
    // The kernel removes the root-side veth asynchronously after its namespace went away, so it can
    // vanish between the check and the delete.
    if link_exists(veth)
        && let Err(e) = ip(&["link", "del", veth])
        && link_exists(veth)
    {
        return Err(e);
    }
    records.remove(Kind::Veth, veth)
}

pub(crate) fn delete_bridge(records: &Records, bridge: &str) -> Result<(), HostsError> {
    if link_exists(bridge) {
        ip(&["link", "del", bridge])?;
    }
    records.remove(Kind::Bridge, bridge)
}
