//! `sandbox start|serve|stop`: `start` launches a detached `serve` and returns once the sandbox
//! answers; `stop` ends exactly the process `start` recorded, then sweeps leftovers of the hosts.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};

use crate::exec_protocol::ExecProtocol;
use crate::sandbox::{RuntimeKind, Sandbox, SandboxInfo, SandboxOptions};
use crate::topology::Layout;
use clickhouse_schema_sandbox_hosts::Engine;

#[derive(Parser)]
#[command(
    name = "sandbox",
    about = "Test Kubernetes API whose pods are real ClickHouse servers"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a detached sandbox and wait until it is ready.
    Start(StartArgs),
    /// Run the sandbox in the foreground until SIGTERM/SIGINT (what `start` launches).
    Serve(StartArgs),
    /// Stop the sandbox `start` launched from this directory; quiet when none runs.
    Stop(DirArgs),
    /// Print sandbox.json when a sandbox runs from this directory.
    Status(DirArgs),
}

#[derive(Args, Clone)]
struct StartArgs {
    /// Replicas per shard, comma-separated: `2,1` is shard 0 with two replicas and shard 1 with one.
    #[arg(long, env = "SANDBOX_LAYOUT", conflicts_with_all = ["pods", "shards", "replicas"])]
    layout: Option<Layout>,
    /// One shard of this many replicas (the default: 3).
    #[arg(long, conflicts_with_all = ["shards", "replicas"])]
    pods: Option<u32>,
    /// This many shards (of `--replicas` replicas, default 1).
    #[arg(long)]
    shards: Option<u32>,
    /// Replicas per shard (of `--shards` shards, default 1).
    #[arg(long)]
    replicas: Option<u32>,
    #[arg(long, default_value = ".sandbox")]
    dir: PathBuf,
    /// Hosts instance 1..=200 (subnet 10.250.<K>.0/24); default: first free one.
    #[arg(long)]
    instance: Option<u8>,
    /// API server port on 127.0.0.1; 0: ephemeral.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// No ClickHouse: exec runs on this machine (protocol experiments only).
    #[arg(long)]
    local: bool,
    /// Exec subprotocols the API server accepts, most preferred first (comma list of v5, v4).
    /// `v4` alone: a cluster older than Kubernetes 1.30.
    #[arg(long, value_delimiter = ',', default_value = "v5,v4")]
    exec_protocols: Vec<ExecProtocol>,
    /// The pods' ClickHouse: `18.16` (servers from Debian's package) or `modern` (26.9 from
    /// chdb-core: a stand-in client per pod, no server process; scripts/install-modern-engine.sh).
    #[arg(long, env = "SANDBOX_ENGINE", default_value = "18.16", value_parser = parse_engine)]
    engine: Engine,
    /// Leave the process of an exec whose connection dropped running to its end, as a real
    /// kubelet does (by default it is killed).
    #[arg(long)]
    keep_dropped_execs: bool,
    /// Milliseconds every exec waits before its process starts, as a real cluster's API server,
    /// kubelet and container runtime take (commonly 100 to 300); one pod's with
    /// `PUT /sandbox/exec-setup`.
    #[arg(long, default_value_t = 0)]
    exec_setup_ms: u64,
    /// Seconds `start` waits for readiness.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
}

/// `--engine`: the version a user knows each engine by (README, "The second engine").
fn parse_engine(s: &str) -> Result<Engine, String> {
    match s {
        "18.16" | "legacy" => Ok(Engine::Server1816),
        "modern" | "26.9" => Ok(Engine::Modern),
        _ => Err(format!("unknown engine {s:?}: `18.16` or `modern`")),
    }
}

#[derive(Args)]
struct DirArgs {
    #[arg(long, default_value = ".sandbox")]
    dir: PathBuf,
}

/// What the `sandbox` binary runs: parses the command line, runs the subcommand and turns its
/// error into a `sandbox: ...` line on stderr and a failing exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Cmd::Start(a) => start(a),
        Cmd::Serve(a) => serve(a),
        Cmd::Stop(d) => stop(&d.dir),
        Cmd::Status(d) => status(&d.dir),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sandbox: {e}");
            ExitCode::FAILURE
        }
    }
}

impl StartArgs {
    /// The one layout the options describe.
    fn layout(&self) -> Result<Layout, String> {
        let layout = match (&self.layout, self.pods, self.shards, self.replicas) {
            (Some(layout), ..) => layout.clone(),
            (None, Some(pods), ..) => Layout::replicas(pods),
            (None, None, None, None) => Layout::replicas(3),
            (None, None, shards, replicas) => Layout::grid(shards.unwrap_or(1), replicas.unwrap_or(1)),
        };
        if layout.pods() == 0 {
            return Err(format!(
                "layout {layout} has no pod: give at least one shard of one replica"
            ));
        }
        Ok(layout)
    }
}

fn pid_file(dir: &Path) -> PathBuf {
    dir.join("sandbox.pid")
}
fn info_file(dir: &Path) -> PathBuf {
    dir.join("sandbox.json")
}

fn alive(pid: i32) -> bool {
    unsafe { libc::kill(pid, 0) == 0 }
}

/// The recorded PID, only if that process is still our `sandbox serve` (PIDs get reused).
fn running_pid(dir: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(pid_file(dir)).ok()?.trim().parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    (alive(pid) && args.iter().any(|a| *a == b"serve")).then_some(pid)
}

fn start(a: StartArgs) -> Result<(), String> {
    let begun = Instant::now();
    std::fs::create_dir_all(&a.dir).map_err(|e| format!("creating {}: {e}", a.dir.display()))?;
    let dir = std::fs::canonicalize(&a.dir).map_err(|e| e.to_string())?;
    if let Some(pid) = running_pid(&dir) {
        return Err(format!(
            "a sandbox already runs from {} (pid {pid}); `sandbox stop` first",
            dir.display()
        ));
    }
    let _ = std::fs::remove_file(info_file(&dir));
    let log_path = dir.join("sandbox.log");
    let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let layout = a.layout()?;
    let mut cmd = Command::new(exe);
    cmd.arg("serve")
        .arg("--layout")
        .arg(layout.to_string())
        .arg("--dir")
        .arg(&dir);
    cmd.arg("--port").arg(a.port.to_string());
    if let Some(i) = a.instance {
        cmd.arg("--instance").arg(i.to_string());
    }
    if a.local {
        cmd.arg("--local");
    }
    let protocols: Vec<&str> = a.exec_protocols.iter().map(|p| p.as_str()).collect();
    cmd.arg("--exec-protocols").arg(protocols.join(","));
    cmd.arg("--engine").arg(a.engine.version());
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .env_remove("SANDBOX_LAYOUT")
        .env_remove("SANDBOX_ENGINE");
    // Its own session: the sandbox outlives this command and the terminal's signals.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| format!("spawning serve: {e}"))?;
    std::fs::write(pid_file(&dir), format!("{}\n", child.id())).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    loop {
        if let Ok(text) = std::fs::read_to_string(info_file(&dir))
            && let Ok(info) = serde_json::from_str::<SandboxInfo>(&text)
            && info.pid == child.id()
        {
            println!(
                "sandbox ready in {:.2}s: {} pods of ClickHouse {}, layout {} (replicas per shard): {}; API {}\nexport KUBECONFIG={}",
                begun.elapsed().as_secs_f64(),
                info.pods.len(),
                info.engine,
                info.layout,
                info.pods.join(", "),
                info.server,
                info.kubeconfig.display()
            );
            return Ok(());
        }
        if let Ok(Some(st)) = child.try_wait() {
            let _ = std::fs::remove_file(pid_file(&dir));
            let tail = std::fs::read_to_string(&log_path).unwrap_or_default();
            return Err(format!(
                "serve exited with {st} before it was ready; log:\n{tail}"
            ));
        }
        if Instant::now() > deadline {
            let _ = stop(&dir);
            return Err(format!(
                "not ready after {} s; see {}",
                a.timeout,
                log_path.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn serve(a: StartArgs) -> Result<(), String> {
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
        let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
        let opts = SandboxOptions {
            layout: a.layout()?,
            dir: Some(a.dir.clone()),
            instance: a.instance,
            port: a.port,
            runtime: if a.local {
                RuntimeKind::Local
            } else {
                RuntimeKind::Hosts
            },
            exec_protocols: a.exec_protocols.clone(),
            engine: a.engine,
            keep_dropped_execs: a.keep_dropped_execs,
            exec_setup_ms: a.exec_setup_ms,
            ..SandboxOptions::default()
        };
        let begun = Instant::now();
        let sandbox = Sandbox::start(opts).await.map_err(|e| e.to_string())?;
        for left in sandbox.reclaimed() {
            println!("sandbox: removed what a crashed sandbox left on this instance: {left}");
        }
        println!(
            "sandbox serving on {} ({:.2}s)",
            sandbox.server_url(),
            begun.elapsed().as_secs_f64()
        );
        let _ = std::io::stdout().flush();
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        println!("sandbox: shutting down");
        let dir = sandbox.dir().to_path_buf();
        let r = sandbox.shutdown().await.map_err(|e| e.to_string());
        let _ = std::fs::remove_file(info_file(&dir));
        r
    })
}

fn stop(dir: &Path) -> Result<(), String> {
    if !dir.exists() {
        return Ok(());
    }
    if let Some(pid) = running_pid(dir) {
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if alive(pid) {
            eprintln!("sandbox: pid {pid} ignored SIGTERM for 30 s, killing it");
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        println!("sandbox stopped (pid {pid})");
    }
    let run = dir.join("run");
    if run.exists() {
        clickhouse_schema_sandbox_hosts::cleanup_stale(&run).map_err(|e| format!("cleanup: {e}"))?;
    }
    let _ = std::fs::remove_file(pid_file(dir));
    let _ = std::fs::remove_file(info_file(dir));
    Ok(())
}

fn status(dir: &Path) -> Result<(), String> {
    match running_pid(dir) {
        Some(_) => {
            let text = std::fs::read_to_string(info_file(dir)).map_err(|e| e.to_string())?;
            println!("{text}");
            Ok(())
        }
        None => Err(format!("no sandbox runs from {}", dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_by_their_names_and_an_unknown_one_refused() {
        assert_eq!(parse_engine("18.16"), Ok(Engine::Server1816));
        assert_eq!(parse_engine("modern"), Ok(Engine::Modern));
        assert_eq!(parse_engine("26.9"), Ok(Engine::Modern));
        assert_eq!(
            parse_engine("25.8"),
            Err("unknown engine \"25.8\": `18.16` or `modern`".to_string())
        );
    }
}
