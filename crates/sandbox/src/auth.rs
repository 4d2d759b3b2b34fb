//! Bearer tokens with RBAC-like per-verb rules. The product needs exactly `list pods` and
//! `create pods/exec`; the `minimal` user has just those, so a test proves nothing more is used.
//! The `lease` user adds what taking a `coordination.k8s.io` Lease against concurrent deploys needs.

use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::status;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) token: String,
    /// `(verb, API group, resource)` triples as a Role's rules spell them (core group `""`);
    /// `("*", "*", "*")` allows everything.
    pub(crate) rules: Vec<(String, String, String)>,
}

/// Bearer tokens of the sandbox's four users, random per sandbox; the kubeconfig has a context for
/// each.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tokens {
    /// `sandbox-admin` (context `sandbox`): every verb, and the only user the control API accepts.
    pub admin: String,
    /// `sandbox-minimal` (context `sandbox-minimal`): only `list pods` and `create pods/exec`.
    pub minimal: String,
    /// `sandbox-no-exec` (context `sandbox-no-exec`): list, get and watch pods, but no exec.
    pub no_exec: String,
    /// `sandbox-lease` (context `sandbox-lease`): the minimal user's rights plus get, list, watch,
    /// create, update, patch and delete on `coordination.k8s.io` leases. Empty in a sandbox.json
    /// written before the user existed.
    #[serde(default)]
    pub lease: String,
}

pub(crate) const ADMIN_USER: &str = "sandbox-admin";
pub(crate) const MINIMAL_USER: &str = "sandbox-minimal";
pub(crate) const NO_EXEC_USER: &str = "sandbox-no-exec";
pub(crate) const LEASE_USER: &str = "sandbox-lease";

/// The API group of Lease objects.
pub(crate) const COORDINATION: &str = "coordination.k8s.io";

/// A rule on the core API group (pods).
fn rule(verb: &str, resource: &str) -> (String, String, String) {
    group_rule(verb, "", resource)
}

fn group_rule(verb: &str, group: &str, resource: &str) -> (String, String, String) {
    (verb.to_string(), group.to_string(), resource.to_string())
}

pub(crate) fn default_users() -> Vec<User> {
    let token = || uuid::Uuid::new_v4().simple().to_string();
    vec![
        User {
            name: ADMIN_USER.into(),
            token: token(),
            rules: vec![group_rule("*", "*", "*")],
        },
        User {
            name: MINIMAL_USER.into(),
            token: token(),
            rules: vec![rule("list", "pods"), rule("create", "pods/exec")],
        },
        // get as well as list, so that `kubectl exec` (which GETs the pod first) reaches the exec
        // call and is refused there, as with a real role lacking pods/exec.
        User {
            name: NO_EXEC_USER.into(),
            token: token(),
            rules: vec![rule("list", "pods"), rule("get", "pods"), rule("watch", "pods")],
        },
        // Exactly what a deploy guarded by a Lease needs on top of the minimal role.
        User {
            name: LEASE_USER.into(),
            token: token(),
            rules: [rule("list", "pods"), rule("create", "pods/exec")]
                .into_iter()
                .chain(
                    ["get", "list", "watch", "create", "update", "patch", "delete"]
                        .iter()
                        .map(|v| group_rule(v, COORDINATION, "leases")),
                )
                .collect(),
        },
    ]
}

impl User {
    pub(crate) fn allows(&self, verb: &str, group: &str, resource: &str) -> bool {
        self.rules.iter().any(|(v, g, r)| {
            (v == "*" || v == verb) && (g == "*" || g == group) && (r == "*" || r == resource)
        })
    }
}

/// Why a request was refused; rendered as the apiserver's 401/403 Status.
#[derive(Debug)]
pub(crate) enum Denied {
    Unauthorized,
    Forbidden {
        message: String,
        details: serde_json::Value,
    },
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        match self {
            Denied::Unauthorized => status::unauthorized(),
            Denied::Forbidden { message, details } => {
                status::failure(403, "Forbidden", &message, Some(details))
            }
        }
    }
}

pub(crate) struct Authorizer {
    pub(crate) users: Vec<User>,
}

/// What a request wants to do, for the authorization check and its message.
pub(crate) struct Attributes<'a> {
    pub(crate) verb: &'a str,
    /// API group; `""` for the core group (pods).
    pub(crate) group: &'a str,
    pub(crate) resource: &'a str,
    pub(crate) namespace: Option<&'a str>,
    pub(crate) name: Option<&'a str>,
}

impl Authorizer {
    pub(crate) fn tokens(&self) -> Tokens {
        let find = |n: &str| {
            self.users
                .iter()
                .find(|u| u.name == n)
                .map(|u| u.token.clone())
                .unwrap_or_default()
        };
        Tokens {
            admin: find(ADMIN_USER),
            minimal: find(MINIMAL_USER),
            no_exec: find(NO_EXEC_USER),
            lease: find(LEASE_USER),
        }
    }

    pub(crate) fn authenticate(&self, headers: &HeaderMap) -> Option<&User> {
        let value = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))?
            .trim();
        self.users.iter().find(|u| u.token == token)
    }

    /// 401 without a known token, 403 with a message in the apiserver's words.
    pub(crate) fn authorize(&self, headers: &HeaderMap, attrs: Attributes<'_>) -> Result<User, Denied> {
        let user = self.authenticate(headers).ok_or(Denied::Unauthorized)?;
        if user.allows(attrs.verb, attrs.group, attrs.resource) {
            return Ok(user.clone());
        }
        // The apiserver names the resource with its group (`leases.coordination.k8s.io`) in the
        // subject and in details.kind, without the subresource.
        let resource = attrs.resource.split('/').next().unwrap_or(attrs.resource);
        let group_resource = if attrs.group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{}", attrs.group)
        };
        let subject = match attrs.name {
            Some(n) => format!("{group_resource} \"{n}\""),
            None => group_resource.to_string(),
        };
        let scope = match attrs.namespace {
            Some(ns) => format!(" in the namespace \"{ns}\""),
            None => " at the cluster scope".to_string(),
        };
        let message = format!(
            "{subject} is forbidden: User \"{}\" cannot {} resource \"{}\" in API group \"{}\"{scope}",
            user.name, attrs.verb, attrs.resource, attrs.group
        );
        let mut details = json!({"kind": resource});
        if let Some(n) = attrs.name {
            details["name"] = json!(n);
        }
        if !attrs.group.is_empty() {
            details["group"] = json!(attrs.group);
        }
        Err(Denied::Forbidden { message, details })
    }
}
