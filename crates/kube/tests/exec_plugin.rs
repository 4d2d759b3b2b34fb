//! A real exec credential plugin (kubeconfig `users[].user.exec`) that fails
//! after printing the secret it was given in `exec.env` to stdout and stderr:
//! the secret, its argument and its output must not reach any error text
//! (message, Display, Debug, the project error), whether it fails when the
//! client is built or when kube-rs refreshes an expired token before a request.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use clickhouse_schema_core::config::KubeConfigOptions;
use clickhouse_schema_core::transport::{PodLister, TransportErrorKind};
use clickhouse_schema_core::{ClickHouseSchemaError, ErrorKind};
use clickhouse_schema_kube::{KubeTransport, connect};

const ENV_SECRET: &str = "hvs.Pl4ginEnvS3cret";
const ARG_SECRET: &str = "ArgS3cret42";

/// The plugin: fails, echoing the env secret and its argument on both streams.
/// With `succeed_once`, its first run hands out a token that has already expired.
fn plugin(dir: &Path, succeed_once: bool) -> PathBuf {
    let path = dir.join("get-token.sh");
    let first = if succeed_once {
        r#"if [ ! -e "$0.ran" ]; then
  : > "$0.ran"
  echo '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"first","expirationTimestamp":"2000-01-01T00:00:00Z"}}'
  exit 0
fi
"#
    } else {
        ""
    };
    let script = format!(
        "#!/bin/sh\n{first}echo \"{{\\\"token\\\": \\\"$VAULT_TOKEN\\\"}} $1\"\necho \"vault: VAULT_TOKEN=$VAULT_TOKEN $1\" >&2\nexit 1\n"
    );
    std::fs::write(&path, script).expect("plugin written");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("executable");
    path
}

/// A kubeconfig whose user runs `plugin` with the secret in `exec.env`.
/// `interactive_mode: Never` makes kube-rs capture stderr too (otherwise it
/// goes to this process's stderr, as with kubectl).
fn kubeconfig(dir: &Path, plugin: &Path, interactive_mode: &str) -> KubeConfigOptions {
    let text = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:1
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: {}
      args: [\"--secret={ARG_SECRET}\"]
      env:
      - name: VAULT_TOKEN
        value: {ENV_SECRET}
      interactiveMode: {interactive_mode}
contexts:
- name: c
  context: {{cluster: c, user: u}}
current-context: c
",
        plugin.display()
    );
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).expect("kubeconfig written");
    KubeConfigOptions {
        kubeconfig_path: Some(path.display().to_string()),
        ..Default::default()
    }
}

fn assert_clean(what: &str, text: &str) {
    for secret in [ENV_SECRET, ARG_SECRET, "VAULT_TOKEN=hvs"] {
        assert!(!text.contains(secret), "{what} holds {secret}: {text}");
    }
}

#[tokio::test]
async fn a_failing_plugin_leaks_nothing_when_connecting() {
    for mode in ["Never", "IfAvailable"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let o = kubeconfig(dir.path(), &plugin(dir.path(), false), mode);
        let err = connect(Some(&o)).await.expect_err("the plugin fails");
        // What a user reads: that the plugin failed, and how.
        assert!(err.message.contains("credential plugin"), "{}", err.message);
        assert!(err.message.contains("exit status: 1"), "{}", err.message);
        assert_clean("message", &err.message);
        assert_clean("Display", &err.to_string());
        assert_clean("Debug", &format!("{err:?}"));
        let project = ClickHouseSchemaError::from(err);
        assert_eq!(project.kind, ErrorKind::KubernetesApi);
        assert_clean("project error", &project.to_string());
        assert_clean("project error Debug", &format!("{project:?}"));
    }
}

#[tokio::test]
async fn a_plugin_failing_on_token_refresh_leaks_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = plugin(dir.path(), true);
    let o = kubeconfig(dir.path(), &plugin, "Never");
    let conn = connect(Some(&o)).await.expect("first run hands out a token");
    assert!(plugin.with_extension("sh.ran").exists(), "the plugin ran once");
    // The token has expired, so kube-rs runs the plugin again before sending.
    let err = KubeTransport::from(&conn)
        .list_pods("default", &Default::default())
        .await
        .expect_err("the refresh fails");
    assert_eq!(err.kind, TransportErrorKind::Refused);
    assert!(err.message.contains("credential plugin"), "{}", err.message);
    assert!(err.message.contains("exit status: 1"), "{}", err.message);
    assert_clean("message", &err.message);
    assert_clean("Display", &err.to_string());
    assert_clean("Debug", &format!("{err:?}"));
}
