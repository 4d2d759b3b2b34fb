//! What a pod's image has besides ClickHouse ([`Userland`]), as far as an exec meets it: an image
//! without a shell (the `-distroless` tags) makes the container runtime refuse any other program,
//! and BusyBox before 1.35 has a `timeout` that refuses `-k`. The sandbox runs every pod's processes
//! on this machine's tools, so both are imitated here: the refusal with the text kubelet passes on
//! from containerd's runc, and the old `timeout` with a shim first on the exec's PATH.

use std::path::{Path, PathBuf};

use crate::pods::Userland;

/// BusyBox 1.34's `timeout` as the exec command meets it: `-k` refused with BusyBox's words and
/// usage (exit 1); `[-s SIG] SECS PROG ARGS` runs PROG under this machine's `timeout`, so the bound
/// still holds.
const BUSYBOX_TIMEOUT: &str = r#"#!/bin/sh
# BusyBox 1.34's timeout (sandbox, crates/sandbox/src/images.rs).
case "$1" in
  -k*)
    printf "timeout: invalid option -- 'k'\nBusyBox v1.34.1 (2022-04-04 20:54:07 UTC) multi-call binary.\n\nUsage: timeout [-s SIG] SECS PROG ARGS\n" >&2
    exit 1;;
esac
sig=TERM
if [ "$1" = -s ]; then sig=$2; shift 2; fi
secs=$1; shift
exec /usr/bin/timeout -s "$sig" "$secs" "$@"
"#;

/// Where the shims of every userland live: `<sandbox dir>/images/<userland>/bin`.
#[derive(Debug, Clone)]
pub(crate) struct Images {
    busybox_bin: PathBuf,
}

impl Images {
    /// Writes the shims under `dir`.
    pub(crate) fn install(dir: &Path) -> std::io::Result<Images> {
        let busybox_bin = dir.join("images").join("busybox-1.34").join("bin");
        std::fs::create_dir_all(&busybox_bin)?;
        let timeout = busybox_bin.join("timeout");
        std::fs::write(&timeout, BUSYBOX_TIMEOUT)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&timeout, std::fs::Permissions::from_mode(0o755))?;
        Ok(Images { busybox_bin })
    }

    /// The PATH the image gives its processes.
    pub(crate) fn path(&self, userland: Userland) -> String {
        let stock = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        match userland {
            Userland::Busybox134 => format!("{}:{stock}", self.busybox_bin.display()),
            Userland::Standard | Userland::Distroless => stock.to_owned(),
        }
    }
}

/// Why the container runtime cannot start `program` in an image of `userland`, in the words
/// kubelet passes on (containerd with runc; `exec_id` stands for the runtime's exec id): `None`
/// when it can. A distroless image has ClickHouse's programs and nothing else.
pub(crate) fn cannot_start(userland: Userland, program: &str, exec_id: u64) -> Option<String> {
    if userland != Userland::Distroless {
        return None;
    }
    let name = program.rsplit('/').next().unwrap_or(program);
    if name == "clickhouse" || name.starts_with("clickhouse-") {
        return None;
    }
    let not_found = if program.contains('/') {
        format!("exec: \"{program}\": stat {program}: no such file or directory")
    } else {
        format!("exec: \"{program}\": executable file not found in $PATH")
    };
    Some(format!(
        "error executing command in container: failed to exec in container: failed to start exec \
         \"{exec_id:064x}\": OCI runtime exec failed: exec failed: unable to start container process: \
         {not_found}: unknown"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_distroless_image_starts_clickhouse_and_nothing_else() {
        assert_eq!(cannot_start(Userland::Distroless, "clickhouse-client", 1), None);
        assert_eq!(cannot_start(Userland::Distroless, "/usr/bin/clickhouse", 1), None);
        let sh = cannot_start(Userland::Distroless, "sh", 1).expect("no shell");
        assert!(
            sh.contains("exec: \"sh\": executable file not found in $PATH: unknown"),
            "{sh}"
        );
        assert_eq!(cannot_start(Userland::Standard, "sh", 1), None);
        assert_eq!(cannot_start(Userland::Busybox134, "sh", 1), None);
    }
}
