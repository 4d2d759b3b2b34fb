//! A kubeconfig that kubectl and kube-rs read unchanged: one context per token, so a test picks a
//! permission set with `--context` (or `KUBECONFIG` + `current-context`).

use base64::Engine;

use crate::auth::Tokens;

pub(crate) struct KubeconfigInput<'a> {
    pub(crate) port: u16,
    pub(crate) ca_pem: &'a str,
    pub(crate) tokens: &'a Tokens,
    pub(crate) namespace: &'a str,
}

pub(crate) const CONTEXT_ADMIN: &str = "sandbox";
pub(crate) const CONTEXT_MINIMAL: &str = "sandbox-minimal";
pub(crate) const CONTEXT_NO_EXEC: &str = "sandbox-no-exec";
pub(crate) const CONTEXT_LEASE: &str = "sandbox-lease";
/// No credentials: every request but /version is 401.
pub(crate) const CONTEXT_ANONYMOUS: &str = "sandbox-anonymous";
/// Admin token, `insecure-skip-tls-verify` instead of the CA.
pub(crate) const CONTEXT_INSECURE: &str = "sandbox-insecure";

pub(crate) fn render(i: &KubeconfigInput<'_>) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(i.ca_pem);
    let server = format!("https://127.0.0.1:{}", i.port);
    let ns = i.namespace;
    let ctx = |name: &str, cluster: &str, user: &str| {
        format!("- name: {name}\n  context:\n    cluster: {cluster}\n    user: {user}\n    namespace: {ns}\n")
    };
    let mut out = String::new();
    out.push_str("apiVersion: v1\nkind: Config\npreferences: {}\nclusters:\n");
    out.push_str(&format!(
        "- name: sandbox\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n"
    ));
    out.push_str(&format!(
        "- name: sandbox-insecure\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\n"
    ));
    out.push_str("users:\n");
    for (user, token) in [
        ("sandbox-admin", &i.tokens.admin),
        ("sandbox-minimal", &i.tokens.minimal),
        ("sandbox-no-exec", &i.tokens.no_exec),
        ("sandbox-lease", &i.tokens.lease),
    ] {
        out.push_str(&format!("- name: {user}\n  user:\n    token: {token}\n"));
    }
    out.push_str("- name: sandbox-anonymous\n  user: {}\n");
    out.push_str("contexts:\n");
    out.push_str(&ctx(CONTEXT_ADMIN, "sandbox", "sandbox-admin"));
    out.push_str(&ctx(CONTEXT_MINIMAL, "sandbox", "sandbox-minimal"));
    out.push_str(&ctx(CONTEXT_NO_EXEC, "sandbox", "sandbox-no-exec"));
    out.push_str(&ctx(CONTEXT_LEASE, "sandbox", "sandbox-lease"));
    out.push_str(&ctx(CONTEXT_ANONYMOUS, "sandbox", "sandbox-anonymous"));
    out.push_str(&ctx(CONTEXT_INSECURE, "sandbox-insecure", "sandbox-admin"));
    out.push_str(&format!("current-context: {CONTEXT_ADMIN}\n"));
    out
}
