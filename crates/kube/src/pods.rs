//! Listing the server pods by label selector.

use std::collections::BTreeMap;

use clickhouse_schema_core::transport::{PodInfo, TransportError, TransportErrorKind, label_selector};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::error::from_kube;

/// The core's bound on a pod list, shared with the JavaScript transport.
pub use clickhouse_schema_core::transport::LIST_TIMEOUT;

pub(crate) async fn list(
    client: &kube::Client,
    namespace: &str,
    selector: &BTreeMap<String, String>,
) -> Result<Vec<PodInfo>, TransportError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().labels(&selector_string(selector));
    let list = tokio::time::timeout(LIST_TIMEOUT, api.list(&params))
        .await
        .map_err(|_| {
            TransportError::new(
                TransportErrorKind::Timeout,
                format!(
                    "the API server did not answer the pod list within {} s",
                    LIST_TIMEOUT.as_secs()
                ),
            )
        })?
        .map_err(|e| from_kube(&e))?;
    Ok(list.items.iter().map(pod_info).collect())
}

/// `k=v,k2=v2`: the core's equality selector.
pub fn selector_string(selector: &BTreeMap<String, String>) -> String {
    label_selector(selector)
}

/// The facts the core reconciles on (name, uid, phase, readiness, deletion,
/// containers) read from a Kubernetes pod object.
pub fn pod_info(pod: &Pod) -> PodInfo {
    let status = pod.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        });
    PodInfo {
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone(),
        ready,
        phase: status.and_then(|s| s.phase.clone()),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        containers: pod
            .spec
            .as_ref()
            .map(|spec| spec.containers.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    #[test]
    fn selector_is_sorted_equality_terms() {
        let mut s = BTreeMap::new();
        s.insert("clickhouse.altinity.com/chi".to_owned(), "orders".to_owned());
        s.insert("app".to_owned(), "ch".to_owned());
        assert_eq!(selector_string(&s), "app=ch,clickhouse.altinity.com/chi=orders");
    }

    #[test]
    fn pod_fields_map_to_pod_info() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("chi-0".into()),
                uid: Some("u-1".into()),
                deletion_timestamp: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![
                    Container {
                        name: "clickhouse".into(),
                        ..Default::default()
                    },
                    Container {
                        name: "log".into(),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![
                    PodCondition {
                        type_: "PodScheduled".into(),
                        status: "True".into(),
                        ..Default::default()
                    },
                    PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
        };
        assert_eq!(
            pod_info(&pod),
            PodInfo {
                name: "chi-0".into(),
                uid: Some("u-1".into()),
                ready: true,
                phase: Some("Running".into()),
                terminating: true,
                containers: vec!["clickhouse".into(), "log".into()],
            }
        );
    }

    #[test]
    fn a_bare_pod_is_not_ready_and_has_no_containers() {
        let info = pod_info(&Pod::default());
        assert!(!info.ready);
        assert!(!info.terminating);
        assert_eq!(info.phase, None);
        assert!(info.containers.is_empty());
        let pod = Pod {
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "False".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(!pod_info(&pod).ready);
    }
}
