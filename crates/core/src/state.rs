//! The state a successful apply records: the resource's outputs.
//!
//! It describes what was applied (fingerprint, statement count), where it
//! landed (target, cluster identity) and which pod objects were covered (name
//! and uid). It never holds a statement, a setting value, a kubeconfig or a
//! credential: state is stored by Alchemy and shown in plans.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::config::{DEFAULT_CONTAINER, Target};
use crate::error::ConfigIssue;
use crate::transport::PodInfo;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaState {
    pub fingerprint: String,
    /// ISO-8601 UTC time of the apply that wrote this state.
    pub applied_at: String,
    pub statement_count: u32,
    /// `client.database` the statements ran in.
    pub database: String,
    pub target: RecordedTarget,
    /// Sorted pod names; the same pods as `pods`, kept for readers of older state.
    pub pod_names: Vec<String>,
    /// Sorted by name. Absent in state written before uids were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<Vec<PodRef>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedTarget {
    pub namespace: String,
    pub pod_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
}

impl RecordedTarget {
    pub fn from_target(target: &Target) -> Self {
        Self {
            namespace: target.namespace.clone(),
            pod_selector: target.pod_selector.clone(),
            container: Some(target.container.clone()),
        }
    }

    /// Same place as `target`? A recorded target without a container was
    /// written with the default one.
    pub fn matches(&self, target: &Target) -> bool {
        self.namespace == target.namespace
            && self.pod_selector == target.pod_selector
            && self.container.as_deref().unwrap_or(DEFAULT_CONTAINER) == target.container
    }

    /// The resolved target this state says the statements were applied to.
    pub fn to_target(&self) -> Target {
        Target {
            namespace: self.namespace.clone(),
            pod_selector: self.pod_selector.clone(),
            container: self
                .container
                .clone()
                .unwrap_or_else(|| DEFAULT_CONTAINER.to_owned()),
        }
    }
}

/// One covered pod object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodRef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl PodRef {
    pub fn of(pod: &PodInfo) -> Self {
        Self {
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        }
    }
}

impl SchemaState {
    /// Problems with the recorded target, checked by the same rules as the
    /// props' `target` (paths under `state.target`), and any way it differs
    /// from `target`, the props' one. Empty when the state may be acted on.
    pub fn target_issues(&self, resource_id: &str, target: &Target) -> Vec<ConfigIssue> {
        let as_props = serde_json::json!({
            "target": {
                "namespace": self.target.namespace,
                "podSelector": self.target.pod_selector,
                "container": self.target.container.as_deref().unwrap_or(DEFAULT_CONTAINER),
            },
            "statements": ["SELECT 1"],
        });
        if let Err(err) = crate::validate::validate(resource_id, &as_props) {
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
                    crate::reconcile::selector_text(&recorded.pod_selector),
                    crate::reconcile::selector_text(&target.pod_selector)
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
    /// name and uid, so a replaced pod (same name, new uid) is a change; state
    /// without `pods` can only be compared by name.
    pub fn pod_set_matches(&self, live: &[PodRef]) -> bool {
        match &self.pods {
            Some(recorded) => {
                let recorded: BTreeSet<&PodRef> = recorded.iter().collect();
                let live: BTreeSet<&PodRef> = live.iter().collect();
                recorded == live
            }
            None => {
                let recorded: BTreeSet<&str> = self.pod_names.iter().map(String::as_str).collect();
                let live: BTreeSet<&str> = live.iter().map(|p| p.name.as_str()).collect();
                recorded == live
            }
        }
    }

    /// Pods this state proves were applied to, by name and uid. State without
    /// uids proves nothing about the pod objects alive now.
    pub fn covered_pods(&self) -> Vec<PodRef> {
        self.pods
            .iter()
            .flatten()
            .filter(|p| p.uid.is_some())
            .cloned()
            .collect()
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

    fn state(pods: Option<Vec<PodRef>>, names: &[&str]) -> SchemaState {
        SchemaState {
            fingerprint: "f".into(),
            applied_at: "2026-01-01T00:00:00.000Z".into(),
            statement_count: 1,
            database: "default".into(),
            target: RecordedTarget {
                namespace: "ns".into(),
                pod_selector: BTreeMap::new(),
                container: None,
            },
            pod_names: names.iter().map(|s| s.to_string()).collect(),
            pods,
            cluster_id: None,
        }
    }

    #[test]
    fn uid_is_the_identity() {
        let s = state(Some(vec![pod("a", "1"), pod("b", "2")]), &["a", "b"]);
        assert!(s.pod_set_matches(&[pod("b", "2"), pod("a", "1")]));
        assert!(!s.pod_set_matches(&[pod("a", "1"), pod("b", "3")]), "replacement");
        assert!(!s.pod_set_matches(&[pod("a", "1")]), "removal");
        assert!(
            !s.pod_set_matches(&[pod("a", "1"), pod("b", "2"), pod("c", "4")]),
            "addition"
        );
    }

    #[test]
    fn state_without_uids_falls_back_to_names() {
        let s = state(None, &["a", "b"]);
        assert!(s.pod_set_matches(&[pod("a", "9"), pod("b", "8")]));
        assert!(!s.pod_set_matches(&[pod("a", "9")]));
        assert!(s.covered_pods().is_empty());
    }

    #[test]
    fn serializes_as_the_documented_outputs() {
        let s = state(Some(vec![pod("a", "1")]), &["a"]);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "fingerprint": "f",
                "appliedAt": "2026-01-01T00:00:00.000Z",
                "statementCount": 1,
                "database": "default",
                "target": { "namespace": "ns", "podSelector": {} },
                "podNames": ["a"],
                "pods": [{ "name": "a", "uid": "1" }]
            })
        );
        let back: SchemaState = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn recorded_target_without_container_means_the_default() {
        let t = Target {
            namespace: "ns".into(),
            pod_selector: BTreeMap::new(),
            container: "clickhouse".into(),
        };
        let r = RecordedTarget {
            namespace: "ns".into(),
            pod_selector: BTreeMap::new(),
            container: None,
        };
        assert!(r.matches(&t));
        let other = Target {
            container: "server".into(),
            ..t
        };
        assert!(!r.matches(&other));
    }
}
