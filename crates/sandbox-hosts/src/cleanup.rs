//! Removing what `netns.list` records, whoever created it: each host's identity (`identity`),
//! then the namespaces and the bridge they hang off (`netns`). Its own module because it needs
//! both, and `identity` is built on `netns`.

use crate::error::HostsError;
use crate::identity;
use crate::netns::{self, Kind, Records};

/// Remove everything recorded: each host's identity, then the namespaces, then the bridge they hang off.
pub(crate) fn delete_recorded(records: &Records) -> Result<(), HostsError> {
    let mut first_error = None;
    for kind in [Kind::Uts, Kind::Etc, Kind::Netns, Kind::Veth, Kind::Bridge] {
        for (_, name) in records.read().into_iter().filter(|(k, _)| *k == kind) {
            let res = match kind {
                Kind::Uts => identity::delete_uts(records, &name),
                Kind::Etc => identity::delete_etc(records, &name),
                Kind::Netns => netns::delete_netns(records, &name),
                Kind::Veth => netns::delete_veth(records, &name),
                Kind::Bridge => netns::delete_bridge(records, &name),
            };
            if let Err(e) = res {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
