//! The state a successful apply records: the resource's outputs.
//!
//! It describes what was applied (fingerprint, statement count), where it
//! landed (target, cluster identity) and which pod objects were covered (name
//! and uid). It never holds a statement, a setting value, a kubeconfig or a
//! credential: state is stored by Alchemy and shown in plans.
//!
//! The shape is versioned (`stateVersion`, `STATE_VERSION`) and checked on
//! every read ([`SchemaState::from_json`]), so a future change of shape has
//! exactly one place to migrate from, and a state from a newer release is
//! refused instead of misread.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::config::{ResolvedConfig, Target};
use crate::error::ConfigIssue;
use crate::transport::{Clock, Cluster, PodInfo};

/// The shape of [`SchemaState`] this release writes and reads.
pub(crate) const STATE_VERSION: u32 = 1;

/// What an apply records (the resource's outputs), and what the next call
/// reads back to decide whether to run again. Declared here once: the
/// binding's `index.d.ts` is generated from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(object, object_to_js = false, object_from_js = false)
)]
pub struct SchemaState {
    /// The shape's version (1 for this release), checked when the state is read back.
    pub state_version: u32,
    /// Fingerprint of the config that was applied (see `fingerprint()`).
    pub fingerprint: String,
    /// ISO-8601 UTC time of the apply that wrote this state.
    pub applied_at: String,
    /// Number of statements applied.
    pub statement_count: u32,
    /// `client.database` the statements ran in.
    pub database: String,
    /// Where the statements ran.
    pub target: RecordedTarget,
    /// Sorted pod names: the same pods as `pods`, as a plain list for outputs.
    pub pod_names: Vec<String>,
    /// The pod objects covered, sorted by name.
    pub pods: Vec<PodRef>,
    /// Credential-free identity of the cluster the statements reached (a
    /// sha256 of the kubeconfig's cluster name, server, CA and TLS mode);
    /// absent when it could not be known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
}

/// The target (`namespace`, `podSelector`, `container`) as recorded in state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(object, object_to_js = false, object_from_js = false)
)]
pub struct RecordedTarget {
    /// Namespace the pods were in.
    pub namespace: String,
    /// Label selector the pods were matched with.
    pub pod_selector: BTreeMap<String, String>,
    /// Server container the statements ran in.
    pub container: String,
}

impl RecordedTarget {
    pub(crate) fn from_target(target: &Target) -> Self {
        Self {
            namespace: target.namespace.clone(),
            pod_selector: target.pod_selector.clone(),
            container: target.container.clone(),
        }
    }

    /// Same place as `target`?
    pub(crate) fn matches(&self, target: &Target) -> bool {
        self.namespace == target.namespace
            && self.pod_selector == target.pod_selector
            && self.container == target.container
    }

    /// The resolved target this state says the statements were applied to.
    pub(crate) fn to_target(&self) -> Target {
        Target {
            namespace: self.namespace.clone(),
            pod_selector: self.pod_selector.clone(),
            container: self.container.clone(),
        }
    }
}

/// One covered pod object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(object, object_to_js = false, object_from_js = false)
)]
pub struct PodRef {
    /// Pod name.
    pub name: String,
    /// `metadata.uid`; absent when the executor could not tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl PodRef {
    pub(crate) fn of(pod: &PodInfo) -> Self {
        Self {
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        }
    }
}

impl SchemaState {
    /// Reads a recorded state: its `stateVersion` first (a state of another
    /// version is refused with what to do), then its shape. `Err` is the
    /// reason, for an issue at the argument's path.
    pub fn from_json(value: serde_json::Value) -> Result<Self, String> {
        match value.get("stateVersion").and_then(serde_json::Value::as_u64) {
            Some(v) if v == u64::from(STATE_VERSION) => {}
            Some(v) => {
                return Err(format!(
                    "has stateVersion {v}, and this release reads version {STATE_VERSION}: it was written by \
                     another release of alchemy-clickhouse-schema; deploy with that release, or restore the \
                     state the last deploy of this release wrote"
                ));
            }
            None => {
                return Err(
                    "is not a ClickHouseSchema state (it has no stateVersion): it was not written by this \
                     resource, or was edited by hand"
                        .to_owned(),
                );
            }
        }
        serde_json::from_value(value).map_err(|e| {
            format!("is not a ClickHouseSchema state ({e}): it was not written by this resource, or was edited by hand")
        })
    }

    /// Problems with the recorded target, checked by the same rules as the
    /// props' `target` (paths under `state.target`), and any way it differs
    /// from `target`, the props' one. Empty when the state may be acted on.
    pub(crate) fn target_issues(&self, resource_id: &str, target: &Target) -> Vec<ConfigIssue> {
        let as_props = serde_json::json!({
            "target": {
                "namespace": self.target.namespace,
                "podSelector": self.target.pod_selector,
                "container": self.target.container,
            },
            "statements": ["SELECT 1"],
        });
        if let Err(err) = crate::config::validate::validate(resource_id, &as_props) {
            return err
                .issues
                .into_iter()
                .map(|i| ConfigIssue {
                    path: format!("state.{}", i.path),
                    reason: i.reason,
                })
                .collect();
        }
        let mut issues = Vec::new();
        let recorded = self.target.to_target();
        if recorded.namespace != target.namespace {
            issues.push(ConfigIssue {
                path: "state.target.namespace".to_owned(),
                reason: format!(
                    "is '{}', but the props' target.namespace is '{}': the state was not written for this \
                     resource's target",
                    recorded.namespace, target.namespace
                ),
            });
        }
        if recorded.pod_selector != target.pod_selector {
            issues.push(ConfigIssue {
                path: "state.target.podSelector".to_owned(),
                reason: format!(
                    "is {}, but the props' target.podSelector is {}: the state was not written for this \
                     resource's target",
                    crate::kubernetes::selector::selector_text(&recorded.pod_selector),
                    crate::kubernetes::selector::selector_text(&target.pod_selector)
                ),
            });
        }
        if recorded.container != target.container {
            issues.push(ConfigIssue {
                path: "state.target.container".to_owned(),
                reason: format!(
                    "is '{}', but the props' target.container is '{}'",
                    recorded.container, target.container
                ),
            });
        }
        issues
    }

    /// Does the live set of matching pods equal the recorded one? Compared by
    /// name and uid, so a replaced pod (same name, new uid) is a change.
    pub(crate) fn pod_set_matches(&self, live: &[PodRef]) -> bool {
        let recorded: BTreeSet<&PodRef> = self.pods.iter().collect();
        let live: BTreeSet<&PodRef> = live.iter().collect();
        recorded == live
    }

    /// Pods this state proves were applied to, by name and uid. A pod
    /// recorded without a uid (an executor that could not tell) proves
    /// nothing about the pod object alive now.
    pub fn covered_pods(&self) -> Vec<PodRef> {
        self.pods.iter().filter(|p| p.uid.is_some()).cloned().collect()
    }
}

pub(crate) fn statement_count(config: &ResolvedConfig) -> u32 {
    u32::try_from(config.statements.len()).unwrap_or(u32::MAX)
}

pub(crate) fn record<T, C: Clock>(
    config: &ResolvedConfig,
    fingerprint: String,
    mut pods: Vec<PodRef>,
    cluster: &Cluster<'_, T, C>,
) -> SchemaState {
    pods.sort();
    SchemaState {
        state_version: STATE_VERSION,
        fingerprint,
        applied_at: cluster.clock.now_iso8601(),
        statement_count: statement_count(config),
        database: config.client.database.clone(),
        target: RecordedTarget::from_target(&config.target),
        pod_names: pods.iter().map(|p| p.name.clone()).collect(),
        pods,
        cluster_id: cluster.cluster_id.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, uid: &str) -> PodRef {
        PodRef {
            name: name.into(),
            uid: Some(uid.into()),
        }
    }

    fn state(pods: Vec<PodRef>) -> SchemaState {
        SchemaState {
            state_version: STATE_VERSION,
            fingerprint: "f".into(),
            applied_at: "2026-01-01T00:00:00.000Z".into(),
            statement_count: 1,
            database: "default".into(),
            target: RecordedTarget {
                namespace: "ns".into(),
                pod_selector: BTreeMap::new(),
                container: "clickhouse".into(),
            },
            pod_names: pods.iter().map(|p| p.name.clone()).collect(),
            pods,
            cluster_id: None,
        }
    }

    #[test]
    fn uid_is_the_identity() {
        let s = state(vec![pod("a", "1"), pod("b", "2")]);
        assert!(s.pod_set_matches(&[pod("b", "2"), pod("a", "1")]));
        assert!(!s.pod_set_matches(&[pod("a", "1"), pod("b", "3")]), "replacement");
        assert!(!s.pod_set_matches(&[pod("a", "1")]), "removal");
        assert!(
            !s.pod_set_matches(&[pod("a", "1"), pod("b", "2"), pod("c", "4")]),
            "addition"
        );
    }

    #[test]
    fn serializes_as_the_documented_outputs_and_reads_back() {
        let s = state(vec![pod("a", "1")]);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "stateVersion": 1,
                "fingerprint": "f",
                "appliedAt": "2026-01-01T00:00:00.000Z",
                "statementCount": 1,
                "database": "default",
                "target": { "namespace": "ns", "podSelector": {}, "container": "clickhouse" },
                "podNames": ["a"],
                "pods": [{ "name": "a", "uid": "1" }]
            })
        );
        assert_eq!(SchemaState::from_json(json).unwrap(), s);
    }

    #[test]
    fn another_state_version_or_none_is_refused_by_name() {
        let mut json = serde_json::to_value(state(vec![])).unwrap();
        json["stateVersion"] = serde_json::json!(2);
        let err = SchemaState::from_json(json.clone()).unwrap_err();
        assert!(
            err.contains("has stateVersion 2, and this release reads version 1"),
            "{err}"
        );
        json.as_object_mut().unwrap().remove("stateVersion");
        let err = SchemaState::from_json(json).unwrap_err();
        assert!(err.contains("no stateVersion"), "{err}");
    }
}
