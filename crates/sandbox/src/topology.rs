//! The ClickHouse installation the sandbox plays: shards of replicas, named and labelled as the
//! Altinity ClickHouse operator names them, so the product, kubectl and tests see what they would see
//! on a production cluster.
//!
//! The operator runs each replica as a StatefulSet `chi-<installation>-<cluster>-<shard>-<replica>`
//! with one pod (`...-0`) and a Service of the StatefulSet's name, which `remote_servers` and the
//! `{replica}` macro use. The installation is always `sandbox`; the cluster is
//! `SandboxOptions::cluster_name`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The installation name: the `clickhouse.altinity.com/chi` label and the second word of pod names.
pub(crate) const INSTALLATION: &str = "sandbox";

/// Replicas per shard: `Layout(vec![2, 1])` is shard 0 with two replicas and shard 1 with one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Layout(pub Vec<u32>);

impl Layout {
    /// One shard of `replicas` replicas: the sandbox's default shape (`--pods N`).
    pub fn replicas(replicas: u32) -> Layout {
        Layout(vec![replicas])
    }

    /// `shards` shards of `replicas` replicas each (`--shards N --replicas M`).
    pub fn grid(shards: u32, replicas: u32) -> Layout {
        Layout(vec![replicas; shards as usize])
    }

    /// How many pods the layout has.
    pub fn pods(&self) -> usize {
        self.0.iter().map(|r| *r as usize).sum()
    }

    /// `(shard, replica)` of every pod, shard by shard.
    pub(crate) fn places(&self) -> Vec<(u32, u32)> {
        self.0
            .iter()
            .enumerate()
            .flat_map(|(shard, replicas)| (0..*replicas).map(move |r| (shard as u32, r)))
            .collect()
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u32::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

/// `2,1`: replicas per shard, comma-separated; at least one shard, and every shard has a replica.
impl FromStr for Layout {
    type Err = String;

    fn from_str(s: &str) -> Result<Layout, String> {
        let replicas = s
            .split(',')
            .map(|part| {
                let n: u32 = part
                    .trim()
                    .parse()
                    .map_err(|_| format!("layout {s:?}: {part:?} is not a number of replicas"))?;
                if n == 0 {
                    return Err(format!("layout {s:?}: every shard needs at least one replica"));
                }
                Ok(n)
            })
            .collect::<Result<Vec<u32>, String>>()?;
        Ok(Layout(replicas))
    }
}

/// The StatefulSet (and Service) name of a replica: what the cluster knows it by.
pub(crate) fn service_name(cluster: &str, shard: u32, replica: u32) -> String {
    format!("chi-{INSTALLATION}-{cluster}-{shard}-{replica}")
}

/// The pod name of a replica: its StatefulSet's only pod.
pub(crate) fn pod_name(cluster: &str, shard: u32, replica: u32) -> String {
    format!("{}-0", service_name(cluster, shard, replica))
}

/// The Service of a pod named as the operator names them; a pod named otherwise is its own.
pub(crate) fn service_of(pod: &str) -> String {
    pod.strip_suffix("-0")
        .filter(|s| s.starts_with("chi-"))
        .unwrap_or(pod)
        .to_string()
}

/// `(shard, replica)` of a pod named as the operator names them in `cluster`.
pub(crate) fn place_of(cluster: &str, pod: &str) -> Option<(u32, u32)> {
    let rest = pod
        .strip_prefix(&format!("chi-{INSTALLATION}-{cluster}-"))?
        .strip_suffix("-0")?;
    let (shard, replica) = rest.split_once('-')?;
    Some((shard.parse().ok()?, replica.parse().ok()?))
}

/// The operator's labels on a replica's pod.
pub(crate) fn labels(
    namespace: &str,
    cluster: &str,
    shard: u32,
    replica: Option<u32>,
) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    let mut put = |k: &str, v: &str| l.insert(format!("clickhouse.altinity.com/{k}"), v.to_string());
    put("app", "chop");
    put("chi", INSTALLATION);
    put("cluster", cluster);
    put("namespace", namespace);
    put("shard", &shard.to_string());
    put("ready", "yes");
    if let Some(r) = replica {
        put("replica", &r.to_string());
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_parse_and_print() {
        assert_eq!("2,1".parse::<Layout>(), Ok(Layout(vec![2, 1])));
        assert_eq!(" 3 ".parse::<Layout>(), Ok(Layout::replicas(3)));
        assert_eq!(Layout::grid(2, 2).to_string(), "2,2");
        assert!(
            "2,0"
                .parse::<Layout>()
                .unwrap_err()
                .contains("at least one replica")
        );
        assert!(
            "2,x"
                .parse::<Layout>()
                .unwrap_err()
                .contains("\"x\" is not a number")
        );
        assert!("".parse::<Layout>().is_err());
        assert_eq!(Layout(vec![2, 1]).places(), [(0, 0), (0, 1), (1, 0)]);
        assert_eq!(Layout(vec![2, 1]).pods(), 3);
    }

    #[test]
    fn names_follow_the_operator() {
        assert_eq!(pod_name("main", 1, 0), "chi-sandbox-main-1-0-0");
        assert_eq!(service_name("main", 1, 0), "chi-sandbox-main-1-0");
        assert_eq!(service_of("chi-sandbox-main-1-0-0"), "chi-sandbox-main-1-0");
        assert_eq!(service_of("adhoc"), "adhoc");
        assert_eq!(place_of("main", "chi-sandbox-main-1-12-0"), Some((1, 12)));
        assert_eq!(place_of("main", "chi-sandbox-other-1-1-0"), None);
        assert_eq!(place_of("main", "adhoc"), None);
    }
}
